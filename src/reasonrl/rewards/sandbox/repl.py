"""The persistent interpreter a :class:`~reasonrl.rewards.sandbox.session.SandboxSession` runs INSIDE the
sandbox (read as text and run by ``runner.py`` as the sandboxed program: standard library only, never
reasonrl).

Protocol with the host: one JSON object per line. The host sends ``{"op": "hello", "tools": [...],
"max_chars": N}`` and then ``{"op": "exec", "code": "..."}`` per cell; each cell is answered with
``{"op": "result", "stdout", "truncated", "value", "error", "final", "answer"}``. While a cell runs, a
call of a bound tool is sent as ``{"op": "tool", "name", "args", "kwargs"}`` and waits for
``{"value": ...}`` or ``{"error": "..."}`` (raised in the cell as ``ToolError``). Cells share one global
namespace, so variables survive from turn to turn.

Two processes (issue 41: a cell reached the host's protocol through ``final_answer.__globals__``). The
**supervisor**, this program's first process, alone holds the host's pipes. After the hello it forks
the **interpreter**, which runs the cells and talks to the supervisor over a pipe pair of its own; the
interpreter's fds 0 and 1 point at the host's /dev/null (fd 2) and every other descriptor is closed, so
neither the cells nor their child processes hold anything of the host's. The supervisor reads each
line of the interpreter with a cap, decodes it, checks its op and the type of every field
(:func:`checked`) and sends the host a re-encoded copy; a line it cannot take (too long, not UTF-8,
not JSON, nested too deep, a wrong type, an unknown op) kills the interpreter and ends the session,
which the host sees as lost. The supervisor is not dumpable: the interpreter runs as the same uid
but can neither ptrace it nor open its descriptors or memory through ``/proc``.

What a cell can still do (docs/sandbox.md): write well-formed messages on its own pipe, i.e. call a
bound tool (as it may anyway) or end its cell with a result of its choosing (what ``print`` and
``final_answer`` give it anyway), which can make its later cells' results arrive a turn late; kill the
supervisor or the interpreter (its session is lost). The host type-checks every line again.
"""

import ast
import contextlib
import io
import json
import os
import sys
import traceback

_IN = _OUT = None  # the interpreter's pipes to its supervisor
_FINAL = []  # the argument of final_answer, when called (kept even if the code swallows the raise)
PR_SET_DUMPABLE, SIGKILL = 4, 9


class ToolError(Exception):
    """A bound tool refused the call (its message is the tool's)."""


class FinalAnswer(BaseException):
    """Raised by final_answer to end the cell (BaseException: ``except Exception`` does not stop it)."""


def _send(msg):
    _OUT.write(json.dumps(msg) + "\n")
    _OUT.flush()


def _recv():
    line = _IN.readline()
    if not line:
        os._exit(0)  # the supervisor is gone
    return json.loads(line)


def final_answer(value):
    """End the episode with ``value`` as the answer."""
    _FINAL[:] = [value]
    raise FinalAnswer()


def _tool(name):
    def call(*args, **kwargs):
        _send({"op": "tool", "name": name, "args": list(args), "kwargs": kwargs})
        reply = _recv()
        if "error" in reply:
            raise ToolError(reply["error"])
        return reply.get("value")

    call.__name__ = name
    return call


def _run(code, env, max_chars):
    out, value, error = io.StringIO(), None, None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            tree = ast.parse(code, "<cell>", "exec")
            last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
            exec(compile(tree, "<cell>", "exec"), env)
            if last is not None:  # a notebook's habit: the value of a trailing expression is shown
                result = eval(compile(ast.Expression(last.value), "<cell>", "eval"), env)
                value = None if result is None else repr(result)[:max_chars]
        except FinalAnswer:
            pass
        except BaseException:  # noqa: B036, BLE001 - any failure of the model's code is the observation
            kind, exc, tb = sys.exc_info()
            # the cell's own frames only: the interpreter's (a tool's stub) are not the model's business
            frames = [f for f in traceback.extract_tb(tb) if f.filename == "<cell>"]
            head = "Traceback (most recent call last):\n" + "".join(traceback.format_list(frames)) if frames else ""
            error = (head + "".join(traceback.format_exception_only(kind, exc)))[-max_chars:]
    text = out.getvalue()
    return {
        "op": "result",
        "stdout": text[:max_chars],
        "truncated": len(text) > max_chars,
        "value": value,
        "error": error,
        "final": bool(_FINAL),
        "answer": repr(_FINAL[0]) if _FINAL and not isinstance(_FINAL[0], str) else (_FINAL[0] if _FINAL else None),
    }


def interpreter(hello, pipes):
    """The forked interpreter: nothing but fds 0-2 (the host's /dev/null) and its two pipes stays open."""
    global _IN, _OUT
    for name in os.listdir("/proc/self/fd"):
        if int(name) not in (0, 1, 2, *pipes):
            try:
                os.close(int(name))
            except OSError:
                pass  # the listing's own descriptor, already closed
    _IN = os.fdopen(pipes[0], "r", encoding="utf-8", newline="\n")
    _OUT = os.fdopen(pipes[1], "w", encoding="utf-8")
    max_chars = int(hello.get("max_chars", 4000))
    env = {"__name__": "__main__", "__builtins__": __builtins__, "final_answer": final_answer, "ToolError": ToolError}
    for name in hello.get("tools", []):
        env[name] = _tool(name)
    _send({"op": "ready"})
    while True:
        msg = _recv()
        _FINAL[:] = []
        _send(_run(msg.get("code", ""), env, max_chars))


# ---------------------------------------------------------------------------------------- the supervisor
def _fields_typed(msg, texts, flags):
    return all(msg.get(k) is None or isinstance(msg[k], str) for k in texts) and all(
        isinstance(msg.get(k, False), bool) for k in flags
    )


def checked(msg):
    """The interpreter's message as the host may read it (only the protocol's fields, each typed), or None."""
    if not isinstance(msg, dict):
        return None
    op = msg.get("op")
    if op == "ready":
        return {"op": "ready"}
    if op == "tool":
        name, args, kwargs = msg.get("name"), msg.get("args", []), msg.get("kwargs", {})
        if isinstance(name, str) and isinstance(args, list) and isinstance(kwargs, dict):
            return {"op": "tool", "name": name, "args": args, "kwargs": kwargs}  # JSON keys are strings
        return None
    if op == "result" and _fields_typed(msg, ("stdout", "value", "error", "answer"), ("final", "truncated")):
        return {
            "op": "result",
            **{k: msg.get(k) for k in ("stdout", "value", "error", "answer")},
            "final": msg.get("final", False),
            "truncated": msg.get("truncated", False),
        }
    return None


def _take(stream, cap):
    """The interpreter's next line, checked, or None (end of file, over ``cap`` bytes, undecodable)."""
    line = stream.readline(cap + 1)
    if not line.endswith(b"\n"):
        return None
    try:
        return checked(json.loads(line.decode("utf-8")))
    except Exception:  # noqa: BLE001 - ValueError, RecursionError, ...: any of them is a broken protocol
        return None


def _give(stream, data):
    try:
        stream.write(data)
        stream.flush()
        return True
    except OSError:  # the other side is gone
        return False


def _encode(msg):
    try:
        return (json.dumps(msg, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")
    except (ValueError, UnicodeEncodeError):  # e.g. a lone surrogate
        return None


def supervise(pid, host, child, cap):
    """Relay: the host's lines to the interpreter as they are (trusted), the interpreter's lines to the
    host only once checked and re-encoded; anything else ends the session (the interpreter killed)."""
    host_in, host_out = host
    child_in, child_out = child

    def end():
        os.kill(pid, SIGKILL)  # not reaped yet: the pid cannot have been reused
        os._exit(0)

    def relay(expected):
        msg = _take(child_out, cap)
        data = _encode(msg) if msg is not None and msg["op"] in expected else None
        if data is None or not _give(host_out, data):
            end()
        return msg["op"]

    relay(("ready",))
    while True:
        line = host_in.readline()  # the next cell
        if not line or not _give(child_in, line):
            end()
        while relay(("tool", "result")) == "tool":
            reply = host_in.readline()  # the tool's value or error
            if not reply or not _give(child_in, reply):
                end()


def main():
    import ctypes  # already loaded by the sandbox runner: free here

    host = (os.fdopen(os.dup(0), "rb"), os.fdopen(os.dup(1), "wb"))
    os.dup2(2, 0)  # the code's own stdin/stdout (and its children's) are the host's /dev/null
    os.dup2(2, 1)
    hello = json.loads(host[0].readline())
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0)")
    to_child, from_child = os.pipe(), os.pipe()
    pid = os.fork()
    if pid == 0:
        interpreter(hello, (to_child[0], from_child[1]))  # never returns
    os.close(to_child[0])
    os.close(from_child[1])
    child = (os.fdopen(to_child[1], "wb"), os.fdopen(from_child[0], "rb"))
    supervise(pid, host, child, 4 * int(hello.get("max_chars", 4000)) + 65536)


if __name__ == "__main__":  # run by the sandbox runner as its program; importing it does nothing
    main()
