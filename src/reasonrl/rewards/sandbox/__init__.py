"""Sandboxed execution of untrusted Python (model-written programs, environments, tool actions).

    from reasonrl.rewards.sandbox import run_python, run_many, isolation
    res = run_python("print(input()[::-1])", stdin="abc", timeout=2.0, memory_mb=256)
    res.status, res.stdout          # ("ok", "cba\\n")
    print(isolation())              # which isolation is active here, and what it does not cover

Every program runs in its own process tree, never in the caller's, under the strongest isolation
this machine allows (:data:`LEVELS`; Linux namespaces + an unprivileged uid when run as root).
What it protects against and what it does not: docs/sandbox.md.
"""

from .core import SandboxWarning, execute, isolation, resolve_level, run_python
from .levels import FEATURES, LEVELS, Isolation, SandboxUnavailable
from .limits import STATUSES, Limits, SandboxError, SandboxResult, classify, make_limits
from .policy import DEFAULT_REQUIRE, required_level, requiring
from .pool import Sandbox, batch_program, run_many

__all__ = [
    "run_python",
    "run_many",
    "isolation",
    "Sandbox",
    "execute",
    "resolve_level",
    "Limits",
    "make_limits",
    "SandboxResult",
    "Isolation",
    "STATUSES",
    "LEVELS",
    "FEATURES",
    "SandboxError",
    "SandboxUnavailable",
    "SandboxWarning",
    "classify",
    "DEFAULT_REQUIRE",
    "required_level",
    "requiring",
    "batch_program",
]
