"""The minimum isolation level for model-written code in this process (issue 41, ``sandbox.require``).

Every path that runs model-written (or a data file's) code passes :func:`required_level` to the sandbox
as ``require=``: the tracer of ``tasks/codegen.py`` (AZR, PopuLoRA, the ``code`` task), the environment
runner of ``tasks/env_runtime.py`` (EvoEnv) and the CodeAct sessions of ``envs/codeact.py`` (FHIR). So
such code never runs at a weaker level than asked: without the level the call raises
:class:`~reasonrl.rewards.sandbox.SandboxUnavailable` instead of falling back behind a warning. A
training run sets the level from its ``sandbox.require`` key for its duration (:func:`requiring`), after
``reasonrl.config.validate`` has refused the run, before anything loads, on a machine that cannot give it;
outside a run it is :data:`DEFAULT_REQUIRE`. Levels are ordered namespaces > userns > uid > rlimits;
a requirement is met by its level or a stronger one. ``rlimits`` accepts any level: trusted code only.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from .levels import check_level

DEFAULT_REQUIRE = "userns"
_STACK = [DEFAULT_REQUIRE]


def required_level() -> str:
    """The level model-written code needs here (the innermost :func:`requiring`, else the default)."""
    return _STACK[-1]


@contextmanager
def requiring(level: str) -> Iterator[str]:
    """Model-written code needs at least ``level`` inside the block (a run's ``sandbox.require``)."""
    _STACK.append(check_level(level, "require"))
    try:
        yield level
    finally:
        _STACK.pop()
