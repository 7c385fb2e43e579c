"""Resource limits, the result record and the status classification of the sandbox.

Defaults are inferred (the spec, section 10, only says "RLIMIT_AS e.g. 512 MB, RLIMIT_CPU, a small
RLIMIT_FSIZE, RLIMIT_NOFILE, RLIMIT_NPROC, capped output"); the issue asks for 2 s and 256 MB.
Every limit is per process, except ``timeout`` (the whole call) and ``disk_mb`` (per tmpfs).
"""

from __future__ import annotations

import math
import re
import signal
from dataclasses import dataclass, fields

STATUSES = ("ok", "timeout", "memory", "error", "killed")


class SandboxError(RuntimeError):
    """The sandbox itself failed (setup, launch): never the program's fault, always raised."""


@dataclass(frozen=True)
class Limits:
    """Limits of one sandboxed program.

    timeout: wall-clock seconds from the program's start; then the whole process tree is killed.
    memory_mb: RLIMIT_AS (address space) per process; exceeding it gives ``MemoryError``.
    cpu_seconds: RLIMIT_CPU per process; None = ceil(timeout) + 1 (wall time is the real bound).
    max_procs: RLIMIT_NPROC: processes AND threads of the sandbox uid.
    max_files: RLIMIT_NOFILE (open descriptors per process).
    max_file_mb: RLIMIT_FSIZE (largest file a process may write).
    disk_mb: size of each private tmpfs (/tmp holding the work dir, /var/tmp, /dev/shm), namespace
        levels only: files there are memory, so this bounds the total written.
    max_output_bytes: bytes of stdout and of stderr kept (each); the rest is read and dropped.
    site_packages: also give the program site-packages (default: standard library only, faster).
    grace: extra seconds the caller waits for the runner's report before killing it all itself.
    """

    timeout: float = 2.0
    memory_mb: int = 256
    cpu_seconds: float | None = None
    max_procs: int = 16
    max_files: int = 64
    max_file_mb: int = 16
    disk_mb: int = 64
    max_output_bytes: int = 65536
    site_packages: bool = False
    grace: float = 5.0

    def __post_init__(self):
        def positive(name, value, minimum=0):
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
                or value <= minimum
            ):
                raise ValueError(f"sandbox limit {name}={value!r} must be a finite number > {minimum}")

        positive("timeout", self.timeout)
        positive("memory_mb", self.memory_mb, 31)  # the bootstrap interpreter alone maps ~15 MB
        if self.cpu_seconds is not None:
            positive("cpu_seconds", self.cpu_seconds)
        positive("max_procs", self.max_procs)
        positive("max_files", self.max_files, 7)  # stdio + what the interpreter opens itself
        positive("max_file_mb", self.max_file_mb)
        positive("disk_mb", self.disk_mb)
        positive("max_output_bytes", self.max_output_bytes)
        positive("grace", self.grace)
        if not isinstance(self.site_packages, bool):
            raise ValueError(f"sandbox limit site_packages={self.site_packages!r} must be a bool")

    @property
    def cpu_limit(self) -> int:
        return math.ceil(self.cpu_seconds if self.cpu_seconds is not None else self.timeout + 1)


LIMIT_NAMES = tuple(f.name for f in fields(Limits))


def make_limits(**options) -> Limits:
    unknown = sorted(set(options) - set(LIMIT_NAMES))
    if unknown:
        raise ValueError(f"unknown sandbox option(s) {', '.join(unknown)}; valid: {', '.join(LIMIT_NAMES)}")
    return Limits(**options)


@dataclass(frozen=True)
class SandboxResult:
    """What one program did.

    status: "ok" (exit 0), "timeout" (wall or CPU limit), "memory" (MemoryError / ENOMEM at the
        address-space limit), "error" (nonzero exit, e.g. an uncaught exception), "killed" (a
        signal, e.g. a segfault: see ``signal``).
    returncode: the exit code, or -N when killed by signal N (None if the runner never reported).
    seconds: the program's wall time (measured by the runner); wall_seconds: the whole call.
    """

    status: str
    returncode: int | None
    stdout: str
    stderr: str
    seconds: float
    wall_seconds: float
    cpu_seconds: float | None = None
    max_rss_mb: float | None = None
    signal: int | None = None
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    isolation: str = ""
    uid: int | None = None
    workdir: str = ""
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"


_MEMORY = re.compile(r"^(MemoryError\b|OSError: \[Errno 12\]|Fatal Python error: .*(memory|MemoryError))")


def classify(returncode: int, timed_out: bool, stderr_tail: str) -> tuple[str, int | None]:
    """(status, signal) of a finished program; see :class:`SandboxResult`."""
    sig = -returncode if returncode < 0 else None
    if timed_out or sig == signal.SIGXCPU:
        return "timeout", sig
    if returncode == 0:
        return "ok", None
    lines = [line for line in stderr_tail.splitlines() if line.strip()]
    if lines and _MEMORY.search(lines[-1]):
        return "memory", sig
    return ("killed" if sig is not None else "error"), sig
