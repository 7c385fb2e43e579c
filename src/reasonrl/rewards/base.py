"""The reward contract, shared by every built-in and user reward.

A reward is any callable ``(prompts, completions, **columns) -> list[float | None]`` (TRL's
contract, so existing reward functions work unchanged); ``None`` means "not applicable to this
row". Built-in rewards subclass :class:`Reward`, whose :meth:`Reward.score` also returns metrics.
:func:`score_rewards` is the one place that calls a reward: it validates what comes back and turns
an exception into a :class:`RewardError` naming the task, the row and the completion.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

RewardFn = Callable[..., Sequence["float | None"]]


@dataclass
class RewardResult:
    values: list[float | None]
    metrics: dict[str, float] = field(default_factory=dict)
    # rows the reward could not score (a judge that timed out or did not parse: their value is None): the
    # batch maker leaves them out of the advantage and the loss instead of reading None as 0. None: none failed
    failed: list[bool] | None = None


class RewardError(RuntimeError):
    """A reward function raised or returned something unusable for one named row."""

    def __init__(self, task: str, reward: str, row: int | None, completion: str | None, why: str):
        self.task, self.reward, self.row, self.completion = task, reward, row, completion
        where = f"row {row}" if row is not None else "the batch"
        shown = "" if completion is None else f"\n  completion: {completion[:200]!r}"
        super().__init__(f"reward {reward!r} on task {task!r} failed at {where}: {why}{shown}")


class Reward:
    """Base of the built-in rewards: implement :meth:`score`; calling gives the plain values."""

    name: str = "reward"

    def score(self, prompts: Sequence[str], completions: Sequence[str], **columns: Any) -> RewardResult:
        raise NotImplementedError

    def __call__(self, prompts: Sequence[str], completions: Sequence[str], **columns: Any) -> list[float | None]:
        return self.score(prompts, completions, **columns).values


def reward_name(fn: RewardFn) -> str:
    return getattr(fn, "name", None) or getattr(fn, "__name__", None) or type(fn).__name__


def summarize(name: str, values: Sequence[float | None]) -> dict[str, float]:
    """Mean over applicable rows, their std (Bessel-corrected, as TRL logs ``rewards/<name>/std``: two or
    more rows) and the fraction of rows the reward declined (None)."""
    got = [v for v in values if v is not None]
    out = {f"reward/{name}/frac_none": 1.0 - len(got) / max(len(values), 1)}
    if got:
        mean = sum(got) / len(got)
        out[f"reward/{name}/mean"] = mean
        if len(got) > 1:
            out[f"reward/{name}/std"] = (sum((v - mean) ** 2 for v in got) / (len(got) - 1)) ** 0.5
    return out


def _call(fn: RewardFn, prompts, completions, columns) -> RewardResult:
    if isinstance(fn, Reward):
        return fn.score(prompts, completions, **columns)
    return RewardResult(list(fn(prompts, completions, **columns)))


def _find_bad_row(fn: RewardFn, prompts, completions, columns) -> tuple[int, BaseException] | None:
    # The batch call raised: replay row by row so the error can name the offending row.
    n = len(completions)
    for i in range(n):
        # per-row columns are sliced; anything else (TRL's trainer_state, a scalar) passes as is
        row_cols = {k: [v[i]] if isinstance(v, (list, tuple)) and len(v) == n else v for k, v in columns.items()}
        try:
            _call(fn, [prompts[i]], [completions[i]], row_cols)
        except Exception as err:  # noqa: BLE001 - re-raised below as a RewardError with context
            return i, err
    return None


def _check_values(values: list, n: int, task: str, name: str, completions) -> None:
    if len(values) != n:
        raise RewardError(task, name, None, None, f"returned {len(values)} values for {n} completions")
    for i, v in enumerate(values):
        if v is None:
            continue
        if not isinstance(v, numbers.Real):
            raise RewardError(task, name, i, completions[i], f"returned {type(v).__name__}, not a float or None")
        if not math.isfinite(float(v)):
            raise RewardError(task, name, i, completions[i], f"returned a non-finite value {v}")


def score_rewards(
    fn: RewardFn,
    prompts: Sequence[str],
    completions: Sequence[str],
    columns: dict[str, Sequence[Any]] | None = None,
    *,
    task: str = "?",
) -> RewardResult:
    """Call ``fn`` on a batch, validate its output and attach its metrics; never a silent zero."""
    columns = dict(columns or {})
    name = reward_name(fn)
    try:
        result = _call(fn, list(prompts), list(completions), columns)
    except Exception as err:  # noqa: BLE001 - wrapped with the row that triggers it
        bad = _find_bad_row(fn, list(prompts), list(completions), columns)
        row, cause = bad if bad is not None else (None, err)
        shown = completions[row] if row is not None else None
        raise RewardError(task, name, row, shown, f"{type(cause).__name__}: {cause}") from err
    _check_values(list(result.values), len(completions), task, name, completions)
    values = [None if v is None else float(v) for v in result.values]
    metrics = {**summarize(name, values), **result.metrics}
    failed = None if result.failed is None else [bool(f) for f in result.failed]
    if failed is not None and (len(failed) != len(values) or any(f and v is not None for f, v in zip(failed, values))):
        raise RewardError(
            task, name, None, None, "its failed rows must be one flag per row, each failed row's value None"
        )
    return RewardResult(list(values), metrics, failed)
