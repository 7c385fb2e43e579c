"""Program generator and sandboxed line tracer for the ``code`` task (CodeThinker, arXiv 2605.17958).

**Tracer.** The true output and trace of a program come from running it under ``sys.settrace``
*inside the sandbox* (:func:`reasonrl.rewards.sandbox.run_python`): :data:`TRACER` is a bootstrap
that reads a JSON list of ``{"code", "input"}`` jobs on stdin, executes each program text with
``input`` as its stdin, and prints one JSON list of results after :data:`MARK`. A result is
``{"output": printed text, "steps": [[line, [[var, value], ...]], ...], "error": str | None}``.

One step per executed line, in the order the lines finish, with the variables the line wrote:

* the names the statement stores to (assignment and ``for`` targets, walrus, ``with ... as``),
  found statically with ``ast`` -- so ``b=b+0`` still records ``b``;
* plus every variable whose value changed (``l.append(3)`` records ``l``), sorted by name;
* a ``for`` header records its target only when the next line is in its body (the final check
  that ends the loop records nothing);
* only *simple* values are recorded [inferred]: ``None``, bools, ints, floats, strings of at most
  :data:`MAX_STR` characters and flat lists/tuples of at most :data:`MAX_LIST` such items, whose
  ``repr`` is at most :data:`MAX_REPR` characters; names starting with ``__`` are skipped.

Values are ``repr`` strings. A program past :data:`MAX_EVENTS` line events is stopped with an error.
Tracing is batched (one sandbox call per list of programs; a sandbox failure of a batch is bisected
to name the program that caused it) and cached per ``(code, input)``. Inside a batch every program runs
in its own fork of the warmed-up tracer (:mod:`reasonrl.rewards.sandbox.jobs`), so no program can change
another's result by patching builtins, classes, modules or random state (issue 41); a program that ends
its process (``os._exit``, a crash) fails alone, and its result, which it controls, is type-checked.
"""

from __future__ import annotations

import ast
import functools
import json
import random
from collections import OrderedDict
from typing import Any, Callable, Sequence

from ..rewards.sandbox.pool import batch_program

MAX_EVENTS, MAX_STR, MAX_LIST, MAX_REPR = 2000, 20, 8, 40
MARK = "@@REASONRL-TRACE@@"
CONSTRUCTS = ("arith", "if", "loop", "list", "str")

TRACER_BODY = r'''
import ast, io, json, sys
MAX_EVENTS, MAX_STR, MAX_LIST, MAX_REPR, MARK = %d, %d, %d, %d, %r
ATOMS = (type(None), bool, int, float, str)

class TraceLimit(BaseException):
    pass

def simple(v, top=True):
    if isinstance(v, ATOMS):
        return not isinstance(v, str) or len(v) <= MAX_STR
    return top and type(v) in (list, tuple) and len(v) <= MAX_LIST and all(simple(x, False) for x in v)

def snapshot(frame):
    out = {}
    for k, v in list(frame.f_locals.items()):
        if not k.startswith("__") and simple(v):
            r = repr(v)
            if len(r) <= MAX_REPR:
                out[k] = r
    return out

def static_targets(tree):
    targets, loops = {}, {}
    for st in ast.walk(tree):
        if not isinstance(st, ast.stmt):
            continue
        if isinstance(st, (ast.For, ast.AsyncFor)):
            parts = [st.target]
            loops[st.lineno] = (st.body[0].lineno, max(s.end_lineno for s in st.body))
        elif isinstance(st, (ast.With, ast.AsyncWith)):
            parts = [it.optional_vars for it in st.items if it.optional_vars is not None]
        elif isinstance(st, (ast.If, ast.While)):
            parts = [st.test]
        elif isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Try)):
            parts = []
        else:
            parts = [st]
        names = targets.setdefault(st.lineno, [])
        for p in parts:
            for n in ast.walk(p):
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and n.id not in names:
                    names.append(n.id)
    return targets, loops

class Tracer:
    def __init__(self, targets, loops):
        self.targets, self.loops, self.steps, self.frames, self.events = targets, loops, [], {}, 0

    def __call__(self, frame, event, arg):
        if frame.f_code.co_filename != "<prog>":
            return None
        self.events += 1
        if self.events > MAX_EVENTS:
            raise TraceLimit("more than %%d line events" %% MAX_EVENTS)
        if event == "call":
            self.frames[id(frame)] = [None, snapshot(frame)]
        elif event == "line":
            self.close(frame, frame.f_lineno)
        elif event == "return":
            self.close(frame, None)
            self.frames.pop(id(frame), None)
        return self

    def close(self, frame, next_line):
        state = self.frames.setdefault(id(frame), [None, {}])
        line, before = state
        now = snapshot(frame)
        if line is not None:
            names = self.targets.get(line, [])
            span = self.loops.get(line)
            if span is not None and (next_line is None or not span[0] <= next_line <= span[1]):
                names = []
            names = [n for n in names if n in now]
            names += sorted(n for n in now if n not in names and before.get(n) != now[n])
            self.steps.append([line, [[n, now[n]] for n in names]])
        state[0], state[1] = next_line, now

def prepare(job):
    """Before the fork (the program's text is only parsed and compiled, never run)."""
    code = job["code"]
    try:
        tree = ast.parse(code)
        compiled = compile(code, "<prog>", "exec")
    except SyntaxError as err:
        return Done({"output": "", "steps": [], "error": "SyntaxError: %%s" %% err})
    return compiled, static_targets(tree), job.get("input", "")

def run_one(prepared):
    compiled, targets, stdin = prepared
    tracer, out, error = Tracer(*targets), io.StringIO(), None
    saved = sys.stdin, sys.stdout
    sys.stdin, sys.stdout = io.StringIO(stdin), out
    sys.settrace(tracer)
    try:
        exec(compiled, {"__name__": "__main__"})
    except SystemExit as err:
        error = None if err.code in (None, 0) else "SystemExit: %%s" %% err.code
    except BaseException as err:
        error = "%%s: %%s" %% (type(err).__name__, err)
    finally:
        sys.settrace(None)
        sys.stdin, sys.stdout = saved
    return {"output": out.getvalue(), "steps": tracer.steps, "error": error}

def failed(job, why):
    return {"output": "", "steps": [], "error": why}

jobs = json.loads(sys.stdin.read())
send(MARK, each_fresh(jobs, run_one, failed, prepare=prepare))
''' % (MAX_EVENTS, MAX_STR, MAX_LIST, MAX_REPR, MARK)
TRACER = batch_program(TRACER_BODY)  # one fresh fork of the warmed-up tracer per program (issue 41)

Runner = Callable[..., Any]  # run_python's signature: (code, *, stdin, timeout, memory_mb) -> result
_CACHE: OrderedDict = OrderedDict()
_CACHE_SIZE = 200_000


def _sandbox_runner(require: str | None = None) -> Runner:
    """run_python at the run's minimum level (``sandbox.require``, issue 41) or ``require``."""
    from ..rewards.sandbox import required_level, run_python  # the sandbox is the only place a program runs

    return functools.partial(run_python, require=require or required_level())


def _step_ok(step: Any) -> bool:
    return (
        isinstance(step, list)
        and len(step) == 2
        and type(step[0]) is int
        and isinstance(step[1], list)
        and all(isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) for x in p) for p in step[1])
    )


def _checked(result: Any) -> dict:
    """A program's result as the trainer may use it: each program runs in its own fork and so decides its
    own result (issue 41), which is therefore type-checked like any untrusted input."""
    if (
        isinstance(result, dict)
        and isinstance(result.get("output"), str)
        and isinstance(result.get("steps"), list)
        and (result.get("error") is None or isinstance(result["error"], str))
        and all(map(_step_ok, result["steps"]))
    ):
        return {"output": result["output"], "steps": result["steps"], "error": result["error"]}
    return {"output": "", "steps": [], "error": "the program sent back a malformed result"}


def _parse_batch(res: Any, n: int) -> list[dict]:
    at = res.stdout.rfind(MARK)
    if at < 0:
        raise RuntimeError(f"the tracer printed no result (status ok); stderr: {res.stderr[-500:]!r}")
    results = json.loads(res.stdout[at + len(MARK) :])
    if not isinstance(results, list) or len(results) != n:
        got = len(results) if isinstance(results, list) else type(results).__name__
        raise RuntimeError(f"the tracer returned {got} results for {n} programs")
    return [_checked(r) for r in results]


def _trace_batch(jobs: list[dict], runner: Runner, timeout: float, memory_mb: int) -> list[dict]:
    res = runner(TRACER, stdin=json.dumps(jobs), timeout=timeout, memory_mb=memory_mb)
    truncated = bool(getattr(res, "stdout_truncated", False))  # the sandbox caps the output it keeps
    if res.status == "ok" and not truncated:
        return _parse_batch(res, len(jobs))
    if len(jobs) > 1:  # bisect so the failure is pinned on the program that caused it
        half = len(jobs) // 2
        return [r for part in (jobs[:half], jobs[half:]) for r in _trace_batch(part, runner, timeout, memory_mb)]
    if res.status == "ok":
        return [{"output": "", "steps": [], "error": "the trace is longer than the sandbox's output cap"}]
    why = f"sandbox status {res.status!r} (returncode {res.returncode}): {res.stderr[-300:]}"
    return [{"output": "", "steps": [], "error": why, "transient": res.status in ("timeout", "killed")}]


def trace_programs(
    programs: Sequence[tuple[str, str]],
    *,
    batch: int = 64,
    timeout: float = 5.0,
    memory_mb: int = 256,
    runner: Runner | None = None,
    cache: bool = True,
    require: str | None = None,
) -> list[dict]:
    """Trace ``(code, stdin)`` pairs in the sandbox, ``batch`` programs per call, cached per pair, at
    least at level ``require`` (None: the run's ``sandbox.require``; :mod:`reasonrl.rewards.sandbox.policy`).

    Returns one result per pair (see the module docstring). A program that fails has ``error``
    set; the caller decides whether that is fatal. A sandbox timeout or kill is returned but not
    cached: it depends on the machine's load, unlike the trace itself. ``cache=False`` runs every
    pair afresh and stores nothing (a determinism check compares two such runs)."""
    fresh: dict[tuple[str, str], dict] = {}
    todo = list(dict.fromkeys(p for p in programs if not cache or p not in _CACHE))
    runner = (runner or _sandbox_runner(require)) if todo else None
    for start in range(0, len(todo), batch):
        chunk = todo[start : start + batch]
        results = _trace_batch([{"code": c, "input": i} for c, i in chunk], runner, timeout, memory_mb)
        for key, result in zip(chunk, results):
            fresh[key] = result
            if not result.pop("transient", False) and cache:
                _CACHE[key] = result
                if len(_CACHE) > _CACHE_SIZE:
                    _CACHE.popitem(last=False)
    out = []
    for p in programs:
        if p in fresh:
            out.append(fresh[p])
            continue
        _CACHE.move_to_end(p)
        out.append(_CACHE[p])
    return out


def flat_trace(steps: Sequence) -> list[list]:
    """The ``[line, var, value]`` records of a tracer result, in execution order."""
    return [[line, var, value] for line, pairs in steps for var, value in pairs]


def _compact(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ",".join(map(_compact, value)) + "]"
    if isinstance(value, tuple):
        return "(" + ",".join(map(_compact, value)) + (",)" if len(value) == 1 else ")")
    return repr(value)


def compact_value(text: str) -> str:
    """A literal written without spaces after commas (``[1,2]``); other text unchanged. Parses back
    to the same :func:`canon_value`."""
    if len(text) > 300:  # canon_value compares long texts raw, so they must stay as printed
        return text
    try:
        return _compact(ast.literal_eval(text.strip()))
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text  # not a literal (printed words): shown as printed


# ---------------------------------------------------------------- generator

_INT_VARS = "abcdefgh"  # i is the loop variable, l the list, s the string


class _State:
    def __init__(self):
        self.ints: list[str] = []
        self.lst_len = 0  # 0: no list yet
        self.str_len = 0
        self.last: str | None = None

    def new_int(self) -> str:
        name = _INT_VARS[len(self.ints)]
        self.ints.append(name)
        return name


def _operand(rng: random.Random, st: _State, cfg: Any, op: str) -> str:
    if op == "*":  # small multipliers keep values at a few digits
        return str(rng.randint(2, max(2, min(3, cfg.max_int))))
    return rng.choice(st.ints) if st.ints and rng.random() < 0.4 else str(rng.randint(1, cfg.max_int))


def _expr(rng: random.Random, st: _State, cfg: Any) -> str:
    op = rng.choice(cfg.ops)
    return f"{rng.choice(st.ints)}{op}{_operand(rng, st, cfg, op)}"


def _arith(rng: random.Random, st: _State, cfg: Any) -> list[str]:
    if not st.ints or rng.random() < 0.15:
        value = str(rng.randint(0, cfg.max_int)) if not st.ints or rng.random() < 0.5 else _expr(rng, st, cfg)
        target = st.new_int() if len(st.ints) < len(_INT_VARS) else rng.choice(st.ints)
        st.last = target
        return [f"{target}={value}"]
    value = _expr(rng, st, cfg)
    fresh = len(st.ints) < len(_INT_VARS) and rng.random() < 0.7
    st.last = st.new_int() if fresh else rng.choice(st.ints)
    return [f"{st.last}={value}"]


def _loop(rng: random.Random, st: _State, cfg: Any) -> list[str]:
    lines = [] if st.ints else _arith(rng, st, cfg)
    acc = rng.choice(st.ints)
    op = rng.choice(cfg.ops)
    step = "i" if op != "*" and rng.random() < 0.6 else _operand(rng, st, cfg, op)
    st.last = acc
    return lines + [f"for i in range({rng.randint(1, cfg.max_iters)}):", f" {acc}={acc}{op}{step}"]


def _if(rng: random.Random, st: _State, cfg: Any) -> list[str]:
    lines = [] if st.ints else _arith(rng, st, cfg)
    cond = f"{rng.choice(st.ints)}{rng.choice(['<', '>', '=='])}{rng.randint(0, cfg.max_int)}"
    target = rng.choice(st.ints)
    st.last = target
    lines += [f"if {cond}:", f" {target}={_expr(rng, st, cfg)}"]
    if rng.random() < 0.5:
        lines += ["else:", f" {target}={_expr(rng, st, cfg)}"]
    return lines


def _list(rng: random.Random, st: _State, cfg: Any) -> list[str]:
    if not st.lst_len:
        st.lst_len, st.last = rng.randint(2, 3), "l"
        return [f"l=[{','.join(str(rng.randint(0, cfg.max_int)) for _ in range(st.lst_len))}]"]
    kind = rng.choice(["append", "index", "sum", "len", "set"] if st.lst_len < 5 else ["index", "sum", "set"])
    item = rng.choice(st.ints) if st.ints and rng.random() < 0.5 else str(rng.randint(0, cfg.max_int))
    if kind in ("append", "set"):
        st.last = "l"
        st.lst_len += kind == "append"
        return [f"l.append({item})" if kind == "append" else f"l[{rng.randrange(st.lst_len)}]={item}"]
    value = {"index": f"l[{rng.randrange(st.lst_len)}]", "sum": "sum(l)", "len": "len(l)"}[kind]
    st.last = st.new_int() if len(st.ints) < len(_INT_VARS) else rng.choice(st.ints)
    return [f"{st.last}={value}"]


def _str(rng: random.Random, st: _State, cfg: Any) -> list[str]:
    if not st.str_len:
        st.str_len, st.last = 2, "s"
        return [f"s='{''.join(rng.choice('xyz') for _ in range(2))}'"]
    kind = rng.choice(["add", "mul", "len"] if st.str_len <= 4 else ["len"])
    if kind == "len":
        st.last = st.new_int() if len(st.ints) < len(_INT_VARS) else rng.choice(st.ints)
        return [f"{st.last}=len(s)"]
    st.last = "s"
    if kind == "mul":
        st.str_len *= 2
        return ["s=s*2"]
    st.str_len += 1
    return [f"s=s+'{rng.choice('xyz')}'"]


_MAKERS = {"arith": _arith, "if": _if, "loop": _loop, "list": _list, "str": _str}


def sample_program(rng: random.Random, cfg: Any) -> tuple[str, str]:
    """A random program and its stdin under the options of ``cfg`` (a CodeConfig): an optional
    ``a=int(input())`` line, ``min_statements..max_statements`` statements of the allowed
    ``constructs``, and a final ``print``."""
    st, lines, stdin = _State(), [], ""
    if rng.random() < cfg.input_prob:
        lines.append(f"{st.new_int()}=int(input())")
        stdin, st.last = str(rng.randint(0, cfg.max_int)), "a"
    for _ in range(rng.randint(cfg.min_statements, cfg.max_statements)):
        lines += _MAKERS[rng.choice(cfg.construct_list)](rng, st, cfg)
    shown = st.last
    if shown in st.ints and rng.random() < cfg.print_op_prob:
        shown = f"{shown}{rng.choice('+-')}{rng.randint(1, cfg.max_int)}"
    lines.append(f"print({shown})")
    return "\n".join(lines) + "\n", stdin
