"""Rewards comparing a completion's final answer with a reference column.

* :class:`ExactMatch` -- equal after normalisation (numbers canonicalised, text whitespace-folded).
* :class:`NumericMatch` -- both parse to numbers (fractions and ``\\boxed{}`` allowed) that are
  close within tolerance.

Shared conventions:

* The reference comes from a dataset column (default ``"answer"``), one value per completion. A
  ``None`` reference makes the row not applicable (value ``None``): the row has nothing to check.
* ``extract`` pulls the final answer out of a completion: a callable ``str -> str | None``, the
  name of one of :data:`reasonrl.rewards.answers.EXTRACTORS` (``"boxed"``, ``"answer_tag"``,
  ``"last_number"``), or ``None`` for "the whole stripped completion".
* A completion whose answer cannot be extracted or parsed scores ``0.0`` and is counted in the
  metric ``reward/<name>/unparsed_frac`` (fraction of applicable rows) so that a formatting
  collapse is visible rather than looking like plain wrong answers.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from .answers import Extractor, normalize_number, normalize_text, parse_number, resolve_extractor
from .base import Reward, RewardResult

__all__ = ["ExactMatch", "NumericMatch", "ReferenceReward", "column_values"]

_NORMALIZE_MODES = ("none", "text", "number_or_text")


def column_values(columns: dict[str, Any], column: str, n: int) -> list[Any]:
    """The per-row values of ``column``, checked to exist and to have one value per completion."""
    if column not in columns:
        raise ValueError(f"needs the column {column!r}, but only got columns {sorted(columns)}")
    values = list(columns[column])
    if len(values) != n:
        raise ValueError(f"column {column!r} has {len(values)} values for {n} completions")
    return values


def _extract(extract: Extractor | None, completion: str) -> str | None:
    if extract is None:
        return completion.strip()
    got = extract(completion)
    return None if got is None else str(got)


def _unparsed_metric(name: str, unparsed: int, applicable: int) -> dict[str, float]:
    return {f"reward/{name}/unparsed_frac": unparsed / max(applicable, 1)}


class ReferenceReward(Reward):
    """A reward judging each completion against the reference in ``self.column``.

    Subclasses implement :meth:`judge`, returning a score, or ``None`` when the completion's answer
    could not be extracted or parsed (scored 0.0 and counted in ``unparsed_frac``). A ``None``
    reference makes the row not applicable.
    """

    column: str = "answer"

    def judge(self, completion: str, reference: Any) -> float | None:
        raise NotImplementedError

    def extra_metrics(self) -> dict[str, float]:
        return {}

    def score(self, prompts: Sequence[str], completions: Sequence[str], **columns: Any) -> RewardResult:
        refs = column_values(columns, self.column, len(completions))
        values: list[float | None] = []
        unparsed = applicable = 0
        for completion, ref in zip(completions, refs):
            if ref is None:
                values.append(None)
                continue
            applicable += 1
            value = self.judge(completion, ref)
            unparsed += value is None
            values.append(0.0 if value is None else value)
        return RewardResult(values, {**_unparsed_metric(self.name, unparsed, applicable), **self.extra_metrics()})


class ExactMatch(ReferenceReward):
    """1.0 when the extracted answer equals the reference after normalisation, else 0.0.

    ``normalize``:

    * ``"none"`` -- compare the strings as they are (the completion side is still stripped when
      ``extract`` is ``None``).
    * ``"text"`` -- :func:`normalize_text` on both (strip, collapse whitespace; ``lowercase=True``
      also folds case).
    * ``"number_or_text"`` (default) -- when both sides are plain numbers compare their
      :func:`normalize_number` forms (``"007"`` == ``"7"``, ``"1,234"`` == ``"1234"``, ``"2.50"``
      == ``"2.5"``, ``"+5"`` == ``"5"``), otherwise fall back to ``"text"``. Fractions are not
      numbers here: use :class:`NumericMatch` for ``"3/4"`` == ``"0.75"``.
    """

    def __init__(
        self,
        column: str = "answer",
        extract: Extractor | str | None = None,
        normalize: str = "number_or_text",
        name: str = "exact_match",
        lowercase: bool = False,
    ):
        if normalize not in _NORMALIZE_MODES:
            raise ValueError(f"normalize must be one of {_NORMALIZE_MODES}, got {normalize!r}")
        self.column, self.normalize, self.name, self.lowercase = column, normalize, name, lowercase
        self.extract = resolve_extractor(extract)

    def _canonical(self, s: str) -> str:
        if self.normalize == "none":
            return s
        return normalize_text(s, lowercase=self.lowercase)

    def matches(self, answer: str, reference: Any) -> bool:
        ref = str(reference)
        if self.normalize == "number_or_text":
            a_num, r_num = normalize_number(answer), normalize_number(ref)
            if a_num is not None and r_num is not None:
                return a_num == r_num
        return self._canonical(answer) == self._canonical(ref)

    def judge(self, completion: str, reference: Any) -> float | None:
        answer = _extract(self.extract, completion)
        return None if answer is None else float(self.matches(answer, reference))


class NumericMatch(ReferenceReward):
    """1.0 when answer and reference parse to numbers within tolerance (``math.isclose``), else 0.0.

    Both sides go through :func:`parse_number`, so ``"3/4"``, ``"\\frac{3}{4}"``, ``"0.75"`` and
    ``"$\\boxed{0.75}$"`` all match each other. A reference that is not a number raises
    ``ValueError`` (a data error that would otherwise silently score every row 0.0).
    """

    def __init__(
        self,
        column: str = "answer",
        extract: Extractor | str | None = None,
        rel_tol: float = 1e-6,
        abs_tol: float = 1e-9,
        name: str = "numeric",
    ):
        if rel_tol < 0 or abs_tol < 0:
            raise ValueError(f"tolerances must be >= 0, got rel_tol={rel_tol}, abs_tol={abs_tol}")
        self.column, self.rel_tol, self.abs_tol, self.name = column, rel_tol, abs_tol, name
        self.extract = resolve_extractor(extract)

    def judge(self, completion: str, reference: Any) -> float | None:
        target = parse_number(reference)
        if target is None:
            raise ValueError(f"reference {reference!r} in column {self.column!r} is not a number")
        answer = _extract(self.extract, completion)
        got = None if answer is None else parse_number(answer)
        if got is None:
            return None
        return float(math.isclose(got, target, rel_tol=self.rel_tol, abs_tol=self.abs_tol))
