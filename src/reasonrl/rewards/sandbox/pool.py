"""Many sandboxed programs in parallel: a bounded thread pool, each thread waiting on its own
sandbox process (the work happens in the child processes, so threads are enough; subprocess
creation without ``preexec_fn`` is thread-safe)."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Sequence

from .core import execute, resolve_level
from .limits import SandboxResult, make_limits


JOBS = Path(__file__).with_name("jobs.py").read_text(encoding="utf-8")


def batch_program(body: str) -> str:
    """A batch harness: ``body`` after the fork-per-job helpers of :mod:`.jobs` (``each_fresh``,
    ``send``), so that each of its jobs runs in a fresh copy of the warmed-up interpreter (issue 41)."""
    return JOBS + "\n" + body


def default_workers() -> int:
    return max(1, min(32, os.cpu_count() or 1))


def run_many(
    codes: Sequence[str],
    *,
    stdins: Sequence[str | bytes] | str | bytes | None = None,
    workers: int | None = None,
    timeout: float = 2.0,
    memory_mb: int = 256,
    level: str = "auto",
    require: str | None = None,
    **limits,
) -> list[SandboxResult]:
    """Run every program of ``codes`` (one sandbox each) with at most ``workers`` at a time;
    results come back in the order of ``codes``.

    ``stdins``: one input per program, or one input for all (default: empty). ``workers``:
    default min(32, CPU count); each running program is a process, so the bound also bounds the
    memory used (workers x memory_mb at most, times max_procs for programs that fork).
    Other options as :func:`run_python`.
    """
    codes = list(codes)
    if stdins is None or isinstance(stdins, (str, bytes)):
        inputs = [stdins or ""] * len(codes)
    else:
        inputs = list(stdins)
        if len(inputs) != len(codes):
            raise ValueError(f"run_many: {len(inputs)} stdins for {len(codes)} programs")
    workers = default_workers() if workers is None else workers
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"run_many: workers={workers!r} must be a positive int")
    lim = make_limits(timeout=timeout, memory_mb=memory_mb, **limits)
    resolved = resolve_level(level, require)
    if not codes:
        return []
    with ThreadPoolExecutor(max_workers=min(workers, len(codes)), thread_name_prefix="reasonrl-sandbox") as pool:
        return list(pool.map(lambda pair: execute(pair[0], pair[1], lim, resolved), zip(codes, inputs)))


class Sandbox:
    """A reusable sandbox configuration (the spec's ``Sandbox`` protocol, section 0):
    ``Sandbox(timeout=1.0, require="namespaces").run(code, stdin="...")`` / ``.run_many(codes)``.
    Options as :func:`run_python`; they are validated when the object is made."""

    def __init__(self, *, level: str = "auto", require: str | None = None, **limits):
        self.limits = make_limits(**limits)
        self.level, self.require = level, require
        self.active_level = resolve_level(level, require)

    def run(self, code: str, stdin: str | bytes = "") -> SandboxResult:
        return execute(code, stdin, self.limits, self.active_level)

    def run_many(self, codes: Sequence[str], *, stdins=None, workers: int | None = None) -> list[SandboxResult]:
        opts = {f: getattr(self.limits, f) for f in self.limits.__dataclass_fields__}
        return run_many(codes, stdins=stdins, workers=workers, level=self.active_level, **opts)
