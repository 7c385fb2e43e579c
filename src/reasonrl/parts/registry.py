"""The parts found where they stand, and the order their hooks run in, declared by the parts.

Every module of :mod:`reasonrl.parts` is imported (``pkgutil``), so a part is registered by its
``@register_part`` alone: no list to edit. The order in which the parts' hooks run is declared by
each part class:

- ``PHASE``: one of :data:`PHASES` (default ``"method"``); every part of a phase runs before every
  part of the next one;
- ``AFTER``: the keys of parts it must run after (a part reading another's channel names it).

Within those constraints, parts run in the order they are found: modules by name, and the parts of
one module in the order they are defined there. An ``AFTER`` naming an unknown part, a part of a later
phase or a cycle is an error naming it.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping
from types import ModuleType
from typing import Any

# the phases, in the order they run: what a part does to the step decides where it goes
PHASES: dict[str, str] = {
    "rollout": "replaces how the first round is generated (a rollout strategy: steering, beam, episodes)",
    "estimate": "replaces the advantage estimator (a critic): before every part that shapes advantages",
    "method": "the method's own rounds, annotations, advantage shapers and loss terms (the default)",
    "selfplay": "draws the task's items itself (self-play loops, a prompter)",
    "objective": "replaces the policy objective (trajectory balance)",
    "model": "changes the policy model's kind (a masked-diffusion LM)",
}
DEFAULT_PHASE = "method"


def import_all(package: ModuleType) -> list[str]:
    """Import every module of ``package`` (one level, by name); returns their dotted names."""
    names = [f"{package.__name__}.{m.name}" for m in pkgutil.iter_modules(package.__path__)]
    for name in names:
        importlib.import_module(name)
    return names


def phase_of(cls: type) -> str:
    phase = getattr(cls, "PHASE", DEFAULT_PHASE)
    if phase not in PHASES:
        raise ValueError(f"part {cls.__name__}: PHASE {phase!r} is not a phase; valid: {', '.join(PHASES)}")
    return phase


def after_of(cls: type) -> tuple[str, ...]:
    after = getattr(cls, "AFTER", ())
    return (after,) if isinstance(after, str) else tuple(after)


def found_order(types: Mapping[str, type]) -> list[str]:
    """The keys in the order they are found: module name, then definition order in the module (the
    registration order of one module's parts, which is its definition order whatever imported it)."""
    keys = list(types)
    return sorted(keys, key=lambda k: (types[k].__module__, keys.index(k)))


def hook_order(types: Mapping[str, type]) -> list[str]:
    """The keys of ``types`` (key -> part class) in the order their hooks run: phases in order, each
    part after its ``AFTER``, ties in found order. Raises ValueError naming a bad ``AFTER`` or a cycle."""
    found = found_order(types)
    rank = {k: list(PHASES).index(phase_of(types[k])) for k in found}
    deps: dict[str, set[str]] = {}
    for k in found:
        for dep in after_of(types[k]):
            if dep not in types:
                raise ValueError(f"part {k!r}: AFTER names {dep!r}, not a registered part; parts: {', '.join(found)}")
            if rank[dep] > rank[k]:
                raise ValueError(
                    f"part {k!r} (phase {phase_of(types[k])!r}) is declared AFTER {dep!r}, which runs in "
                    f"the later phase {phase_of(types[dep])!r}"
                )
        # every part of an earlier phase comes first: the phases as edges, so one sort does both
        deps[k] = set(after_of(types[k])) | {d for d in found if rank[d] < rank[k]}
    out: list[str] = []
    while len(out) < len(found):
        ready = [k for k in found if k not in out and deps[k] <= set(out)]
        if not ready:
            left = sorted((k for k in found if k not in out), key=rank.__getitem__)
            raise ValueError(f"the parts' AFTER declarations form a cycle: {' -> '.join(_cycle(types, left))}")
        out.append(ready[0])
    return out


def _cycle(types: Mapping[str, type], left: list[str]) -> list[str]:
    """One cycle among the unplaced parts ``left`` (earliest phase first), as ``a -> b -> ... -> a``
    (a is AFTER b ...). A part of the earliest unplaced phase waits on no earlier phase, so on an unplaced
    part it is AFTER, of the same phase: following those edges must come back to a part already seen."""
    path = [left[0]]
    while True:
        nxt = next(d for d in after_of(types[path[-1]]) if d in left)
        if nxt in path:
            return path[path.index(nxt) :] + [nxt]
        path.append(nxt)


def order_parts(types: dict[str, Any]) -> None:
    """Put the registry ``types`` (``protocol.PART_TYPES``) in hook order, in place."""
    ordered = {k: types[k] for k in hook_order(types)}
    types.clear()
    types.update(ordered)


def declared_order(types: Mapping[str, type]) -> list[dict[str, Any]]:
    """The order as data (``reasonrl recipes --json``): key, class, phase and AFTER of every part."""
    return [
        {"key": k, "part": types[k].__name__, "phase": phase_of(types[k]), "after": list(after_of(types[k]))}
        for k in hook_order(types)
    ]
