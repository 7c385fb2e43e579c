"""The persistent interpreter a :class:`~reasonrl.rewards.sandbox.session.SandboxSession` runs INSIDE the
sandbox (read as text and run by ``runner.py`` as the sandboxed program: standard library only, never
reasonrl).

Protocol: one JSON object per line. The host sends ``{"op": "hello", "tools": [...], "max_chars": N}``
and then ``{"op": "exec", "code": "..."}`` per cell; the interpreter answers each cell with
``{"op": "result", "stdout", "value", "error", "final", "answer"}``. While a cell runs, a call of a
bound tool is sent as ``{"op": "tool", "name", "args", "kwargs"}`` and waits for ``{"value": ...}``
or ``{"error": "..."}`` (raised in the cell as ``ToolError``). Cells share one global namespace, so
variables survive from turn to turn. The protocol runs on private copies of fds 0 and 1; fds 0 and 1
themselves point at the host's /dev/null (fd 2), so what the code or its child processes write
outside ``print`` never reaches the protocol.
"""
import ast
import contextlib
import io
import json
import os
import sys
import traceback

_IN = _OUT = None  # the protocol's streams (main)
_FINAL = []  # the argument of final_answer, when called (kept even if the code swallows the raise)


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
        os._exit(0)  # the host is gone
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
        except BaseException:  # noqa: B036 - any failure of the model's code is the observation
            kind, exc, tb = sys.exc_info()
            # the cell's own frames only: the interpreter's (a tool's stub) are not the model's business
            frames = [f for f in traceback.extract_tb(tb) if f.filename == "<cell>"]
            head = "Traceback (most recent call last):\n" + "".join(traceback.format_list(frames)) if frames else ""
            error = (head + "".join(traceback.format_exception_only(kind, exc)))[-max_chars:]
    text = out.getvalue()
    return {"op": "result", "stdout": text[:max_chars], "truncated": len(text) > max_chars, "value": value,
            "error": error, "final": bool(_FINAL), "answer": repr(_FINAL[0]) if _FINAL and not isinstance(
                _FINAL[0], str) else (_FINAL[0] if _FINAL else None)}


def main():
    global _IN, _OUT
    _IN = os.fdopen(os.dup(0), "r", encoding="utf-8", newline="\n")
    _OUT = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 0)  # the code's own stdin/stdout (and its children's) are the host's /dev/null
    os.dup2(2, 1)
    hello = _recv()
    max_chars = int(hello.get("max_chars", 4000))
    env = {"__name__": "__main__", "__builtins__": __builtins__, "final_answer": final_answer,
           "ToolError": ToolError}
    for name in hello.get("tools", []):
        env[name] = _tool(name)
    _send({"op": "ready"})
    while True:
        msg = _recv()
        _FINAL[:] = []
        _send(_run(msg.get("code", ""), env, max_chars))


if __name__ == "__main__":  # run by the sandbox runner as its program; importing it does nothing
    main()
