"""Rewards for the *shape* of a completion rather than its correctness.

* :class:`FormatRegex` -- 1.0 if a regular expression matches (``re.search``, or the whole text
  with ``fullmatch=True``), else 0.0.
* :class:`RequiredSections` -- partial credit for the required markers (``"<think>"``,
  ``"</think>"``, ``"<answer>"``, ...) that are present, full credit only when all are.

Both score every row (never ``None``): format applies to any completion.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any, Sequence

from .base import Reward, RewardResult

__all__ = ["FormatRegex", "RequiredSections"]


class FormatRegex(Reward):
    """1.0 when ``pattern`` matches the completion, else 0.0.

    ``flags`` default to ``re.DOTALL`` so ``.`` crosses the newlines of multi-line reasoning; they
    are ignored when ``pattern`` is already compiled (its own flags apply).
    """

    def __init__(
        self, pattern: str | re.Pattern, name: str = "format", fullmatch: bool = False, flags: int = re.DOTALL
    ):
        self.regex = pattern if isinstance(pattern, re.Pattern) else re.compile(pattern, flags)
        self.name, self.fullmatch = name, fullmatch

    def score(self, prompts: Sequence[str], completions: Sequence[str], **columns: Any) -> RewardResult:
        match = self.regex.fullmatch if self.fullmatch else self.regex.search
        return RewardResult([1.0 if match(c) else 0.0 for c in completions])


def _most_in_order(text: str, sections: tuple[str, ...]) -> int:
    """Largest number of ``sections`` found in ``text`` in the listed order, without overlaps.

    Greedy left-to-right matching would undercount (``"B C A"`` against ``A, B, C`` finds only
    ``A``), so for each marker try both skipping it and taking its first occurrence after the
    previous one; taking the *first* occurrence is never worse, which keeps the search small.
    """

    @lru_cache(maxsize=None)
    def best(i: int, pos: int) -> int:
        if i == len(sections):
            return 0
        skip = best(i + 1, pos)
        at = text.find(sections[i], pos)
        if at == -1:
            return skip
        return max(skip, 1 + best(i + 1, at + len(sections[i])))

    return best(0, 0)


class RequiredSections(Reward):
    """Fraction of the required ``sections`` (literal substrings) present in the completion.

    * ``ordered=False``: reward = (#sections occurring anywhere) / (#sections).
    * ``ordered=True`` (default): reward = (largest #sections occurring in the listed order,
      non-overlapping) / (#sections). So it is 1.0 exactly when all are present in order, and a
      completion with every marker but in the wrong order gets partial credit, not full.

    Metrics: ``reward/<name>/mean`` and ``reward/<name>/full_frac`` (rows scoring 1.0).
    """

    def __init__(self, sections: Sequence[str], ordered: bool = True, name: str = "sections"):
        if isinstance(sections, str) or not sections or not all(isinstance(s, str) and s for s in sections):
            raise ValueError(f"sections must be a non-empty list of non-empty strings, got {sections!r}")
        self.sections, self.ordered, self.name = tuple(sections), ordered, name

    def score_one(self, completion: str) -> float:
        if self.ordered:
            found = _most_in_order(completion, self.sections)
        else:
            found = sum(1 for s in self.sections if s in completion)
        return found / len(self.sections)

    def score(self, prompts: Sequence[str], completions: Sequence[str], **columns: Any) -> RewardResult:
        values = [self.score_one(c) for c in completions]
        n = max(len(values), 1)
        metrics = {
            f"reward/{self.name}/mean": sum(values) / n,
            f"reward/{self.name}/full_frac": sum(1 for v in values if v == 1.0) / n,
        }
        return RewardResult(list(values), metrics)
