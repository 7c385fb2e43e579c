"""Rules for checking configuration values: a rule says whether a value is valid and, if not,
which values are (used by :mod:`reasonrl.config.validate` and its per-method tables)."""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Any, Callable

Values = dict[str, Any]  # dotted config key -> value, every knob of one run


@dataclass(frozen=True)
class Rule:
    """``ok(value, values)`` is True for a valid value; ``text`` (or ``text(values)``) says which
    values are valid. ``values`` lets a rule depend on another knob (group_size on the estimator)."""

    ok: Callable[[Any, Values], bool]
    text: str | Callable[[Values], str]

    def describe(self, values: Values) -> str:
        return self.text if isinstance(self.text, str) else self.text(values)


def at_least(lo: float) -> Rule:
    return Rule(lambda v, _: v >= lo, f">= {lo}")


def above(lo: float) -> Rule:
    return Rule(lambda v, _: v > lo, f"> {lo}")


def within(lo: float, hi: float, *, open_lo: bool = False, open_hi: bool = False) -> Rule:
    def ok(v: Any, _: Values) -> bool:
        return (lo < v if open_lo else lo <= v) and (v < hi if open_hi else v <= hi)

    return Rule(ok, f"in {'(' if open_lo else '['}{lo}, {hi}{')' if open_hi else ']'}")


def one_of(names: typing.Iterable[str]) -> Rule:
    valid = sorted(names)
    return Rule(lambda v, _: v in valid, f"one of {', '.join(valid)}")


SEED = within(0, 2**32 - 1)  # numpy's seed range
