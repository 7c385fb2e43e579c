"""The hostile corpus of issue 41 (sessions): a CodeAct cell attacking the session's line protocol, a
protocol line the host cannot decode or whose fields have the wrong types, a detached grandchild at the
weak levels when the session closes, a sandbox that fails to start, and a uid pool that never frees up.
None of them may raise out of ``CodeActEnv.step`` or leave a process behind."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
import time
import warnings
from pathlib import Path

import pytest

from reasonrl.envs import CodeActEnv
from reasonrl.rewards.sandbox import SandboxError, SandboxWarning
from reasonrl.rewards.sandbox import session as session_module
from reasonrl.rewards.sandbox.levels import UidSlots
from reasonrl.rewards.sandbox.session import SandboxSession
from harness import detached_grandchild, procs_matching

# every descriptor of the cell's process gets the line: whichever of them leads to the protocol
TO_EVERY_FD = (
    "import os\nfor name in os.listdir('/proc/self/fd'):\n    try:\n"
    "        os.write(int(name), {line!r})\n    except OSError:\n        pass\n"
)
NESTED = b"[" * 50_000 + b"\n"  # under the host's line cap (4 * max_chars + 64 KiB), past json's recursion limit


def fence(code: str) -> str:
    return f"```python\n{code}\n```"


@pytest.fixture
def env():
    e = CodeActEnv({"add": lambda a, b: a + b}, turn_timeout=2.0)
    e.reset("q")
    yield e
    e.close()


@pytest.mark.parametrize(
    "line",
    [
        NESTED,  # RecursionError in the host's json.loads (it caught ValueError only)
        b'{"op": "result", "error": 123, "stdout": "x"}\n',  # AttributeError in render_cell (error.rstrip)
        b'{"op": "result", "stdout": ["x"], "final": true, "answer": 7}\n',
        b'{"op": "tool", "name": "add", "args": {"a": 1}}\n',  # desynchronised the next cell's result
    ],
)
def test_a_cell_writing_protocol_lines_to_every_descriptor_does_not_crash_the_step(env, line):
    obs, done, answer = env.step(fence(TO_EVERY_FD.format(line=line) + "import time\ntime.sleep(0.2)\nprint('ran')"))
    assert isinstance(obs, str) and not done and answer is None
    assert env.step(fence("print(add(2, 3))"))[0] == "5"  # the episode goes on (in a fresh interpreter if lost)


def test_the_protocol_globals_reached_through_final_answer_crash_nothing(env):
    """Before: final_answer.__globals__ held _OUT and _send, the host's own protocol stream."""
    cell = (
        "g = final_answer.__globals__\nfor name in ('_OUT', '_send'):\n    obj = g.get(name)\n"
        "    if hasattr(obj, 'write'):\n        obj.write('[' * 50000 + '\\n'); obj.flush()\n"
        "    elif callable(obj):\n        obj({'op': 'result', 'error': 123})\nprint('ran')"
    )
    obs, done, _ = env.step(fence(cell))
    assert isinstance(obs, str) and not done
    assert env.step(fence("print(add(1, 1))"))[0] == "2"


def test_the_hosts_protocol_pipes_are_not_in_the_cells_process(env):
    """The host's pipes to the session (its stdin and stdout) must not be among the cell's descriptors:
    the cell talks to a supervisor in the sandbox, which alone writes to the host."""
    env.step(fence("1"))
    proc = env._session._proc
    host = {f"pipe:[{os.fstat(f.fileno()).st_ino}]" for f in (proc.stdin, proc.stdout)}
    cell = (
        "import os\nout = []\nfor n in os.listdir('/proc/self/fd'):\n    try:\n"
        "        out.append(os.readlink('/proc/self/fd/' + n))\n    except OSError:\n        pass\nprint(out)"
    )
    obs, _, _ = env.step(fence(cell))
    seen = set(eval(obs))  # noqa: S307 - the cell printed a list of strings
    assert any(s.startswith("pipe:[") for s in seen)  # it does hold a pipe: the one to its supervisor
    assert not host & seen, f"the cell can reach the host's protocol pipes {host & seen}"


FAKE_REPL = """import sys
sys.stdin.buffer.readline()
sys.stdout.buffer.write(b'{"op": "ready"}\\n'); sys.stdout.buffer.flush()
sys.stdin.buffer.readline()
sys.stdout.buffer.write(%r); sys.stdout.buffer.flush()
import time
time.sleep(30)
"""


@pytest.mark.parametrize(
    "line",
    [
        NESTED,
        b'{"op": "result", "error": 123}\n',
        b'{"op": "result", "stdout": "x", "value": ["not", "a", "string"]}\n',
        b'{"op": "result", "final": "yes", "answer": "4"}\n',
        b'{"op": "result", "answer": {"a": 1}, "final": true}\n',
    ],
)
def test_the_host_takes_any_undecodable_or_mistyped_line_as_a_lost_session(monkeypatch, line):
    """The in-sandbox side replaced by a program that answers a cell with ``line``: the host's own checks."""
    monkeypatch.setattr(session_module, "REPL", FAKE_REPL % line)
    with SandboxSession({"add": lambda a, b: a + b}, turn_timeout=2.0) as s:
        res = s.run("1")
    assert res.restarted and "restarted" in res.error and res.final is False


@pytest.mark.parametrize("level", ["auto", "rlimits"])
def test_close_sweeps_a_detached_grandchild(level):
    """Issue 41 item 5: close() used to SIGKILL the process group before the runner could sweep, so at
    rlimits/uid a setsid grandchild (its own process group) lived on. ``rlimits`` is forced on purpose."""
    marker_dir = Path(tempfile.mkdtemp(prefix="reasonrl-sbx-marker-", dir="/tmp"))
    os.chmod(marker_dir, 0o777)
    marker, sleep = marker_dir / "alive", 1.0
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SandboxWarning)
            s = SandboxSession(level=level, turn_timeout=5.0)
        t0 = time.monotonic()
        assert s.run(detached_grandchild(marker, sleep, wait=True)).stdout == "parent done\n"
        workdir = s._tmp  # the runner's command line names it, and so do its forked descendants
        s.close()
        closed = time.time()
        assert procs_matching(uid=None, text=workdir) == [], (
            f"processes of the session survived close() at level {s.level}"
        )
        time.sleep(max(0.0, t0 + sleep + 0.3 - time.monotonic()))  # past the time it would have written
        written = float(marker.read_text()) if marker.exists() else None
        assert written is None or written <= closed, f"a detached grandchild outlived close() at level {s.level}"
    finally:
        shutil.rmtree(marker_dir)


def test_a_sandbox_that_fails_to_start_is_an_error_observation(env, monkeypatch):
    env.close()

    def refuse(*args, **kwargs):
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(subprocess, "Popen", refuse)
    obs, done, answer = env.step(fence("print(1)"))
    assert (done, answer) == (False, None)
    assert obs.startswith("Error: the sandbox could not start") and "Too many open files" in obs
    assert env.metrics()["codeact/sandbox_errors"] == 1.0
    monkeypatch.undo()
    assert env.step(fence("print(1)"))[0] == "1"  # the next turn starts it again


def test_uid_slots_wait_at_most_their_timeout():
    slots = UidSlots(slots=1, wait=0.2)
    held = slots.acquire()
    outcome = []

    def second():
        try:
            outcome.append(slots.acquire())
        except SandboxError as exc:
            outcome.append(exc)

    waiter = threading.Thread(target=second, daemon=True)
    waiter.start()
    waiter.join(30)  # far past the 0.2 s: a waiter that never gives up fails here instead of hanging the suite
    assert len(outcome) == 1 and isinstance(outcome[0], SandboxError)
    assert "no free sandbox uid" in str(outcome[0]) and "0.2 s" in str(outcome[0])
    slots.release(held)
    assert slots.acquire() == held


def test_the_supervisor_forwards_only_the_protocols_typed_fields():
    """repl.checked, the supervisor's filter (hand examples: extra keys dropped, each bad type refused)."""
    from reasonrl.rewards.sandbox.repl import checked

    assert checked({"op": "result", "stdout": "x", "final": True, "answer": "4", "extra": 1}) == {
        "op": "result",
        "stdout": "x",
        "value": None,
        "error": None,
        "answer": "4",
        "final": True,
        "truncated": False,
    }
    assert checked({"op": "tool", "name": "add", "args": [1, 2], "secret": 1}) == {
        "op": "tool",
        "name": "add",
        "args": [1, 2],
        "kwargs": {},
    }
    for bad in (
        {"op": "result", "error": 123},
        {"op": "result", "final": "yes"},
        {"op": "result", "value": [1]},
        {"op": "tool", "name": 5},
        {"op": "tool", "name": "add", "args": {"a": 1}},
        {"op": "tool", "name": "add", "kwargs": [1]},
        {"op": "exec", "code": "1"},
        {"op": 1},
        [1],
    ):
        assert checked(bad) is None, bad
