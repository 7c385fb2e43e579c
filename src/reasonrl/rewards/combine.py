"""Combining several rewards into one scalar per completion.

:class:`Weighted` sums ``weight_i * reward_i`` per row. Components are any reward callables
(built-in :class:`~reasonrl.rewards.base.Reward` objects or plain TRL-style functions); each is
called through :func:`~reasonrl.rewards.base.score_rewards`, so its output is validated and its
metrics (``reward/<component>/...``) are passed on next to ``reward/<name>/mean``.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from .base import Reward, RewardError, RewardFn, RewardResult, reward_name, score_rewards

__all__ = ["Weighted", "ComponentError"]

_NONE_MODES = ("skip", "zero")
# Task label for the inner score_rewards calls; the real task is named by the outer call.
_INNER_TASK = "<weighted>"


class ComponentError(RuntimeError):
    """A component of a :class:`Weighted` reward failed; the message says which and why.

    Raised as a plain error (not a :class:`RewardError`) so that the caller's ``score_rewards``
    adds the task and the row once, instead of nesting a second, row-less report inside it.
    """

    def __init__(self, component: str, why: str):
        self.component, self.why = component, why
        super().__init__(f"component {component!r} {why}")


def _why(err: RewardError) -> str:
    """The reason inside a component's RewardError, without its (inner) task/row/completion."""
    if err.__cause__ is not None:
        return f"raised {type(err.__cause__).__name__}: {err.__cause__}"
    where = f"row {err.row}" if err.row is not None else "the batch"
    prefix = f"reward {err.reward!r} on task {_INNER_TASK!r} failed at {where}: "
    suffix = "" if err.completion is None else f"\n  completion: {err.completion[:200]!r}"
    text = str(err)
    if text.startswith(prefix) and text.endswith(suffix):
        text = text[len(prefix) : len(text) - len(suffix)]
    return text


def _unique_names(rewards: Sequence[RewardFn]) -> list[str]:
    """Component names for the metrics, with ``_2``, ``_3``... added to repeats (two lambdas)."""
    seen: dict[str, int] = {}
    out = []
    for fn in rewards:
        base = reward_name(fn)
        seen[base] = seen.get(base, 0) + 1
        out.append(base if seen[base] == 1 else f"{base}_{seen[base]}")
    return out


def _rename(metrics: dict[str, float], old: str, new: str) -> dict[str, float]:
    if old == new:
        return dict(metrics)
    prefix = f"reward/{old}/"
    return {(f"reward/{new}/" + k[len(prefix) :] if k.startswith(prefix) else k): v for k, v in metrics.items()}


class Weighted(Reward):
    """Weighted sum of several rewards, ``sum_i weights[i] * rewards[i](row)``.

    ``weights`` default to all 1.0. A component returning ``None`` for a row is either skipped
    (``none_as="skip"``: the sum runs over the applicable components only, without
    renormalising the weights, and a row where every component is ``None`` is ``None``) or
    counted as 0.0 (``none_as="zero"``: every row gets a number).
    """

    def __init__(
        self,
        rewards: Sequence[RewardFn],
        weights: Sequence[float] | None = None,
        name: str = "weighted",
        none_as: str = "skip",
    ):
        rewards = list(rewards)
        if not rewards or not all(callable(r) for r in rewards):
            raise ValueError("rewards must be a non-empty list of reward callables")
        weights = [1.0] * len(rewards) if weights is None else [float(w) for w in weights]
        if len(weights) != len(rewards):
            raise ValueError(f"got {len(weights)} weights for {len(rewards)} rewards")
        if not all(math.isfinite(w) for w in weights):
            raise ValueError(f"weights must be finite, got {weights}")
        if none_as not in _NONE_MODES:
            raise ValueError(f"none_as must be one of {_NONE_MODES}, got {none_as!r}")
        self.rewards, self.weights, self.name, self.none_as = rewards, weights, name, none_as
        self.component_names = _unique_names(rewards)

    def _combine_row(self, row: Sequence[float | None]) -> float | None:
        total, applicable = 0.0, False
        for w, v in zip(self.weights, row):
            if v is None and self.none_as == "skip":
                continue
            applicable = True
            total += w * (0.0 if v is None else v)
        return total if applicable else None

    def score(self, prompts: Sequence[str], completions: Sequence[str], **columns: Any) -> RewardResult:
        per_component: list[list[float | None]] = []
        metrics: dict[str, float] = {}
        for fn, unique in zip(self.rewards, self.component_names):
            try:
                result = score_rewards(fn, prompts, completions, columns, task=_INNER_TASK)
            except RewardError as err:
                raise ComponentError(unique, _why(err)) from err
            per_component.append(result.values)
            metrics.update(_rename(result.metrics, reward_name(fn), unique))
        values = [self._combine_row(row) for row in zip(*per_component)]
        got = [v for v in values if v is not None]
        if got:
            metrics[f"reward/{self.name}/mean"] = sum(got) / len(got)
        return RewardResult(values, metrics)
