"""Sampling metrics for evaluating a policy on verifiable tasks, plus small statistics helpers.

Conventions: a *problem* has ``n`` sampled completions; ``correct[p][i]`` says whether sample ``i``
of problem ``p`` was judged correct by the task's verifier, and ``answers[p][i]`` is that sample's
extracted, already-normalised final answer (``None`` when unparseable). Per-problem lists may have
different lengths. Aggregates are unweighted means over problems.

* :func:`pass_at_k` / :func:`mean_pass_at_k` -- unbiased pass@k (Chen et al., 2021).
* :func:`avg_at_k` -- mean per-sample accuracy.
* :func:`majority_vote` / :func:`maj_at_k` -- self-consistency by majority vote.
* :func:`mean_std` / :func:`welch_t_test` -- comparing runs across seeds.

Pure functions; numpy only (scipy is imported lazily by :func:`welch_t_test`).
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

__all__ = [
    "pass_at_k",
    "mean_pass_at_k",
    "avg_at_k",
    "majority_vote",
    "majority_vote_grouped",
    "group_answers",
    "exact_equal",
    "maj_at_k",
    "mean_std",
    "welch_t_test",
]


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased estimate of pass@k from ``n`` samples of which ``c`` are correct.

    pass@k = 1 - C(n-c, k) / C(n, k), computed as 1 - prod_{i=n-c+1}^{n} (1 - k/i) for stability;
    it is exactly 1.0 when ``n - c < k`` (every k-subset contains a correct sample).

    Raises:
        ValueError: if ``k < 1``, ``n < 0``, ``c`` is outside ``[0, n]`` or ``k > n``.
    """
    if k < 1:
        raise ValueError(f"pass@k needs k >= 1, got k={k}")
    if n < 0:
        raise ValueError(f"pass@k needs n >= 0 samples, got n={n}")
    if not 0 <= c <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n, got c={c}, n={n}")
    if k > n:
        raise ValueError(
            f"pass@k needs at least k samples per problem: k={k} > n={n}; sample more completions or lower k"
        )
    if n - c < k:
        return 1.0
    i = np.arange(n - c + 1, n + 1, dtype=np.float64)
    return float(1.0 - np.prod(1.0 - k / i))


def _check_problems(correct: Sequence[Sequence[bool]], what: str) -> None:
    """Reject an empty problem list or a problem with no samples."""
    if len(correct) == 0:
        raise ValueError(f"{what} needs at least one problem, got none")
    for p, samples in enumerate(correct):
        if len(samples) == 0:
            raise ValueError(f"{what}: problem {p} has no samples")


def mean_pass_at_k(correct: Sequence[Sequence[bool]], k: int) -> float:
    """Mean over problems of :func:`pass_at_k`, with ``n = len(correct[p])`` per problem.

    Args:
        correct: per problem, the per-sample correctness flags (lengths may differ).
        k: the k in pass@k; must not exceed any problem's sample count.

    Raises:
        ValueError: on an empty problem list, or (from :func:`pass_at_k`, naming the problem) if a
            problem has fewer than ``k`` samples.
    """
    _check_problems(correct, "mean_pass_at_k")
    scores = []
    for p, samples in enumerate(correct):
        n, c = len(samples), int(sum(bool(s) for s in samples))
        try:
            scores.append(pass_at_k(n, c, k))
        except ValueError as err:
            raise ValueError(f"problem {p}: {err}") from err
    return float(np.mean(scores))


def avg_at_k(correct: Sequence[Sequence[bool]]) -> float:
    """avg@k: per problem the fraction of its samples that are correct, averaged over problems.

    Each problem weighs the same regardless of how many samples it has.

    Raises:
        ValueError: on an empty problem list or a problem with no samples.
    """
    _check_problems(correct, "avg_at_k")
    return float(np.mean([np.mean(np.asarray(s, dtype=bool)) for s in correct]))


Equivalence = Callable[[str, str], bool]


def exact_equal(a: str, b: str) -> bool:
    """The default equivalence: the task's normalised answers compared as strings."""
    return a == b


def group_answers(answers: Sequence[str | None], equivalent: Equivalence = exact_equal) -> list[int | None]:
    """Per answer, the index of its group's first member (``None`` for a ``None`` answer).

    ``equivalent(representative, answer)`` is asked once per (earlier group, answer) pair at most.
    """
    reps: list[int] = []  # index of each group's representative, in order of first appearance
    labels: list[int | None] = []
    for i, ans in enumerate(answers):
        if ans is None:
            labels.append(None)
            continue
        home = next((r for r in reps if equivalent(answers[r], ans)), None)
        if home is None:
            reps.append(i)
            home = i
        labels.append(home)
    return labels


def majority_vote_grouped(
    answers: Sequence[str | None], correct: Sequence[bool], equivalent: Equivalence = exact_equal
) -> tuple[str | None, bool]:
    """``(winning answer, vote correct)`` of one problem's samples.

    The winning answer is the first-seen form of the biggest group (ties: the group seen first);
    ``(None, False)`` when no sample has an answer.

    Raises:
        ValueError: if ``answers`` and ``correct`` differ in length.
    """
    if len(answers) != len(correct):
        raise ValueError(f"majority vote: {len(answers)} answers but {len(correct)} correctness flags")
    labels = group_answers(answers, equivalent)
    winner = _winner(labels)
    if winner is None:
        return None, False
    return answers[winner], any(bool(ok) for lab, ok in zip(labels, correct) if lab == winner)


def majority_vote(answers: Sequence[str | None], equivalent: Equivalence = exact_equal) -> int | None:
    """Index of the first sample carrying the majority answer, or ``None`` if all are ``None``.

    ``None`` answers (unparseable) never vote. Ties between equally frequent answers go to the one
    seen first in ``answers``, so the result is deterministic.
    """
    return _winner(group_answers(answers, equivalent))


def _winner(labels: Sequence[int | None]) -> int | None:
    """The biggest group's label (its first member's index); ties: the group seen first."""
    sizes: dict[int, int] = {}
    for lab in labels:
        if lab is not None:
            sizes[lab] = sizes.get(lab, 0) + 1  # dicts keep insertion order = first appearance
    if not sizes:
        return None
    best = max(sizes.values())
    return next(lab for lab, size in sizes.items() if size == best)


def maj_at_k(answers: Sequence[Sequence[str | None]], correct: Sequence[Sequence[bool]]) -> float:
    """maj@k: fraction of problems whose majority-vote answer is correct.

    Args:
        answers: per problem, the extracted normalised final answer of each sample (or ``None``).
        correct: per problem, the verifier's correctness flag of each sample (same shapes).

    The winning answer counts as correct iff *any* sample whose answer equals the winner was judged
    correct. Correctness is thereby decided by the task's verifier (which may accept equivalent
    forms) rather than by string equality with the gold answer. A problem whose answers are all
    ``None`` counts as wrong.

    Raises:
        ValueError: if the outer or any inner lengths differ, or there are no problems/samples.
    """
    if len(answers) != len(correct):
        raise ValueError(f"maj_at_k: {len(answers)} problems of answers but {len(correct)} of correctness flags")
    _check_problems(correct, "maj_at_k")
    hits = []
    for p, (ans, ok) in enumerate(zip(answers, correct)):
        if len(ans) != len(ok):
            raise ValueError(f"maj_at_k: problem {p} has {len(ans)} answers but {len(ok)} correctness flags")
        hits.append(majority_vote_grouped(ans, ok)[1])
    return float(np.mean(hits))


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (ddof=1) of ``values``; std is 0.0 for a single value.

    Raises:
        ValueError: if ``values`` is empty.
    """
    arr = np.asarray(values, dtype=np.float64)
    if arr.size == 0:
        raise ValueError("mean_std needs at least one value, got none")
    std = float(np.std(arr, ddof=1)) if arr.size > 1 else 0.0
    return float(np.mean(arr)), std


def welch_t_test(x: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
    """Welch's unequal-variance two-sample t-test; returns ``(t, two-sided p)``.

    ``t = (mean(x) - mean(y)) / sqrt(var(x)/len(x) + var(y)/len(y))`` with ddof=1 variances, via
    ``scipy.stats.ttest_ind(equal_var=False)`` (scipy is imported here, not at module import).
    If both samples are constant the test is undefined: ``(nan, nan)`` when their values are equal,
    ``(+-inf, 0.0)`` when they differ (decided here, exactly, instead of scipy's rounding-noise warning).

    Raises:
        ValueError: if either sample has fewer than two values.
    """
    if len(x) < 2 or len(y) < 2:
        raise ValueError(f"welch_t_test needs at least 2 values per sample, got {len(x)} and {len(y)}")
    if len(set(x)) == 1 and len(set(y)) == 1:  # both constant, e.g. every seed at 0.300
        diff = float(x[0]) - float(y[0])
        return (math.nan, math.nan) if diff == 0 else (math.copysign(math.inf, diff), 0.0)
    from scipy import stats

    res = stats.ttest_ind(np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64), equal_var=False)
    return float(res.statistic), float(res.pvalue)
