"""Majority vote over extracted final answers (maj@k, spec envs-selfplay-eval.md section 9).

maj@k votes over k extracted answers "after grouping answers by equivalence (math-verify or
normalized strings)", ties broken "most frequent, then first seen". Here:

The grouping and the vote are pure and live in :mod:`reasonrl.eval.metrics` (re-exported here):

* :func:`group_answers` -- each answer joins the first earlier group whose *representative* (its
  first member) it is equivalent to, else opens a new group. ``None`` answers (nothing extracted)
  never vote. Comparing with the representative only keeps the grouping deterministic and in
  order of first appearance even where an equivalence is not transitive.
* :func:`majority_vote_grouped` -- the biggest group wins; among equally big groups, the one whose
  first member came first. The vote is correct when any member of the winning group was judged
  correct by the task's verifier (:func:`reasonrl.eval.metrics.maj_at_k` votes through it with
  the default string equality).
* :class:`MathEquivalence` -- ``math_verify`` equivalence, so ``0.5``, ``1/2`` and ``\\frac{1}{2}``
  are one answer. An answer that is not math is equal only to the same string.

Pure functions over strings; no torch (math_verify and sympy load on first use).
"""

from __future__ import annotations

from typing import Any

from ..rewards.mathverify import MathVerify
from .metrics import (
    Equivalence,
    exact_equal,
    group_answers,
    majority_vote_grouped,
)  # the grouping and vote: pure, in metrics

__all__ = ["Equivalence", "MathEquivalence", "exact_equal", "group_answers", "majority_vote_grouped"]


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
