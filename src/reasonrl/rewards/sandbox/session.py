"""A persistent sandboxed interpreter: one process kept alive across calls (a CodeAct episode's turns).

    with SandboxSession(tools={"add": lambda a, b: a + b}, turn_timeout=2.0) as s:
        s.run("x = add(1, 2)").error      # None
        s.run("print(x)").stdout          # "3\\n": state survives between cells

It is the same sandbox as :func:`~reasonrl.rewards.sandbox.run_python` (the same runner, isolation
level, rlimits and minimal environment; docs/sandbox.md), running :mod:`.repl` as its program. The
limits apply to the whole session: ``lifetime`` is its wall-clock budget (the runner's ``timeout``),
and each cell gets ``turn_timeout`` seconds, enforced here: a cell that overruns has its whole
session killed (nothing else stops a ``while True: pass`` that catches every exception), and the
next cell starts a fresh interpreter. Tools run in the caller's process (they may hold a database);
the sandboxed code calls them through the protocol with JSON values only.

Issue 41: the cells run in an interpreter that :mod:`.repl`'s supervisor forks, so they cannot reach
this protocol; every line is still decoded and type-checked here, and anything that fails (any decode
error, a mistyped field) is a lost session, never an exception. :meth:`SandboxSession.close` lets the
runner sweep the program's descendants before anything is killed from outside.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from . import levels as iso
from .core import RUNNER, WEAK_LEVELS, _UIDS, _environment, _remove_tree, _runner_args, resolve_level
from .limits import SandboxError, make_limits

REPL = Path(__file__).with_name("repl.py").read_text(encoding="utf-8")


@dataclass(frozen=True)
class CellResult:
    """What one cell did. ``error``: the traceback (an exception), or why the session was lost
    (timeout, exit, a broken protocol); ``final``: ``final_answer`` was called, with ``answer``."""

    stdout: str = ""
    value: str | None = None  # repr of a trailing expression's value
    error: str | None = None
    final: bool = False
    answer: str | None = None
    timed_out: bool = False
    restarted: bool = False  # the session was killed: the next cell starts with empty state


def _text(value: Any) -> bool:
    return value is None or isinstance(value, str)


def _cell(msg: dict) -> CellResult | None:
    """A result line as a CellResult, or None when a field has the wrong type (issue 41: a forged
    ``error`` that is not text crashed the step)."""
    fields = {k: msg.get(k) for k in ("stdout", "value", "error", "answer")}
    final = msg.get("final", False)
    if not all(map(_text, fields.values())) or not isinstance(final, bool):
        return None
    return CellResult(
        stdout=fields["stdout"] or "",
        value=fields["value"],
        error=fields["error"],
        final=final,
        answer=fields["answer"],
    )


def _tool_call_ok(msg: dict) -> bool:
    return (
        isinstance(msg.get("name"), str)
        and isinstance(msg.get("args", []), list)
        and isinstance(msg.get("kwargs", {}), dict)
    )


class SandboxSession:
    """One sandboxed interpreter whose globals persist across :meth:`run` calls; ``tools``: name ->
    callable bound in the interpreter. Not thread-safe: one session per episode."""

    def __init__(
        self,
        tools: Mapping[str, Callable[..., Any]] | None = None,
        *,
        turn_timeout: float = 2.0,
        lifetime: float = 300.0,
        max_chars: int = 4000,
        level: str = "auto",
        require: str | None = None,
        **limits,
    ):
        if turn_timeout <= 0 or lifetime < turn_timeout:
            raise ValueError(f"SandboxSession: need 0 < turn_timeout <= lifetime, got {turn_timeout}, {lifetime}")
        self.tools = dict(tools or {})
        self.turn_timeout, self.max_chars = float(turn_timeout), int(max_chars)
        self.limits = make_limits(timeout=lifetime, **limits)
        self.level = resolve_level(level, require)
        self._proc: subprocess.Popen | None = None
        self._buf = b""

    # ------------------------------------------------------------------ lifecycle
    def _start(self) -> None:
        self._uid = _UIDS.acquire() if self.level in ("namespaces", "uid") else None
        self._tmp = tempfile.mkdtemp(prefix="reasonrl-repl-")
        prog = os.path.join(self._tmp, "prog.py")
        with open(prog, "w", encoding="utf-8") as f:
            f.write(REPL)
        workdir = self._tmp if self.level in WEAK_LEVELS else os.path.join("/tmp", os.path.basename(self._tmp))
        if self.level == "uid":
            os.chown(self._tmp, self._uid, self._uid)
            os.chown(prog, self._uid, self._uid)
        self._status, write_fd = os.pipe()
        cmd = iso.wrapper(self.level) + [
            sys.executable,
            "-I",
            "-S",
            "-B",
            RUNNER,
            *_runner_args(self.level, self.limits, workdir, prog, write_fd, self._uid),
        ]
        try:
            self._proc = subprocess.Popen(
                cmd,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                pass_fds=(write_fd,),
                cwd=self._tmp,
                env=_environment(workdir),
                start_new_session=True,
            )
        except OSError as exc:
            self._cleanup()
            raise SandboxError(f"could not start the sandbox session ({self.level}): {exc}") from exc
        finally:
            os.close(write_fd)
        self._buf = b""
        try:
            self._send({"op": "hello", "tools": sorted(self.tools), "max_chars": self.max_chars})
            ready = self._read(time.monotonic() + max(10.0, self.turn_timeout))
        except OSError:  # the interpreter died at once
            ready = None
        if ready is None or ready.get("op") != "ready":
            report = self._status_report()
            self.close()
            raise SandboxError(f"the sandbox session did not start at level {self.level!r}: {report or 'no report'}")

    def close(self) -> None:
        """Kill the interpreter and everything it started, then remove its files. SIGTERM first: the
        runner then kills the program itself and sweeps its descendants (a detached grandchild at the
        weak levels, issue 41) before it exits; SIGKILL of the whole group only if it does not in
        ``grace`` seconds."""
        if self._proc is not None:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(self._proc.pid, sig)
                except ProcessLookupError:
                    pass
                try:
                    self._proc.wait(timeout=self.limits.grace if sig == signal.SIGTERM else None)
                    break
                except subprocess.TimeoutExpired:
                    continue
            for stream in (self._proc.stdin, self._proc.stdout):
                stream.close()
            self._proc = None
            self._cleanup()

    def _cleanup(self) -> None:
        os.close(self._status)
        _remove_tree(self._tmp)
        if self._uid is not None:
            _UIDS.release(self._uid)

    def __enter__(self) -> "SandboxSession":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ the protocol
    def run(self, code: str) -> CellResult:
        """Run one cell; never raises for what the code does (errors, timeouts, exits are results)."""
        if not isinstance(code, str):
            raise TypeError(f"SandboxSession.run: code must be str, got {type(code).__name__}")
        if self._proc is None:
            self._start()
        deadline = time.monotonic() + self.turn_timeout
        try:
            self._send({"op": "exec", "code": code})
        except (BrokenPipeError, OSError):
            return self._lost("the interpreter exited")
        while True:
            msg = self._read(deadline)
            if msg is None:
                timed_out = time.monotonic() >= deadline
                why = (
                    f"TimeoutError: the code ran longer than {self.turn_timeout:g} s"
                    if timed_out
                    else "the interpreter exited (or broke its protocol)"
                )
                return self._lost(why, timed_out)
            if msg.get("op") == "result":
                cell = _cell(msg)
                return cell if cell is not None else self._lost("the interpreter sent a malformed result")
            if msg.get("op") != "tool" or not _tool_call_ok(msg):
                return self._lost(f"the interpreter sent an unknown or malformed message {str(msg)[:80]!r}")
            try:
                self._send(self._serve(msg))
            except OSError:
                return self._lost("the interpreter exited")

    def _serve(self, msg: dict) -> dict:
        """A tool call from the sandbox, run here; its failure goes back as the cell's ToolError."""
        fn = self.tools.get(str(msg.get("name")))
        if fn is None:
            return {"error": f"no tool named {msg.get('name')!r}"}
        try:
            value = fn(*msg.get("args", []), **msg.get("kwargs", {}))
            json.dumps(value)
        except Exception as exc:  # noqa: BLE001 - the model chose the arguments: any failure is its observation
            return {"error": f"{type(exc).__name__}: {exc}"}
        return {"value": value}

    def _lost(self, why: str, timed_out: bool = False) -> CellResult:
        self.close()
        return CellResult(
            error=f"{why}; the interpreter was restarted and its variables are lost",
            timed_out=timed_out,
            restarted=True,
        )

    def _send(self, msg: dict) -> None:
        self._proc.stdin.write((json.dumps(msg) + "\n").encode("utf-8"))
        self._proc.stdin.flush()

    def _read(self, deadline: float) -> dict | None:
        """The next protocol line, or None at the deadline, at end of file, on an over-long or bad line."""
        # the supervisor in the sandbox caps the interpreter's lines at 4 * max_chars + 64 KiB; its
        # re-encoding (compact JSON) stays well inside twice that
        fd, cap = self._proc.stdout.fileno(), 2 * (4 * self.max_chars + 65536)
        os.set_blocking(fd, False)
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while b"\n" not in self._buf:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or len(self._buf) > cap or not sel.select(remaining):
                    return None
                try:
                    data = os.read(fd, 65536)
                except BlockingIOError:
                    continue
                if not data:
                    return None
                self._buf += data
        line, self._buf = self._buf.split(b"\n", 1)
        try:
            msg = json.loads(line)
        except Exception:  # noqa: BLE001 - any decode error (ValueError, RecursionError, ...) is a lost session
            return None
        return msg if isinstance(msg, dict) else None

    def _status_report(self) -> str:
        os.set_blocking(self._status, False)
        try:
            return os.read(self._status, 65536).decode("utf-8", "replace").strip()
        except BlockingIOError:
            return ""
