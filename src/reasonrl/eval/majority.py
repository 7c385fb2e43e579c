"""Majority vote over extracted final answers (maj@k, spec envs-selfplay-eval.md section 9).

maj@k votes over k extracted answers "after grouping answers by equivalence (math-verify or
normalized strings)", ties broken "most frequent, then first seen". Here:

* :func:`group_answers` -- each answer joins the first earlier group whose *representative* (its
  first member) it is equivalent to, else opens a new group. ``None`` answers (nothing extracted)
  never vote. Comparing with the representative only keeps the grouping deterministic and in
  order of first appearance even where an equivalence is not transitive.
* :func:`majority_vote_grouped` -- the biggest group wins; among equally big groups, the one whose
  first member came first. The vote is correct when any member of the winning group was judged
  correct by the task's verifier (the rule of :func:`reasonrl.eval.metrics.maj_at_k`, which this
  reproduces exactly with the default string equality).
* :class:`MathEquivalence` -- ``math_verify`` equivalence, so ``0.5``, ``1/2`` and ``\\frac{1}{2}``
  are one answer. An answer that is not math is equal only to the same string.

Pure functions over strings; no torch (math_verify and sympy load on first use).
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from ..rewards.mathverify import MathVerify

__all__ = ["Equivalence", "MathEquivalence", "exact_equal", "group_answers", "majority_vote_grouped"]

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


def majority_vote_grouped(answers: Sequence[str | None], correct: Sequence[bool],
                          equivalent: Equivalence = exact_equal) -> tuple[str | None, bool]:
    """``(winning answer, vote correct)`` of one problem's samples.

    The winning answer is the first-seen form of the biggest group (ties: the group seen first);
    ``(None, False)`` when no sample has an answer.

    Raises:
        ValueError: if ``answers`` and ``correct`` differ in length.
    """
    if len(answers) != len(correct):
        raise ValueError(f"majority vote: {len(answers)} answers but {len(correct)} correctness flags")
    labels = group_answers(answers, equivalent)
    sizes: dict[int, int] = {}
    for lab in labels:
        if lab is not None:
            sizes[lab] = sizes.get(lab, 0) + 1  # dicts keep insertion order = first appearance
    if not sizes:
        return None, False
    best = max(sizes.values())
    winner = next(lab for lab, size in sizes.items() if size == best)  # first seen among the tied
    return answers[winner], any(bool(ok) for lab, ok in zip(labels, correct) if lab == winner)


class MathEquivalence:
    """``math_verify`` equivalence of two extracted answers, each parsed once (cached).

    Answers are parsed as :class:`reasonrl.rewards.MathVerify` parses a gold answer (a bare
    ``1/2`` is read as math), with its timeout rules (``timeout_seconds``, whole seconds, only in
    the main thread). Text that is not math (``@@``) is kept by math_verify as a string and so
matches the same string only; an answer it rejects outright matches the identical string only.
    """

    def __init__(self, timeout_seconds: float | None = 5):
        self.reward = MathVerify(timeout_seconds=timeout_seconds)
        self._parsed: dict[str, list[Any] | None] = {}

    def parse(self, answer: str) -> list[Any] | None:
        if answer not in self._parsed:
            try:
                self._parsed[answer] = self.reward.parse_gold(answer, self.reward.timeout_here())
            except ValueError:  # parse_gold's "could not parse" (e.g. blank): this answer is then only itself
                self._parsed[answer] = None
        return self._parsed[answer]

    def __call__(self, a: str, b: str) -> bool:
        if a == b:
            return True
        pa, pb = self.parse(a), self.parse(b)
        if pa is None or pb is None:
            return False
        from math_verify import verify

        return bool(verify(pa, pb, timeout_seconds=self.reward.timeout_here()))
