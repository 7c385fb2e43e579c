"""Run untrusted Python in a separate, locked-down process (threat model: docs/sandbox.md).

The caller's side: a fresh temp dir holding the program, ``[unshare ...] python -I -S -B runner.py``
with a minimal environment in a new session, a select loop that feeds stdin and keeps at most
``max_output_bytes`` of each output stream (so a flood cannot exhaust the caller's memory), and a
backstop that kills the whole process group if the runner does not report in
``timeout + grace`` seconds. The runner (``runner.py``) enforces the limits inside.
"""

from __future__ import annotations

import functools
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

from . import levels as iso
from .levels import Isolation, SandboxUnavailable
from .limits import Limits, SandboxError, SandboxResult, classify, make_limits

RUNNER = str(Path(__file__).with_name("runner.py"))
PROBE_CODE = "import decimal, json, os\nprint('reasonrl-sandbox-probe', os.getuid())\n"
WEAK_LEVELS = ("uid", "rlimits")
_UIDS = iso.UidSlots()
_PROBED: dict[str, str | None] = {}
_PROBE_LOCK = threading.Lock()


class SandboxWarning(RuntimeWarning):
    """The sandbox fell back to a level without namespaces (see ``isolation()``)."""


class _Capped:
    """Keeps the first ``cap`` bytes (and optionally the last ``tail`` bytes) of a stream."""

    def __init__(self, cap: int, tail: int = 0):
        self.cap, self.tail_size = cap, tail
        self.head, self.tail, self.total = bytearray(), bytearray(), 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        if len(self.head) < self.cap:
            self.head += data[: self.cap - len(self.head)]
        if self.tail_size:
            self.tail = (self.tail + data)[-self.tail_size :]

    @property
    def truncated(self) -> bool:
        return self.total > self.cap

    def text(self, part: str = "head") -> str:
        return bytes(getattr(self, part)).decode("utf-8", "replace")


def _environment(workdir: str) -> dict[str, str]:
    # Nothing of the caller's environment is inherited: secrets (tokens, keys) live there.
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": workdir, "TMPDIR": workdir}


@functools.lru_cache(maxsize=None)
def _filesystem_plan(level: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    masks, binds = iso.filesystem_plan(level)
    return tuple(masks), tuple(binds)


def _nproc(level: str, limits: Limits) -> int:
    if level == "userns":
        return limits.max_procs + 2  # unshare and the runner are counted in the user namespace
    if level == "rlimits" and os.geteuid() != 0:
        return iso.count_tasks(os.getuid()) + limits.max_procs  # counts all the caller's tasks
    return limits.max_procs


def _runner_args(level, limits, workdir, prog, status_fd, uid) -> list[str]:
    args = [
        f"level={level}",
        f"prog={prog}",
        f"workdir={workdir}",
        f"status_fd={status_fd}",
        f"timeout={limits.timeout}",
        f"cpu={limits.cpu_limit}",
        f"as_bytes={int(limits.memory_mb * 2**20)}",
        f"nproc={_nproc(level, limits)}",
        f"nofile={limits.max_files}",
        f"fsize={int(limits.max_file_mb * 2**20)}",
        f"disk_mb={limits.disk_mb}",
        f"site={int(limits.site_packages)}",
    ]
    if uid is not None:
        args.append(f"uid={uid}")
    if level not in WEAK_LEVELS:
        masks, binds = _filesystem_plan(level)
        args += [f"mask={m}" for m in masks] + [f"bind={b}" for b in binds]
    return args


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None  # old kernel: rely on end-of-file of the pipes alone


def _drain(fd: int, sink: _Capped) -> bool:
    """Read what is there; False at end of file."""
    while True:
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return True
        if not data:
            return False
        sink.add(data)


def _communicate(proc, status_fd: int, data: bytes, limits: Limits, deadline: float):
    """Feed stdin, collect capped outputs and the runner's report; True in [3] = backstop hit."""
    out, err = _Capped(limits.max_output_bytes), _Capped(limits.max_output_bytes, tail=8192)
    report = _Capped(1 << 16)
    readers = {proc.stdout.fileno(): out, proc.stderr.fileno(): err, status_fd: report}
    sel = selectors.DefaultSelector()
    for fd in readers:
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ)
    stdin_fd, sent = proc.stdin.fileno(), 0
    if data:
        os.set_blocking(stdin_fd, False)
        sel.register(stdin_fd, selectors.EVENT_WRITE)
    else:
        proc.stdin.close()
    pidfd = _pidfd(proc.pid)
    if pidfd is not None:
        sel.register(pidfd, selectors.EVENT_READ)
    try:
        while any(fd in readers for fd in sel.get_map()):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return out, err, report, True
            for key, _ in sel.select(remaining):
                if key.fd == pidfd:  # the runner is gone: take what is buffered, stop waiting
                    for fd in [fd for fd in sel.get_map() if fd in readers]:
                        _drain(fd, readers[fd])
                    return out, err, report, False
                if key.fd == stdin_fd:
                    sent = _feed(sel, proc, data, sent)
                elif not _drain(key.fd, readers[key.fd]):
                    sel.unregister(key.fd)
        return out, err, report, False
    finally:
        sel.close()
        if pidfd is not None:
            os.close(pidfd)


def _feed(sel, proc, data: bytes, sent: int) -> int:
    try:
        sent += os.write(proc.stdin.fileno(), memoryview(data)[sent : sent + 65536])
    except BlockingIOError:
        return sent
    except BrokenPipeError:
        sent = len(data)  # the program stopped reading: not an error
    if sent >= len(data):
        sel.unregister(proc.stdin.fileno())
        proc.stdin.close()
    return sent


def _remove_tree(path: str) -> None:
    def retry(func, failed, _exc):
        # A program running as the caller (weak levels) may have chmod-ed its files away.
        os.chmod(os.path.dirname(failed), 0o700)
        if os.path.isdir(failed) and not os.path.islink(failed):
            os.chmod(failed, 0o700)
        func(failed)

    shutil.rmtree(path, onerror=retry)


def _result(level, uid, workdir, proc, streams, start) -> SandboxResult:
    out, err, report_sink, backstop = streams
    report = dict(line.split("\t", 1) for line in report_sink.text().splitlines() if "\t" in line)
    if "setup_error" in report:
        raise SandboxError(f"sandbox setup failed at isolation level {level!r}: {report['setup_error']}")
    common = dict(
        stdout=out.text(),
        stderr=err.text(),
        wall_seconds=time.monotonic() - start,
        stdout_truncated=out.truncated,
        stderr_truncated=err.truncated,
        isolation=level,
        uid=uid,
        workdir=workdir,
    )
    if backstop or "returncode" not in report:
        note = (
            "the runner did not report within timeout + grace: its process group was killed"
            if backstop
            else f"the sandbox runner ended without a report (exit {proc.returncode})"
        )
        status = "timeout" if backstop else "killed"
        return SandboxResult(status=status, returncode=None, seconds=common["wall_seconds"], note=note, **common)
    returncode = int(report["returncode"])
    status, sig = classify(returncode, report["timed_out"] == "1", err.text("tail"))
    return SandboxResult(
        status=status,
        returncode=returncode,
        seconds=float(report["seconds"]),
        cpu_seconds=float(report["cpu_seconds"]),
        max_rss_mb=int(report["max_rss_kb"]) / 1024,
        signal=sig,
        **common,
    )


def _launch(level, limits, tmp, workdir, prog, data, uid) -> SandboxResult:
    read_fd, write_fd = os.pipe()
    cmd = iso.wrapper(level) + [
        sys.executable,
        "-I",
        "-S",
        "-B",
        RUNNER,
        *_runner_args(level, limits, workdir, prog, write_fd, uid),
    ]
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(write_fd,),
            cwd=tmp,
            env=_environment(workdir),
            start_new_session=True,
        )
    except OSError as exc:
        os.close(read_fd)
        raise SandboxError(f"could not start the sandbox ({level}): {exc}") from exc
    finally:
        os.close(write_fd)
    with proc:
        try:
            streams = _communicate(proc, read_fd, data, limits, start + limits.timeout + limits.grace)
        finally:
            os.close(read_fd)
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)  # runner, unshare and whatever stayed
                except ProcessLookupError:
                    pass
            try:
                proc.wait(timeout=limits.grace)
            except subprocess.TimeoutExpired as exc:
                raise SandboxError(f"sandbox process {proc.pid} survived SIGKILL") from exc
    return _result(level, uid, workdir, proc, streams, start)


def execute(code: str, stdin: str | bytes, limits: Limits, level: str) -> SandboxResult:
    """Run ``code`` at exactly ``level`` (no detection); prefer :func:`run_python`."""
    iso.check_level(level)
    if not isinstance(code, str):
        raise TypeError(f"sandbox code must be str, got {type(code).__name__}")
    if not isinstance(stdin, (str, bytes)):
        raise TypeError(f"sandbox stdin must be str or bytes, got {type(stdin).__name__}")
    data = stdin.encode("utf-8") if isinstance(stdin, str) else stdin
    uid = _UIDS.acquire() if level in ("namespaces", "uid") else None
    tmp = tempfile.mkdtemp(prefix="reasonrl-sbx-")
    try:
        prog = os.path.join(tmp, "prog.py")
        with open(prog, "w", encoding="utf-8") as f:
            f.write(code)
        workdir = tmp if level in WEAK_LEVELS else os.path.join("/tmp", os.path.basename(tmp))
        if level == "uid":
            os.chown(tmp, uid, uid)
            os.chown(prog, uid, uid)
        return _launch(level, limits, tmp, workdir, prog, data, uid)
    finally:
        _remove_tree(tmp)
        if uid is not None:
            _UIDS.release(uid)


def _probe(level: str, refresh: bool) -> str | None:
    """None when ``level`` works here, else why not (cached per process)."""
    with _PROBE_LOCK:
        if refresh or level not in _PROBED:
            why = iso.precheck(level)
            if why is None:
                try:
                    res = execute(PROBE_CODE, "", Limits(timeout=10.0), level)
                except SandboxError as exc:
                    why = str(exc)
                else:
                    uid = {"namespaces": res.uid, "uid": res.uid, "userns": 0}.get(level, os.getuid())
                    expected = f"reasonrl-sandbox-probe {uid}"
                    if res.status != "ok" or res.stdout.strip() != expected:
                        why = (
                            f"probe program failed: status={res.status}, stdout={res.stdout[-200:]!r}, "
                            f"stderr={res.stderr[-400:]!r}"
                        )
            _PROBED[level] = why
        return _PROBED[level]


def isolation(level: str = "auto", *, refresh: bool = False) -> Isolation:
    """The isolation :func:`run_python` uses: the strongest level that works here ("auto"), or the
    named one. Each level is probed once per process by running a tiny program in it."""
    names = iso.candidates() if level == "auto" else (iso.check_level(level),)
    unavailable: dict[str, str] = {}
    for name in names:
        why = _probe(name, refresh)
        if why is None:
            return Isolation(name, iso.FEATURES[name], iso.MISSING[name], unavailable)
        unavailable[name] = why
    detail = "; ".join(f"{k}: {v}" for k, v in unavailable.items())
    raise SandboxUnavailable(f"sandbox level {level!r} is not available here: {detail}")


def resolve_level(level: str = "auto", require: str | None = None) -> str:
    """The level to run at; raises when ``require`` (a minimum level) cannot be met."""
    if require is not None:
        iso.check_level(require, "require")
    info = isolation(level)
    if require is not None and not iso.stronger_or_equal(info.level, require):
        raise SandboxUnavailable(f"require={require!r} but the strongest level here is {info}")
    if level == "auto" and require is None and info.level in WEAK_LEVELS:
        warnings.warn(f"reasonrl sandbox is running with WEAK isolation; {info}", SandboxWarning, stacklevel=3)
    return info.level


def run_python(
    code: str,
    *,
    stdin: str | bytes = "",
    timeout: float = 2.0,
    memory_mb: int = 256,
    level: str = "auto",
    require: str | None = None,
    **limits,
) -> SandboxResult:
    """Run untrusted Python ``code`` in a sandbox and return what it did.

    ``stdin`` is fed to the program; ``timeout`` (wall seconds) and ``memory_mb`` (address space)
    plus any :class:`Limits` field bound it. ``level``: "auto" (strongest available; a
    :class:`SandboxWarning` when that is a weak one) or a level name of ``LEVELS``;
    ``require``: the weakest acceptable level, :class:`SandboxUnavailable` otherwise.
    """
    lim = make_limits(timeout=timeout, memory_mb=memory_mb, **limits)
    return execute(code, stdin, lim, resolve_level(level, require))
