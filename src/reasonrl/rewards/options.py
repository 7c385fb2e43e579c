"""A recipe's extra rewards as configuration: ``rewards.<name>.<option>=value`` on the command line.

Reward knobs are part of a method (CodeThinker's process term, TEMPO's penalty, the weight of a
shaping term), so they must be settable the way ``optim.lr`` is, recorded in ``config.yaml`` and
reproduced on ``--resume``. A reward exposes its options in one of two ways:

* it is a dataclass: its init fields are the options, and a change is ``dataclasses.replace``;
* it defines ``options() -> dict`` (its constructor's keyword arguments): a change rebuilds it as
  ``type(reward)(**{**reward.options(), **changes})``.

``weight`` is always an option: the weight the recipe gives the reward. Names are
:func:`~reasonrl.rewards.base.reward_name` (``reasonrl recipes`` shows them).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from .base import reward_name

Extra = tuple[tuple[Callable[..., Any], float], ...]
_PLAIN = (str, int, float, bool, type(None))


def reward_options(fn: Any) -> dict[str, Any] | None:
    """The reward's options (without ``weight``), or None if it exposes none."""
    if dataclasses.is_dataclass(fn) and not isinstance(fn, type):
        return {f.name: getattr(fn, f.name) for f in dataclasses.fields(fn) if f.init}
    options = getattr(fn, "options", None)
    return dict(options()) if callable(options) else None


def _plain(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return isinstance(value, _PLAIN)


def _coerce(old: Any, new: Any, where: str) -> Any:
    """A float option given as an int or a YAML-1.1 string (``1e-4``) becomes a float, a tuple option
    given as a list (YAML has no tuples) a tuple; nothing else changes."""
    if isinstance(old, tuple) and isinstance(new, list):
        return tuple(new)
    if isinstance(old, float) and not isinstance(new, bool) and isinstance(new, (int, str)):
        try:
            return float(new)
        except ValueError:
            raise ValueError(f"config key {where!r} must be a number, got {new!r}") from None
    return new


def with_options(fn: Any, changes: dict[str, Any], where: str) -> Any:
    """A copy of reward ``fn`` with ``changes`` applied; an unknown option names the valid ones."""
    current = reward_options(fn)
    if current is None:
        raise ValueError(
            f"config key {where!r}: reward {reward_name(fn)!r} ({type(fn).__name__}) exposes no "
            "options (make it a dataclass or give it an options() method)"
        )
    unknown = sorted(set(changes) - set(current))
    if unknown:
        raise ValueError(
            f"config key {where}.{unknown[0]!r} is not an option of reward {reward_name(fn)!r}; "
            f"valid: {sorted(current) + ['weight']}"
        )
    changes = {k: _coerce(current[k], v, f"{where}.{k}") for k, v in changes.items()}
    if dataclasses.is_dataclass(fn):
        return dataclasses.replace(fn, **changes)
    return type(fn)(**{**current, **changes})


def apply_reward_overrides(extra: Extra, overrides: dict[str, Any]) -> Extra:
    """``extra`` with ``{name: {option: value, "weight": w}}`` applied; every name must be one of its rewards."""
    names = [reward_name(fn) for fn, _ in extra]
    for name, changes in overrides.items():
        if name not in names:
            raise ValueError(
                f"config key 'rewards.{name}': the recipe has no extra reward {name!r}; "
                f"its extra rewards: {names or 'none'}"
            )
        if not isinstance(changes, dict):
            raise ValueError(f"config key 'rewards.{name}' is a section: give rewards.{name}.<option>=value")
    out = []
    for (fn, weight), name in zip(extra, names):
        changes = dict(overrides.get(name, {}))
        weight = float(changes.pop("weight", weight))
        out.append((with_options(fn, changes, f"rewards.{name}") if changes else fn, weight))
    return tuple(out)


def rewards_dict(extra: Extra) -> dict[str, dict[str, Any]]:
    """What ``config.yaml`` records: each extra reward's plain options and weight (callables are
    left out: they cannot be written, and an override never touches them). Tuples stay tuples here;
    the config writer turns them into lists as it does for every section."""
    out = {}
    for fn, weight in extra:
        options = reward_options(fn) or {}
        out[reward_name(fn)] = {**{k: v for k, v in options.items() if _plain(v)}, "weight": weight}
    return out
