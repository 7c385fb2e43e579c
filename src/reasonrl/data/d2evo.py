"""D2Evo's pure maths (arXiv 2605.17037; spec distill-and-data.md section 11, envs-selfplay-eval.md section 3).

Each iteration the Solver's pass rate on the real pool is estimated (no gradient), the real problems
of medium difficulty become anchors, a Questioner writes new problems around them and is rewarded
for landing at the target difficulty and for not copying its anchor, and the Solver trains on the
anchors plus the accepted generated problems. The paper publishes no code: every formula here is
[inferred] by the spec, and every constant is an argument with the spec's default.

Similarity: character n-grams, n = 3 by default. Problems of the built-in tasks are short strings
(``347+85`` has 6 characters, one "word"), so word n-grams (BLEU's) would see each problem as one
token and give 0 or 1; character trigrams see shared operands (``347+12`` vs ``347+85``: 2 of 6
trigrams shared, 1/3) while a reordered copy still scores high. Trigrams rather than bigrams:
bigrams of digits recur between unrelated numbers (``34`` in ``534`` and ``341``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import torch

from ..eval.audit_sim import jaccard
from ..eval.metrics import majority_vote
from .selector import check_known_keys, prompt_hash

# the spec's defaults (section 11 (b)): band, target difficulty, novelty weight, validity floor
P_LO, P_HI, P_STAR, ETA, FLOOR, INVALID = 0.2, 0.8, 0.5, 0.5, 0.3, -1.0


def pass_rates(correct: torch.Tensor) -> torch.Tensor:
    """p_hat(q) = (1/n) sum_j r_j per problem: (N, n) 0/1 correctness -> (N,)."""
    return correct.float().mean(-1)  # (N,)


def in_band(p: torch.Tensor, lo: float = P_LO, hi: float = P_HI) -> torch.Tensor:
    """(N,) -> (N,) bool: lo <= p <= hi, both ends included (the spec's [p_lo, p_hi])."""
    return (p >= lo) & (p <= hi)  # (N,)


def anchor_indices(p: torch.Tensor, lo: float = P_LO, hi: float = P_HI) -> list[int]:
    """Indices of the real problems whose pass rate (N,) lies in the band: the anchors, in pool order."""
    return in_band(p, lo, hi).nonzero().flatten().tolist()


def majority_label(answers: Sequence[str | None]) -> tuple[str | None, float]:
    """The majority answer of a generated problem's Solver samples and its share of ALL samples
    (R-Zero style p_hat; samples without an answer count in the denominator and never vote).
    Ties go to the answer seen first. No answer at all: (None, 0.0)."""
    win = majority_vote(answers)
    if win is None:
        return None, 0.0
    label = answers[win]
    return label, sum(a == label for a in answers) / len(answers)


def pseudo_valid(label: str | None, share: float, floor: float = FLOOR) -> bool:
    """A majority pseudo-label is usable when it exists and its share reaches the floor (0.3)."""
    return label is not None and share >= floor


def questioner_rewards(
    valid: torch.Tensor,
    p_hat: torch.Tensor,
    sim: torch.Tensor,
    p_star: float = P_STAR,
    eta: float = ETA,
    invalid: float = INVALID,
) -> torch.Tensor:
    """R_Q = 1[valid] * (1 - 2 |p_hat - p*|) - eta * sim(q', anchor); an invalid (or unparsable)
    question gets ``invalid`` (-1) instead. All (K,) -> (K,). With p* = 0.5 the difficulty term
    runs from 0 (p_hat 0 or 1) to 1 (p_hat = p*)."""
    match = 1.0 - 2.0 * (p_hat - p_star).abs()  # (K,)
    return torch.where(valid, match - eta * sim, torch.full_like(match, invalid))  # (K,)


def char_ngrams(text: str, n: int = 3) -> frozenset[str]:
    """The character ``n``-grams of ``text`` with whitespace collapsed; a text shorter than ``n``
    is one gram (itself), an empty one has none."""
    if n < 1:
        raise ValueError(f"n-gram size must be >= 1, got {n}")
    t = " ".join(text.split())
    if len(t) < n:
        return frozenset([t]) if t else frozenset()
    return frozenset(t[i : i + n] for i in range(len(t) - n + 1))


def ngram_similarity(a: str, b: str, n: int = 3) -> float:
    """Jaccard of the two texts' character n-grams (see the module doc for n = 3): 1 for a copy,
    0 when no n-gram is shared or both are empty."""
    return jaccard(char_ngrams(a, n), char_ngrams(b, n))


def accepted(valid: torch.Tensor, p_hat: torch.Tensor, lo: float = P_LO, hi: float = P_HI) -> torch.Tensor:
    """Generated problems that join the Solver's pool: valid and inside the band. (K,) -> (K,) bool."""
    return valid & in_band(p_hat, lo, hi)  # (K,)


@dataclass(frozen=True)
class Verdict:
    """What the Solver's samples say about one generated problem: its label for training, p_hat,
    validity, and (when the task can compute it) whether the label is the true answer."""

    label: str | None
    p_hat: float
    valid: bool
    label_true: bool | None = None  # None: no true answer known (diagnostic only, never trained on)


def judge(
    answers: Sequence[str | None],
    correct: Sequence[bool] | None,
    true_answer: str | None,
    use_gold: bool = False,
    floor: float = FLOOR,
) -> Verdict:
    """One generated problem's verdict from its n Solver ``answers``.

    Majority mode (``use_gold`` False, the paper's): label = the majority answer, p_hat = its share,
    valid = the share reaches ``floor``. Gold mode: label = the computed ``true_answer``, p_hat = the
    share of ``correct`` samples, valid = a true answer exists. ``label_true`` compares the label
    with the true answer when one is known (a diagnostic: majority mode never trains on it)."""
    if use_gold:
        if true_answer is None or correct is None:
            return Verdict(None, 0.0, False)
        return Verdict(true_answer, sum(map(bool, correct)) / max(len(correct), 1), True, True)
    label, share = majority_label(answers)
    truth = None if true_answer is None or label is None else label == true_answer
    return Verdict(label, share, pseudo_valid(label, share, floor), truth)


def solver_pool(anchors: Iterable[Any], generated: Iterable[Any]) -> list[Any]:
    """The Solver's training pool: the anchors, then the accepted generated problems, each key once
    (a generated problem equal to an anchor is that anchor). Items need a ``key``."""
    out, seen = [], set()
    for it in (*anchors, *generated):
        if it.key not in seen:
            seen.add(it.key)
            out.append(it)
    return out


class D2EvoState:
    """D2Evo's run state, a :class:`~reasonrl.data.selector.SelectorState`: the iteration, the real
    pool's pass rates and anchors (keys of real problems), the generated problems in this iteration's
    Solver pool and those accepted for the next one (key -> {"text", "label", "p_hat"}), and the
    Questioner's and the generated pool's cursors. The part (``parts.d2evo``) fills it; this class
    decides admissions (anchors only, once there are any) and keeps every group (GRPO as usual)."""

    def __init__(self):
        self.iteration, self.pass_rates, self.anchors = -1, {}, []
        self.generated: dict[str, dict[str, Any]] = {}
        self.accepted: dict[str, dict[str, Any]] = {}
        self.hashes: dict[str, str] = {}  # real key -> prompt digest, to refuse another dataset's state
        self.q_cursor, self.g_cursor = 0, 0
        self.pending: dict[str, float] = {}  # metrics of the last refresh, logged by the next round

    def rebuild(self, iteration: int, real: Sequence[Any], p: torch.Tensor, lo: float, hi: float) -> None:
        """A new iteration: pass rates (N,) of the ``real`` items, anchors in the band, and the
        generated problems accepted during the last iteration as this one's (older ones leave)."""
        anchors = [real[i].key for i in anchor_indices(p, lo, hi)]
        self.iteration, self.anchors = iteration, anchors
        self.pass_rates = {it.key: float(v) for it, v in zip(real, p)}
        self.hashes = {it.key: prompt_hash(it.prompt) for it in real}
        self.generated = {k: v for k, v in self.accepted.items() if k not in set(anchors)}
        self.accepted, self.q_cursor, self.g_cursor = {}, 0, 0

    def admit(self, item: Any, epoch: int) -> bool:
        """Only anchors get Solver rollouts; before any anchor exists (no estimation yet, or none in the
        band) every pool item does, so the Solver always has prompts."""
        return not self.anchors or item.key in self.anchors

    def observe(self, items: Sequence[Any], correct: torch.Tensor) -> torch.Tensor:
        return pass_rates(correct)  # (B, G) -> (B,): the groups' pass rates, for the logs only

    def select(self, ctx: Any) -> tuple[torch.Tensor, dict[str, float]]:
        """Every group goes to the update (the Solver and the Questioner train with plain GRPO)."""
        return torch.ones(len(ctx.items), dtype=torch.bool), {}

    def state_dict(self) -> dict[str, Any]:
        return {
            k: getattr(self, k)
            for k in (
                "iteration",
                "pass_rates",
                "anchors",
                "generated",
                "accepted",
                "hashes",
                "q_cursor",
                "g_cursor",
                "pending",
            )
        }

    def load_state_dict(self, state: dict[str, Any], known: dict[str, str] | None) -> None:
        """Restore; a state whose real problems this run's pool does not hold is refused by name."""
        check_known_keys(sorted(state["hashes"]), known, state["hashes"])
        for k, v in state.items():
            setattr(self, k, v)
