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

import re
from dataclasses import dataclass
from typing import Any, Sequence

from ..errors import UserError
from .base import Reward, RewardResult
from .latex import latex_to_text, matching_brace, numbers_close, parse_quantity
from .match import column_values

__all__ = ["PhysicsMatch", "all_boxed", "last_boxed", "mcq_letter", "split_parts", "parts_match", "gold_parts"]

_BOX = re.compile(r"\\boxed\s*\{|\\fbox\s*\{")
_LETTER = re.compile(r"^\s*(?:\\text\{\s*)?\(?\s*([A-E])\s*\)?\s*\}?\s*[.)]?(?:\s|$)")
_MCQ_GOLD = re.compile(r"^\s*\(?([A-E])\)?\.?\s*$")
_ANSWER_IS = re.compile(r"answer\s*(?:is|:)\s*:?\s*\(?\s*([A-E])\b", re.IGNORECASE)
_PAREN_LABEL = re.compile(r"\(([a-h])\)")
_DOT_LABEL = re.compile(r"(?:^|(?<=\s))([a-h])\.\s")


def all_boxed(text: str) -> list[str]:
    """Contents of every balanced ``\\boxed{...}`` in order (brace counting; nested braces kept)."""
    out = []
    for m in _BOX.finditer(text):
        close = matching_brace(text, m.end() - 1)
        if close is not None:
            out.append(text[m.end(): close].strip())
    return out


def last_boxed(text: str) -> str | None:
    """Content of the last balanced ``\\boxed{...}``, or ``None``."""
    boxes = all_boxed(text)
    return boxes[-1] if boxes else None


def mcq_letter(answer: str) -> str | None:
    """The choice letter an answer starts with (``(B)``, ``B``, ``B.``, ``\\text{B}``), or ``None``."""
    m = _LETTER.match(answer)
    return m.group(1) if m else None


def _top_level_split(text: str, sep: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += (ch in "{([") - (ch in "})]")
        if ch == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    return parts + [text[start:]]


def split_parts(answer: str) -> list[str]:
    """The parts of a (possibly multipart) answer: ``(a) 3 (b) 4``, ``a. 3 b. 4`` or ``3; 4`` -> ``['3', '4']``."""
    for label in (_PAREN_LABEL, _DOT_LABEL):
        found = list(label.finditer(answer))
        if len(found) >= 2 and [m.group(1) for m in found] == [chr(ord("a") + i) for i in range(len(found))]:
            ends = [m.start() for m in found[1:]] + [len(answer)]
            return [answer[m.end(): end].strip(" ,;") .strip() for m, end in zip(found, ends)]
    return [p.strip() for p in _top_level_split(answer, ";")]


def _plain(text: str) -> str:
    return re.sub(r"\s+", "", latex_to_text(text)).lower()


def parts_match(pred: str, gold: str, rtol: float = 1e-2, atol: float = 1e-6, symbolic: bool = False) -> bool:
    """One part: numbers within tolerance, else equal plain texts, else (``symbolic``) math-verify."""
    g, p = parse_quantity(gold), parse_quantity(pred)
    if g is not None:
        return p is not None and numbers_close(p, g, rtol, atol)
    if _plain(pred) == _plain(gold):
        return True
    if symbolic:
        from math_verify import parse, verify  # optional: imported only when asked for

        gold_p, pred_p = parse(f"${gold}$"), parse(f"${pred}$")
        return bool(gold_p and pred_p and verify(gold_p, pred_p))
    return False


def gold_parts(gold: Any, where: str = "a row") -> tuple[str | None, list[str]]:
    """(MCQ letter or None, parts) of a gold answer; a malformed gold raises naming ``where`` (the row)."""
    text = str(gold).strip()
    if "\\boxed" in text or "\\fbox" in text:
        inner = last_boxed(text)
        if inner is None:
            raise UserError(f"physics_match: gold answer of {where} has an unbalanced \\boxed{{: {text[:120]!r}")
        text = inner
    if text.count("{") != text.count("}"):
        raise UserError(f"physics_match: gold answer of {where} has unbalanced braces: {text[:120]!r}")
    m = _MCQ_GOLD.match(text)
    if m:
        return m.group(1), [m.group(1)]
    parts = split_parts(text)
    if not text or any(not p for p in parts):
        raise UserError(f"physics_match: gold answer of {where} is empty or has an empty part: {str(gold)[:120]!r}")
    return None, parts


def predicted_parts(completion: str, n_gold: int) -> list[str] | None:
    """The prediction's parts (rule 3), or ``None`` when the completion has no box."""
    boxes = all_boxed(completion)
    if not boxes:
        return None
    parts = split_parts(boxes[-1])
    if n_gold > 1 and len(parts) == 1 and len(boxes) >= n_gold:
        parts = boxes[-n_gold:]
    return parts


@dataclass
class Judged:
    """One row's verdict: score, whether an answer was read, and the per-part results."""
    score: float
    parsed: bool
    mcq: bool
    part_hits: list[bool]
    n_pred: int


@dataclass
class PhysicsMatch(Reward):
    """Binary Physics-R1 answer reward (module docstring). Options: ``rtol``, ``atol``, ``symbolic``,
    ``column`` (the gold's column); ``dense=True`` gives the spec's dense reward instead
    (:mod:`.physics_dense`: ``dense_answer`` and the weights ``w_ans`` .. ``w_cons``, the spec's defaults).
    Metrics ``reward/<name>/``: ``unparsed_frac`` (no answer read), ``mcq_frac``, ``part_acc`` (share of gold parts matched, over all rows), ``count_mismatch_frac``
    (a parsed answer with another number of parts than the gold)."""

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
            box = last_boxed(completion)
            found = _ANSWER_IS.findall(completion) if box is None else []
            got = mcq_letter(box) if box is not None else (found[-1].upper() if found else None)
            hit = got == letter
            return Judged(float(hit), got is not None, True, [hit], int(got is not None))
        pparts = predicted_parts(completion, len(gparts))
        if pparts is None:
            return Judged(0.0, False, False, [False] * len(gparts), 0)
        hits = [i < len(pparts) and parts_match(pparts[i], g, self.rtol, self.atol, self.symbolic)
                for i, g in enumerate(gparts)]
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
        from .physics_dense import dense_metrics, dense_terms, dense_value  # it builds on this module

        golds = column_values(columns, self.column, len(completions))
        weights = {"ans": self.w_ans, "fmt": self.w_fmt, "dim": self.w_dim, "sym": self.w_sym, "cons": self.w_cons}
        terms = [None if j is None else dense_terms(c, g, j, self.dense_answer)
                 for c, g, j in zip(completions, golds, judged)]
        values = [None if t is None else dense_value(t, weights) for t in terms]
        return RewardResult(values, {**metrics, **dense_metrics(self.name, [t for t in terms if t is not None])})


def physics_metrics(name: str, judged: Sequence[Judged | None]) -> dict[str, float]:
    rows = [j for j in judged if j is not None]
    n = max(len(rows), 1)
    parsed = [j for j in rows if j.parsed]
    return {f"reward/{name}/unparsed_frac": (len(rows) - len(parsed)) / n,
            f"reward/{name}/mcq_frac": sum(j.mcq for j in rows) / n,
            f"reward/{name}/part_acc": sum(sum(j.part_hits) / len(j.part_hits) for j in rows) / n,
            f"reward/{name}/count_mismatch_frac": sum(j.n_pred != len(j.part_hits) for j in parsed) / n}
