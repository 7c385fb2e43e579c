"""Physics-R1's rule-based answer reward ``physics_match`` (spec section 7(b), from the authors'
``reward_physics.py`` as the spec describes it; Physics-R1 audit paper).

The rules, in order:

1. **Extraction**: the content of the last ``\\boxed{...}`` of the completion, found by brace
   counting (so ``\\boxed{\\frac{1}{2}}`` keeps its inner braces); an unbalanced last box (cut-off
   generation) falls back to the previous complete one.
2. **MCQ**: when the gold is a single choice letter (``B``, ``(B)``, ``B.``, ``B)``; A-E), the
   prediction's letter is read from the box (``(B)``, ``B``, ``\\text{B}``, ``B) 5 m/s``) or, with no
   box, from the last ``answer is (B)`` / ``Answer: B``; equal letters score 1.
3. **Multipart**: the gold is split on ``(a) ... (b) ...`` labels, ``a. ... b. ...`` labels, or
   top-level ``;`` (outside braces); the prediction the same way. Every part must match, in the
   gold's order (problem-level AND). [inferred] When the gold has k > 1 parts and the last box
   holds one, the last k boxes are read as the k parts (``(a) \\boxed{3} (b) \\boxed{4}``).
4. **Part match**: both parts parse to numbers (:func:`~reasonrl.rewards.latex.parse_quantity`:
   LaTeX to text, units stripped) that agree within ``rtol`` 1e-2 / ``atol`` 1e-6 of the gold; else
   the parts' plain texts (:func:`~reasonrl.rewards.latex.latex_to_text`, spaces removed, case
   folded) are equal (the spec's *strict* mode); ``symbolic=True`` [inferred, off by default: the
   spec's training reward is rule-based] adds math-verify equivalence for non-numeric parts.

A completion with no answer to read scores 0 and is counted (``unparsed_frac``), never an
exception. A gold answer that cannot be split or is empty raises :class:`~reasonrl.errors.UserError`
naming the row and the gold (a data error that would otherwise score every row 0).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from .answers import extract_boxed
from .base import Reward, RewardResult
from .match import column_values
from .physics_dense import dense_metrics, dense_terms, dense_value
from .physics_parts import ANSWER_IS, Judged, gold_parts, mcq_letter, parts_match, predicted_parts, split_parts

__all__ = ["PhysicsMatch", "mcq_letter", "split_parts", "parts_match", "gold_parts", "physics_metrics"]


@dataclass
class PhysicsMatch(Reward):
    """Binary Physics-R1 answer reward (module docstring). Options: ``rtol``, ``atol``, ``symbolic``,
    ``column`` (the gold's column); ``dense=True`` gives the spec's dense reward instead
    (:mod:`.physics_dense`: ``dense_answer`` and the weights ``w_ans`` .. ``w_cons``, the spec's defaults).
    Metrics ``reward/<name>/``: ``unparsed_frac`` (no answer read), ``mcq_frac``, ``part_acc`` (share of
    gold parts matched, over all rows), ``count_mismatch_frac`` (a parsed answer with another number of
    parts than the gold)."""

    rtol: float = 1e-2
    atol: float = 1e-6
    symbolic: bool = False
    column: str = "answer"
    name: str = "physics_match"
    # the optional dense reward (spec 7(b), the authors' DENSE_REWARD=0 default): rewards.physics_match.dense=true
    dense: bool = False
    dense_answer: str = "and"  # r_ans: the AND verdict, or "fraction": the share of parts right
    w_ans: float = 1.0
    w_fmt: float = 0.10
    w_dim: float = 0.15
    w_sym: float = 0.20
    w_cons: float = -0.25

    def __post_init__(self):
        if self.rtol < 0 or self.atol < 0:
            raise ValueError(f"physics_match: rtol and atol must be >= 0, got {self.rtol}, {self.atol}")
        if self.dense_answer not in ("and", "fraction"):
            raise ValueError(f"physics_match: dense_answer must be 'and' or 'fraction', got {self.dense_answer!r}")

    def judge(self, completion: str, gold: Any, where: str = "a row") -> Judged:
        letter, gparts = gold_parts(gold, where)
        if letter is not None:
            box = extract_boxed(completion, loose=True)
            found = ANSWER_IS.findall(completion) if box is None else []
            got = mcq_letter(box) if box is not None else (found[-1].upper() if found else None)
            hit = got == letter
            return Judged(float(hit), got is not None, True, [hit], int(got is not None))
        pparts = predicted_parts(completion, len(gparts))
        if pparts is None:
            return Judged(0.0, False, False, [False] * len(gparts), 0)
        hits = [
            i < len(pparts) and parts_match(pparts[i], g, self.rtol, self.atol, self.symbolic)
            for i, g in enumerate(gparts)
        ]
        ok = len(pparts) == len(gparts) and all(hits)
        return Judged(float(ok), True, False, hits, len(pparts))

    def judge_all(self, completions: Sequence[str], **columns: Any) -> list[Judged | None]:
        golds = column_values(columns, self.column, len(completions))
        return [None if g is None else self.judge(c, g, f"row {i}") for i, (c, g) in enumerate(zip(completions, golds))]

    def score(self, prompts: Sequence[str], completions: Sequence[str], **columns: Any) -> RewardResult:
        judged = self.judge_all(completions, **columns)
        metrics = physics_metrics(self.name, judged)
        if not self.dense:
            return RewardResult([None if j is None else j.score for j in judged], metrics)
        golds = column_values(columns, self.column, len(completions))
        weights = {"ans": self.w_ans, "fmt": self.w_fmt, "dim": self.w_dim, "sym": self.w_sym, "cons": self.w_cons}
        terms = [
            None if j is None else dense_terms(c, g, j, self.dense_answer)
            for c, g, j in zip(completions, golds, judged)
        ]
        values = [None if t is None else dense_value(t, weights) for t in terms]
        return RewardResult(values, {**metrics, **dense_metrics(self.name, [t for t in terms if t is not None])})


def physics_metrics(name: str, judged: Sequence[Judged | None]) -> dict[str, float]:
    rows = [j for j in judged if j is not None]
    n = max(len(rows), 1)
    parsed = [j for j in rows if j.parsed]
    return {
        f"reward/{name}/unparsed_frac": (len(rows) - len(parsed)) / n,
        f"reward/{name}/mcq_frac": sum(j.mcq for j in rows) / n,
        f"reward/{name}/part_acc": sum(sum(j.part_hits) / len(j.part_hits) for j in rows) / n,
        f"reward/{name}/count_mismatch_frac": sum(j.n_pred != len(j.part_hits) for j in parsed) / n,
    }
