"""Built-in task ``code``: predict a program's printed output (CodeThinker, arXiv 2605.17958, spec 12).

The prompt is the program, its lines numbered ``<n>|`` (option ``numbered``: the steps cite line
numbers, which a small character model then copies instead of counting newlines [inferred]),
then one ``IN:<line>`` per line of its stdin. The item's key (which decides the split) is the
unnumbered program and its input. The demonstration is a
*consistency-tracing* chain of thought: one step per executed line that writes simple variables,
then the output. In the compact notation (``template="compact"``, default, for the tiny model)::

    1|a=int(input())            L1 a=4
    2|b=0                       L2 b=0
    3|for i in range(2):        L3 i=0
    4| b=b+a                    L4 b=b+a=0+4=4
    5|print(b)                  L3 i=1
    IN:4                        L4 b=b+a=4+4=8
                                O:8

(prompt left, completion right). One-line arithmetic assignments show their working, the
expression then its values (``L4 b=b+a=0+4=4``; option ``work``: ``"expr"``, ``"values"`` for
``b=0+4=4``, ``"none"``); the claim is the value after the last ``=``. ``template="paper"``
writes the paper's notation ``[STEP k] line L: var = value`` / ``[OUTPUT] value``. Both are parsed by
:mod:`reasonrl.rewards.consistency` into ``(line, var, value)`` assertions.

The true output and trace come from running the program under a line tracer *in the sandbox*
(:func:`reasonrl.tasks.codegen.trace_programs`, batched and cached); ``meta`` carries them as
``{"trace": [[line, var, value], ...], "output": text}`` for :class:`ConsistencyReward`.
``verify`` is 1.0 iff the predicted output equals the true one after
:func:`~reasonrl.rewards.consistency.normalize_output` (each line through ``repr(literal_eval)``
when it is a literal); ``extract_answer`` is that normalised prediction.

Generated programs (seeded; see :func:`reasonrl.tasks.codegen.sample_program`) are split by a hash
of the key. Items whose prompt or demo exceed ``max_prompt_chars``/``max_demo_chars`` are
skipped (the tiny model has 512 positions).

Options (:class:`CodeConfig`; the generator's grammar and every default are inferred -- the paper
trains on LeetCode-derived programs far beyond a 3.4M character model):
``min_statements=1``/``max_statements=2`` (a loop or an if counts as one), ``constructs=
"arith,if,loop"`` (any of ``arith, if, loop, list, str``), ``max_iters=3``, ``max_int=9``,
``ops="+-"`` (``*`` adds doubling/tripling), ``input_prob=0.5``, ``print_op_prob=0.0`` (else
``print(v+c)``, whose sum is not worked out), ``template="compact"`` (or ``"paper"``, never worked),
``numbered=True``, ``work="expr"``, ``max_prompt_chars=150``, ``max_demo_chars=150``, ``test_fraction=0.1``,
``data``/``test_data`` (JSONL, below), ``trace_batch=64`` programs per sandbox call (the
sandbox keeps 64 KB of output, a batch's JSON is ~25 KB; an over-long batch is bisected),
``trace_timeout=5.0`` s and ``trace_memory_mb=256`` per call.

**User data** (options ``data``, ``test_data``): JSONL rows with fields

* ``code`` (str, required): the program;
* ``input`` (str, optional, default ``""``): its stdin;
* ``demo`` (str, optional): a demonstration; its output must verify, else the row is rejected;
  without it one is rendered from the trace;
* ``output`` (str) and ``trace`` (list of ``[line, var, value]``, value a ``repr`` string such as
  ``"6"`` or ``"'ab'"``, or a JSON number/bool/list): optional, but both or neither. Given, they
  are used as is; otherwise every program is traced in the sandbox when the task is built;
* ``id`` (optional, any JSON value): kept in ``meta["id"]``. Any other field is an error.

Example row: ``{"code": "x = 2\\ny = x*3\\nprint(y+1)\\n", "input": ""}``.
"""

from __future__ import annotations

import ast
import copy
import math
import random
from dataclasses import dataclass
from typing import Any, Iterator

from ..rewards.consistency import branch_point, canon_value, consistency, first_inconsistent_step, normalize_output
from ..rewards.consistency import parse_steps, parse_trace
from .base import Item, check_split, epochs, in_test_split, make_config, split_user_items, user_splits
from .codegen import CONSTRUCTS, compact_value, flat_trace, sample_program, trace_programs
from .files import read_rows

TEMPLATES = ("compact", "paper")
WORK_MODES = ("expr", "values", "none")
ROW_FIELDS = ("code", "input", "demo", "output", "trace", "id")


@dataclass(frozen=True)
class CodeConfig:
    min_statements: int = 1
    max_statements: int = 2
    constructs: str = "arith,if,loop"  # comma-separated subset of CONSTRUCTS
    max_iters: int = 3  # loop iterations are 1..max_iters
    max_int: int = 9  # constants are 0..max_int
    ops: str = "+-"  # arithmetic operators, any of "+-*"; "*" only multiplies by 2..3
    input_prob: float = 0.5  # probability that the program starts with a=int(input())
    template: str = "compact"
    numbered: bool = True  # show line numbers in the prompt: the steps cite them
    work: str = "expr"  # compact demos' working: "expr" L2 b=a+a=5+5=10, "values" b=5+5=10, "none"
    print_op_prob: float = 0.0  # probability that print shows v+c / v-c rather than a variable
    max_prompt_chars: int = 150
    max_demo_chars: int = 150
    test_fraction: float = 0.1
    data: str | None = None
    test_data: str | None = None
    trace_batch: int = 64  # programs per sandbox call
    trace_timeout: float = 5.0  # seconds per sandbox call
    trace_memory_mb: int = 256

    def __post_init__(self):
        if not 1 <= self.min_statements <= self.max_statements:
            raise ValueError(
                f"need 1 <= min_statements <= max_statements, got {self.min_statements}, {self.max_statements}"
            )
        bad = sorted(set(self.construct_list) - set(CONSTRUCTS))
        if bad or not self.construct_list:
            raise ValueError(f"constructs {self.constructs!r}: unknown {bad}; valid: {list(CONSTRUCTS)}")
        if not self.ops or set(self.ops) - set("+-*"):
            raise ValueError(f"ops must be made of '+', '-', '*', got {self.ops!r}")
        if self.work not in WORK_MODES:
            raise ValueError(f"unknown work {self.work!r}; valid: {list(WORK_MODES)}")
        if self.template not in TEMPLATES:
            raise ValueError(f"unknown template {self.template!r}; valid: {list(TEMPLATES)}")
        for name in ("max_iters", "max_int", "max_prompt_chars", "max_demo_chars", "trace_batch", "trace_memory_mb"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("input_prob", "print_op_prob"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        if not 0.0 <= self.test_fraction < 1.0:
            raise ValueError(f"test_fraction must be in [0, 1), got {self.test_fraction}")
        if self.test_data is not None and self.data is None:
            raise ValueError("test_data needs data (the train rows)")

    @property
    def construct_list(self) -> tuple[str, ...]:
        return tuple(c.strip() for c in self.constructs.split(",") if c.strip())


_ARITH_OPS = (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod)


def _is_arith(e: ast.AST) -> bool:
    if isinstance(e, ast.BinOp):
        return isinstance(e.op, _ARITH_OPS) and _is_arith(e.left) and _is_arith(e.right)
    if isinstance(e, ast.UnaryOp):
        return isinstance(e.op, ast.USub) and _is_arith(e.operand)
    return isinstance(e, ast.Name) or (isinstance(e, ast.Constant) and type(e.value) is int)


def _module_statements(body: list) -> Iterator[ast.stmt]:
    """Statements outside functions and classes (their names would be another scope's)."""
    for st in body:
        yield st
        if not isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for field in ("body", "orelse", "finalbody"):
                yield from _module_statements(getattr(st, field, []))
            for handler in getattr(st, "handlers", []):
                yield from _module_statements(handler.body)


def worked_lines(code: str) -> tuple[dict[int, tuple[str, ast.expr]], set[int]]:
    """One-line module-level ``v = <arithmetic>`` (or ``v op= ...``) statements by line, whose value a
    demo works out (``b=5+5=10``), and the set of module-level lines. The code is parsed, never run."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return {}, set()
    out, module = {}, set()
    for st in _module_statements(tree.body):
        module.add(st.lineno)
        if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
            name, expr = st.targets[0].id, st.value
        elif isinstance(st, ast.AugAssign) and isinstance(st.target, ast.Name):
            name, expr = st.target.id, ast.BinOp(ast.Name(st.target.id, ast.Load()), st.op, st.value)
        else:
            continue
        if isinstance(expr, ast.BinOp) and _is_arith(expr) and st.lineno == st.end_lineno:
            out[st.lineno] = (name, expr)
    return out, module


def _work(expr: ast.expr, known: dict[str, str], echo: bool) -> str | None:
    """``expr`` with every name replaced by its known int value (``5+5``), after the expression
    itself when ``echo`` (``a+a=5+5``); None if a name's value is unknown or not an int."""
    values = {}
    for node in ast.walk(expr):
        if isinstance(node, ast.Name):
            try:
                value = ast.literal_eval(known[node.id]) if node.id in known else None
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                value = None  # a user trace's value that is not a literal: no working shown
            if type(value) is not int:
                return None
            values[node.id] = value

    class Substitute(ast.NodeTransformer):
        def visit_Name(self, node):
            return ast.Constant(values[node.id])

    worked = ast.unparse(Substitute().visit(copy.deepcopy(expr))).replace(" ", "")  # ints: no spaces inside
    return f"{ast.unparse(expr).replace(' ', '')}={worked}" if echo else worked


def _steps(trace: list, code: str | None, work: str = "none") -> list[tuple[int, list]]:
    """Consecutive records of one line form one step; values of worked lines get their working."""
    lines, module = worked_lines(code) if code is not None and work != "none" else ({}, set())
    steps: list[tuple[int, list]] = []
    known: dict[str, str] = {}
    for line, var, value in trace:
        if not steps or steps[-1][0] != line:
            steps.append((line, []))
        shown = compact_value(value)
        if line in lines and lines[line][0] == var:
            worked = _work(lines[line][1], known, work == "expr")
            shown = shown if worked is None else f"{worked}={shown}"
        steps[-1][1].append((var, value, shown))
        if line in module:
            known[var] = value
    return steps


def render_demo(
    trace: list, output: str, template: str = "compact", code: str | None = None, work: str = "expr"
) -> str:
    """The demonstration for a true trace. With ``code`` (compact template only) each one-line
    arithmetic assignment shows its working: ``work="expr"`` gives ``L2 b=a+a=5+5=10`` [inferred:
    copying the expression, then each name's value, then the sum makes every character a one-hop
    lookup for the tiny model, instead of a lookup-then-add]; ``"values"`` gives ``b=5+5=10``."""
    out_lines = output.rstrip("\n").split("\n")
    if template == "paper":
        body = [
            f"[STEP {k}] line {line}: " + ", ".join(f"{v} = {x}" for v, x, _ in pairs)
            for k, (line, pairs) in enumerate(_steps(trace, None), 1)
        ]
        return "\n".join(body + [f"[OUTPUT] {o}" for o in out_lines])
    steps = _steps(trace, code, work)
    body = [f"L{line} " + " ".join(f"{v}={shown}" for v, _, shown in pairs) for line, pairs in steps]
    return "\n".join(body + [f"O:{compact_value(o)}" for o in out_lines])


def make_prompt(code: str, stdin: str, numbered: bool = False) -> str:
    """The program (each line as ``<n>|<line>`` when ``numbered``), then ``IN:<line>`` per stdin line."""
    code = code if code.endswith("\n") else code + "\n"
    if numbered:
        code = "".join(f"{k}|{line}\n" for k, line in enumerate(code[:-1].split("\n"), 1))
    lines = stdin.rstrip("\n").split("\n") if stdin else []
    return code + "".join(f"IN:{line}\n" for line in lines)


def _check_trace(trace: Any, where: str) -> list[list]:
    if not isinstance(trace, list):
        raise ValueError(f"{where}: field 'trace' must be a list of [line, var, value], got {type(trace).__name__}")
    for k, rec in enumerate(trace):
        ok = isinstance(rec, list) and len(rec) == 3 and isinstance(rec[0], int) and isinstance(rec[1], str)
        if not ok:
            raise ValueError(f"{where}: field 'trace' record {k} must be [int line, str var, value], got {rec!r}")
    return [[line, var, canon_value(value)] for line, var, value in trace]


def _check_row(row: dict, where: str) -> dict:
    extra = sorted(set(row) - set(ROW_FIELDS))
    if extra:
        raise ValueError(f"{where}: unknown field(s) {extra}; valid: {list(ROW_FIELDS)}")
    if not isinstance(row.get("code"), str) or not row["code"].strip():
        raise ValueError(f"{where}: field 'code' must be a non-empty string")
    for name in ("input", "demo", "output"):
        if row.get(name) is not None and not isinstance(row[name], str):
            raise ValueError(f"{where}: field {name!r} must be a string, got {type(row[name]).__name__}")
    if ("output" in row) != ("trace" in row):
        raise ValueError(f"{where}: give both 'output' and 'trace' or neither (then the program is traced)")
    trace = _check_trace(row["trace"], where) if "trace" in row else None
    return {
        "code": row["code"],
        "input": row.get("input") or "",
        "demo": row.get("demo"),
        "output": row.get("output"),
        "trace": trace,
        "id": row.get("id"),
    }


class CodeTask:
    """Output prediction for small Python programs with a consistency-tracing chain of thought."""

    name = "code"
    untrusted_code = True  # its programs (a data file's, or the grammar's) run in the sandbox (sandbox.require)

    def __init__(self, **options: Any):
        self.config = make_config(CodeConfig, "code", options)
        self._rows = user_splits(self.config.data, self.config.test_data, self._load)

    def _trace(self, programs: list[tuple[str, str]]) -> list[dict]:
        c = self.config
        return trace_programs(programs, batch=c.trace_batch, timeout=c.trace_timeout, memory_mb=c.trace_memory_mb)

    def make_item(
        self, code: str, stdin: str, trace: list, output: str, demo: str | None = None, row_id: Any = None
    ) -> Item:
        answer = output.rstrip("\n")
        meta: dict[str, Any] = {"trace": trace, "output": answer}
        if row_id is not None:
            meta["id"] = row_id
        if demo is None:
            demo = render_demo(trace, output, self.config.template, code, self.config.work)
        prompt = make_prompt(code, stdin, self.config.numbered)
        return Item(key=make_prompt(code, stdin), prompt=prompt, answer=answer, meta=meta, demo=demo)

    def _load(self, path: str) -> list[Item]:
        rows = [_check_row(row, f"{path}: row {i}") for i, row in enumerate(read_rows(path))]
        if not rows:
            raise ValueError(f"{path}: no rows")
        traced = iter(self._trace([(r["code"], r["input"]) for r in rows if r["trace"] is None]))
        items = []
        for i, r in enumerate(rows):
            if r["trace"] is None:
                res = next(traced)
                if res["error"]:
                    raise ValueError(f"{path}: row {i}: the program failed in the sandbox: {res['error']}")
                r["trace"], r["output"] = flat_trace(res["steps"]), res["output"]
            item = self.make_item(r["code"], r["input"], r["trace"], r["output"], r["demo"], r["id"])
            if r["demo"] is not None and self.verify(item.demo, item.answer, item.meta) != 1.0:
                raise ValueError(
                    f"{path}: row {i}: the demo's output {parse_trace(item.demo)[1]!r} "
                    f"is not the program's output {item.answer!r}"
                )
            items.append(item)
        return items

    @property
    def max_new_tokens(self) -> int:
        """About 1.5x the longest demonstration (the ``max_demo_chars`` cap for generated items)."""
        if self._rows is None:
            return math.ceil(1.5 * self.config.max_demo_chars)
        demos = [it.demo or "" for rows in self._rows.values() if rows for it in rows]
        return math.ceil(1.5 * max(len(d) for d in demos)) + 1

    def split_items(self, split: str) -> list[Item]:
        check_split(split)
        if self._rows is None:
            raise ValueError("split_items needs user data (option data)")
        return split_user_items(
            "code", self._rows["train"], self._rows["test"], split, self.config.test_fraction, str(self.config.data)
        )

    def iter_items(self, split: str, seed: int) -> Iterator[Item]:
        check_split(split)
        if self._rows is not None:
            return self._iter_rows(split, seed)
        return self._iter_generated(split, seed)

    def _iter_rows(self, split: str, seed: int) -> Iterator[Item]:
        return epochs(self.split_items(split), random.Random(f"{seed}:{split}"))

    def _iter_generated(self, split: str, seed: int) -> Iterator[Item]:
        rng, want_test, c = random.Random(f"{seed}:{split}"), split == "test", self.config
        while True:
            pending, draws = [], 0
            while len(pending) < c.trace_batch:
                draws += 1
                if draws > 1000 * c.trace_batch:
                    raise ValueError(f"code: cannot draw {split} programs (test_fraction={c.test_fraction})")
                code, stdin = sample_program(rng, c)
                key = make_prompt(code, stdin)
                fits = len(make_prompt(code, stdin, c.numbered)) <= c.max_prompt_chars
                if fits and in_test_split(key, c.test_fraction) == want_test:
                    pending.append((code, stdin))
            for (code, stdin), res in zip(pending, self._trace(pending)):
                if res["error"]:
                    raise RuntimeError(f"generated program failed in the sandbox ({res['error']}):\n{code}")
                item = self.make_item(code, stdin, flat_trace(res["steps"]), res["output"])
                if len(item.demo) <= c.max_demo_chars:
                    yield item

    def verify(self, completion: str, answer: str, meta: dict[str, Any]) -> float:
        got = self.extract_answer(completion)
        return float(got is not None and got == normalize_output(answer))

    def extract_answer(self, completion: str) -> str | None:
        predicted = parse_trace(completion)[1]
        return None if predicted is None else normalize_output(predicted)

    def diagnostics(self, completions: list[str], metas: list[dict[str, Any]], scores: list[float]) -> dict[str, float]:
        """How faithful the greedy traces are (what CodeThinker's gate looks at).

        ``trace_consistency``: mean ``c``, the share of claimed ``(line, var, value)`` assertions that
        the true trace bears out in order (0 without claims); ``consistent_pass``: the output is right
        AND every claim holds (``c == 1``), i.e. a right answer reached by a faithful trace.
        """
        cs = [consistency(parse_trace(c)[0], m["trace"])[0] for c, m in zip(completions, metas)]
        n = max(len(cs), 1)
        return {
            "trace_consistency": sum(cs) / n,
            "consistent_pass": sum(s >= 1.0 and c == 1.0 for s, c in zip(scores, cs)) / n,
        }

    def branch_point(self, completion: str, meta: dict[str, Any], rng: random.Random) -> tuple[int, float]:
        """Dynamic beam sampling's cut (CodeThinker): before the first inconsistent step, or at a random step
        boundary; scored by the consistent steps it keeps."""
        bad = first_inconsistent_step(completion, meta["trace"])
        return branch_point(completion, meta["trace"], rng), float(len(parse_steps(completion)) if bad is None else bad)
