"""Length shaping: penalties that discourage over-long completions.

* :class:`OverlongPenalty` -- DAPO's soft overlong punishment (Yu et al., 2025): no penalty up to
  ``max_len - cache_len`` tokens, a linear ramp to -1 across the last ``cache_len`` tokens, and
  -1 beyond ``max_len``.
* :class:`LengthPenalty` -- a plain linear penalty on the excess over a target length.

Where the length ``L`` of a completion comes from, first available wins:

1. column ``completion_lengths`` -- one ``int`` token count per completion (the batch maker passes the
   tokens the policy sampled: an episode's observations and turn markers are not counted, and its
   ``max_new_tokens`` is the episode's budget, every turn's; issue 41);
2. column ``completion_ids`` -- one list of token ids per completion (what TRL passes), ``len``;
3. otherwise ``len(completion)`` in *characters*, with a one-time warning, because character
   counts are several times token counts and ``max_len`` is normally given in tokens.
"""

from __future__ import annotations

import warnings
from typing import Any, Sequence

from .base import Reward, RewardResult

__all__ = ["OverlongPenalty", "LengthPenalty", "completion_lengths"]


def completion_lengths(completions: Sequence[str], columns: dict[str, Any]) -> tuple[list[int], str]:
    """Per-completion lengths and their source (``"tokens"`` or ``"chars"``), see module doc."""
    n = len(completions)
    if "completion_lengths" in columns:
        lengths = [int(x) for x in columns["completion_lengths"]]
    elif "completion_ids" in columns:
        lengths = [len(ids) for ids in columns["completion_ids"]]
    else:
        return [len(c) for c in completions], "chars"
    if len(lengths) != n:
        raise ValueError(f"got {len(lengths)} completion lengths for {n} completions")
    return lengths, "tokens"


class _LengthReward(Reward):
    """Shared plumbing: find the lengths, warn once on the character fallback, apply ``penalty``."""

    _warned = False

    def penalty(self, length: int) -> float:
        raise NotImplementedError

    def _lengths(self, completions: Sequence[str], columns: dict[str, Any]) -> list[int]:
        lengths, source = completion_lengths(completions, columns)
        if source == "chars" and not self._warned:
            self._warned = True
            warnings.warn(
                f"reward {self.name!r}: no 'completion_lengths' or 'completion_ids' column, "
                "measuring completion length in characters, not tokens",
                stacklevel=3,
            )
        return lengths


class OverlongPenalty(_LengthReward):
    """DAPO soft overlong punishment on the completion length ``L`` (tokens):

    * ``0``                                  if ``L <= max_len - cache_len``
    * ``((max_len - cache_len) - L) / cache_len``  if ``max_len - cache_len < L <= max_len``
    * ``-1``                                 if ``L > max_len``

    ``cache_len=0`` is a hard cut-off (0 up to ``max_len``, -1 beyond). Metrics:
    ``reward/<name>/soft_frac`` (rows in the ramp) and ``reward/<name>/over_frac`` (rows beyond).
    """

    def __init__(
        self, max_len: int | None = None, cache_len: int | None = None, name: str = "overlong", cache_frac: float = 0.2
    ):
        # max_len None: the generation budget, read from the ``max_new_tokens`` column (the trainer
        # passes it); cache_len None: cache_frac of max_len (DAPO: 4096 of 20480 = 0.2)
        if max_len is not None and (max_len <= 0 or cache_len is not None and not 0 <= cache_len <= max_len):
            raise ValueError(f"need max_len > 0 and 0 <= cache_len <= max_len, got {max_len=}, {cache_len=}")
        if not 0 <= cache_frac <= 1:
            raise ValueError(f"cache_frac must be in [0, 1], got {cache_frac}")
        self.max_len, self.cache_len, self.cache_frac, self.name = max_len, cache_len, cache_frac, name

    def limits(self, columns: dict[str, Any]) -> tuple[int, int]:
        """(max_len, cache_len) for this batch."""
        max_len = self.max_len
        if max_len is None:
            if "max_new_tokens" not in columns:
                raise ValueError(
                    "OverlongPenalty(max_len=None) needs the column 'max_new_tokens' (the trainer passes it)"
                )
            budget = columns["max_new_tokens"]
            max_len = int(budget[0] if isinstance(budget, (list, tuple)) else budget)
        cache = self.cache_len if self.cache_len is not None else int(round(self.cache_frac * max_len))
        return max_len, cache

    @staticmethod
    def penalty_for(length: int, max_len: int, cache_len: int) -> float:
        free = max_len - cache_len
        if length <= free:
            return 0.0
        if length <= max_len:
            return (free - length) / cache_len  # cache_len > 0 here, since free < L <= max_len
        return -1.0

    def penalty(self, length: int) -> float:
        return self.penalty_for(length, *self.limits({}))

    def score(self, prompts: Sequence[str], completions: Sequence[str], **columns: Any) -> RewardResult:
        lengths = self._lengths(completions, columns)
        max_len, cache = self.limits(columns)
        n, free = max(len(lengths), 1), max_len - cache
        metrics = {
            f"reward/{self.name}/soft_frac": sum(1 for L in lengths if free < L <= max_len) / n,
            f"reward/{self.name}/over_frac": sum(1 for L in lengths if L > max_len) / n,
        }
        return RewardResult([self.penalty_for(L, max_len, cache) for L in lengths], metrics)


class LengthPenalty(_LengthReward):
    """Linear shaping ``-coef * max(0, L - target) / target``: 0 up to ``target``, then -coef per
    ``target`` extra tokens (unbounded, unlike :class:`OverlongPenalty`; weight it accordingly).

    Metric: ``reward/<name>/mean_length``.
    """

    def __init__(self, target: int, coef: float = 1.0, name: str = "length"):
        if target <= 0 or coef < 0:
            raise ValueError(f"need target > 0 and coef >= 0, got {target=}, {coef=}")
        self.target, self.coef, self.name = target, coef, name

    def penalty(self, length: int) -> float:
        excess = max(0, length - self.target)
        return -self.coef * excess / self.target if excess else 0.0  # avoid reporting -0.0

    def score(self, prompts: Sequence[str], completions: Sequence[str], **columns: Any) -> RewardResult:
        lengths = self._lengths(completions, columns)
        metrics = {f"reward/{self.name}/mean_length": sum(lengths) / max(len(lengths), 1)}
        return RewardResult([self.penalty(L) for L in lengths], metrics)
