"""Built-in task ``azr``: AZR's six role/task prompts over the ``code`` grammar (spec envs-selfplay-eval.md 1).

The ``azr`` recipe draws its solver problems from its own buffers (:mod:`reasonrl.parts.azr`); this task
gives them a verifier, gives ``reasonrl pretrain --task azr`` demonstrations of all six prompts, and
gives evaluation held-out solver problems of the three types (the split is a salted hash of the prompt).

Prompts [inferred: compact markers for a character model, AZR's meaning]:

* solve **deduction** ``#O`` program ``IN:i`` -> a worked trace ending ``O:o`` (the ``code`` task's demo);
* solve **abduction** ``#I`` program ``OUT:o`` -> ``IN:i`` (any input the program maps to o passes: it is run);
* solve **induction** ``#F`` shown pairs ``i>o`` -> a program (passes when every held-out pair does);
* propose deduction / abduction ``#PO`` / ``#PI`` with K reference triplets -> a program and ``IN:i``;
* propose induction ``#PF`` with a program -> ``IN:i1,i2,...`` (the message of AZR's code_f is dropped).

Option ``roles`` (``all`` | ``solve``): which prompts the training stream holds (``solve``: GRPO on the
grammar's problems, the non-self-play baseline).
"""

from __future__ import annotations

import ast
import random
import re
from dataclasses import dataclass, replace
from typing import Any, Iterator, Sequence

from ..rewards.base import Reward, RewardResult
from ..rewards.consistency import normalize_output, parse_trace
from .azr_world import TYPES, run_programs, sample_triplet
from .base import Item, check_split, in_test_split, make_config
from .code import CodeConfig, make_prompt, render_demo
from .codegen import flat_trace, trace_programs

__all__ = [
    "AZRConfig",
    "AZRShaping",
    "AZRTask",
    "format_ok",
    "parse_inputs",
    "parse_proposal",
    "propose_prompt",
    "solve_item",
    "solve_prompt",
]

ROLES = ("all", "solve")
_IN = re.compile(r"^IN:(-?\d{1,6})$")
_INPUTS = re.compile(r"^IN:(-?\d{1,6}(?:,-?\d{1,6})*)$")
SOLVE_TAG = {"deduction": "#O\n", "abduction": "#I\n", "induction": "#F\n"}
PROPOSE_TAG = {"deduction": "#PO\n", "abduction": "#PI\n", "induction": "#PF\n"}


@dataclass(frozen=True)
class AZRConfig:
    refs: int = 2  # K reference triplets in a deduction/abduction proposal prompt (AZR: io_n 6; 512 positions here)
    shown: int = 3  # induction: pairs shown to the solver
    held: int = 3  # induction: pairs held out (all must pass: AZR's code_f reward ``binary``)
    max_statements: int = 2
    constructs: str = "arith,if,loop"
    max_int: int = 9
    roles: str = "all"
    max_prompt_chars: int = 220
    test_fraction: float = 0.1

    def __post_init__(self):
        if self.roles not in ROLES or min(self.refs, self.shown, self.held, self.max_statements, self.max_int) < 1:
            raise ValueError(f"azr: roles in {ROLES}; refs, shown, held, max_statements, max_int >= 1; got {self}")

    @property
    def grammar(self) -> CodeConfig:
        return CodeConfig(
            max_statements=self.max_statements, constructs=self.constructs, max_int=self.max_int, input_prob=1.0
        )


# ------------------------------------------------------------------------------------ prompts
def _refs(refs: Sequence[dict]) -> str:
    return "".join(f"{r['program']}IN:{r['input']}\nO:{r['output']}\n--\n" for r in refs)


def solve_prompt(kind: str, entry: dict) -> str:
    """The solver's prompt for a buffer entry (``program``, ``input``, ``output``; induction: ``pairs``)."""
    if kind == "deduction":
        return SOLVE_TAG[kind] + make_prompt(entry["program"], entry["input"], numbered=True)
    if kind == "abduction":
        return SOLVE_TAG[kind] + make_prompt(entry["program"], "", numbered=True) + f"OUT:{entry['output']}\n"
    return SOLVE_TAG[kind] + "".join(f"{i}>{o}\n" for i, o in entry["pairs"])


def propose_prompt(kind: str, refs: Sequence[dict]) -> str:
    """The proposer's prompt: K reference triplets (induction: one program to find inputs for)."""
    if kind == "induction":
        return PROPOSE_TAG[kind] + make_prompt(refs[0]["program"], "", numbered=True)
    return PROPOSE_TAG[kind] + _refs(refs)


def solve_item(kind: str, entry: dict, shown: int) -> Item:
    """A solver problem from a buffer entry; its meta is what :meth:`AZRTask.verify` grades against."""
    meta: dict[str, Any] = {"role": "solve", "type": kind, "program": entry["program"]}
    if kind == "induction":
        pairs = list(zip(entry["inputs"], entry["outputs"]))
        meta.update(pairs=pairs[:shown], held=pairs[shown:])
        answer = entry["program"]
        prompt = solve_prompt(kind, {"pairs": meta["pairs"]})
    else:
        meta.update(input=entry["input"], output=entry["output"])
        answer = entry["output"] if kind == "deduction" else entry["input"]
        prompt = solve_prompt(kind, entry)
    return Item(key=prompt, prompt=prompt, answer=answer, meta=meta)


# ------------------------------------------------------------------------------------ parsing
def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().split("\n") if ln.strip()]
    return lines[-1] if lines else ""


def parse_program(text: str) -> str | None:
    """An induction answer: the completion as a program, when it parses and prints (else None)."""
    code = text.strip("\n") + "\n"
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None
    prints = any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "print" for n in ast.walk(tree)
    )
    return code if prints else None


def parse_proposal(text: str) -> tuple[str, str] | None:
    """A deduction/abduction proposal: (program, input) from ``program lines`` then ``IN:i``, or None."""
    lines = text.strip("\n").split("\n")
    match = _IN.match(lines[-1].strip()) if lines else None
    body = "\n".join(lines[:-1]).strip("\n")
    return (body + "\n", match.group(1)) if match and body else None


def parse_inputs(text: str) -> list[str] | None:
    """An induction proposal: the inputs of ``IN:i1,i2,...``, or None."""
    match = _INPUTS.match(_last_line(text))
    return match.group(1).split(",") if match else None


def format_ok(role: str, kind: str, text: str) -> bool:
    """Whether a completion has the shape its prompt asks for (AZR's format check, per prompt)."""
    if role == "propose":
        return (parse_inputs(text) if kind == "induction" else parse_proposal(text)) is not None
    if kind == "deduction":
        return parse_trace(text)[1] is not None
    if kind == "abduction":
        return _IN.match(_last_line(text)) is not None
    return parse_program(text) is not None


@dataclass(frozen=True)
class AZRShaping(Reward):
    """AZR's format shaping of the solver's reward as a term added to the 0/1 verifier: 0 when right,
    ``wrong`` (-0.5) when the format is right but the answer wrong, ``bad_format`` (-1) when the format
    is wrong, so the total is AZR's 1 / -0.5 / -1. Reads the ``meta`` and ``correct`` columns."""

    wrong: float = -0.5
    bad_format: float = -1.0
    name: str = "azr_format"

    def score(self, prompts, completions, **columns) -> RewardResult:
        metas, correct = columns["meta"], columns["correct"]
        ok = [format_ok(m.get("role", "solve"), m["type"], c) for c, m in zip(completions, metas)]
        values = [0.0 if right else (self.wrong if fine else self.bad_format) for right, fine in zip(correct, ok)]
        return RewardResult(values, {"reward/azr_format/format_rate": sum(ok) / max(len(ok), 1)})


# ------------------------------------------------------------------------------------ the task
class AZRTask:
    name = "azr"
    untrusted_code = True  # the model's proposed programs run in the sandbox (sandbox.require, issue 41)

    def __init__(self, **options: Any):
        self.config = make_config(AZRConfig, "azr", options)

    @property
    def max_new_tokens(self) -> int:
        return 160

    def iter_items(self, split: str, seed: int) -> Iterator[Item]:
        """Items of the six prompts (``roles=all``, train) or the three solver prompts (test, ``roles=solve``),
        in turn, made from the grammar's programs (traced in the sandbox, a batch at a time)."""
        check_split(split)
        rng, test = random.Random(f"azr:{seed}:{split}"), split == "test"
        kinds = [("solve", t) for t in TYPES] + (
            [("propose", t) for t in TYPES] if not test and self.config.roles == "all" else []
        )
        while True:
            for item in self._batch(rng, kinds):
                if in_test_split(item.key, self.config.test_fraction) == test:
                    yield item

    def _batch(self, rng: random.Random, kinds: list[tuple[str, str]]) -> list[Item]:
        """One item of each kind per program; every program traced on its inputs in one sandbox call."""
        c = self.config
        n_in = c.shown + c.held
        progs = [sample_triplet(rng, c.grammar) for _ in range(16 * len(kinds))]
        extra = [[str(rng.randint(0, c.max_int)) for _ in range(n_in)] for _ in progs]
        # each program on its own input, then on the induction inputs: n_in + 1 runs per program
        traced = trace_programs(
            [(code, stdin) for (code, first), more in zip(progs, extra) for stdin in (first, *more)]
        )
        entries = []
        for j, (prog, stdin) in enumerate(progs):
            res = traced[j * (n_in + 1) : (j + 1) * (n_in + 1)]
            if any(r["error"] for r in res):
                continue
            outs = [r["output"].rstrip("\n") for r in res]
            entries.append(
                {
                    "program": prog,
                    "input": stdin,
                    "output": outs[0],
                    "inputs": extra[j],
                    "outputs": outs[1:],
                    "trace": flat_trace(res[0]["steps"]),
                }
            )
        out = []
        for j, entry in enumerate(entries):
            role, kind = kinds[j % len(kinds)]
            item = self._solve(kind, entry) if role == "solve" else self._propose(kind, entry, entries, rng)
            if len(item.prompt) <= c.max_prompt_chars:
                out.append(item)
        return out

    def _solve(self, kind: str, entry: dict) -> Item:
        item = solve_item(kind, entry, self.config.shown)
        demo = {
            "deduction": render_demo(entry["trace"], entry["output"], "compact", entry["program"], "expr"),
            "abduction": f"IN:{entry['input']}",
            "induction": entry["program"].rstrip("\n"),
        }[kind]
        return replace(item, demo=demo)

    def _propose(self, kind: str, entry: dict, pool: list[dict], rng: random.Random) -> Item:
        refs = [entry] if kind == "induction" else rng.sample(pool, min(self.config.refs, len(pool)))
        prompt = propose_prompt(kind, refs)
        new = rng.choice(pool)  # a demonstration: another of the grammar's triplets
        demo = "IN:" + ",".join(new["inputs"]) if kind == "induction" else f"{new['program']}IN:{new['input']}"
        return Item(key=prompt, prompt=prompt, answer="", meta={"role": "propose", "type": kind}, demo=demo)

    # ---------------------------------------------------------------- grading
    def prepare(self, completions: Sequence[str], metas: Sequence[dict]) -> None:
        """Run every program the batch's answers need in one sandbox call (the results are cached)."""
        trace_programs(sorted(set(p for c, m in zip(completions, metas) for p in self._runs(c, m))))

    def _runs(self, completion: str, meta: dict) -> list[tuple[str, str]]:
        if meta.get("role") != "solve" or meta["type"] == "deduction":
            return []
        if meta["type"] == "abduction":
            found = _IN.match(_last_line(completion))
            return [(meta["program"], found.group(1))] if found else []
        code = parse_program(completion)
        return [] if code is None else [(code, i) for i, _ in meta["held"]]

    def verify(self, completion: str, answer: str, meta: dict[str, Any]) -> float:
        """1.0 when the solver's answer is right: the output (deduction), an input the program maps to
        the output (abduction, run), a program passing every held-out pair (induction, run)."""
        if meta.get("role") != "solve":
            raise ValueError("azr: only solver prompts are verified here; proposals are rewarded by the azr part")
        if meta["type"] == "deduction":
            got = parse_trace(completion)[1]
            return float(got is not None and normalize_output(got) == normalize_output(meta["output"]))
        runs = self._runs(completion, meta)
        if not runs:
            return 0.0
        outs = run_programs(runs)
        want = [meta["output"]] if meta["type"] == "abduction" else [o for _, o in meta["held"]]
        return float(all(o is not None and normalize_output(o) == normalize_output(w) for (o, _), w in zip(outs, want)))

    def extract_answer(self, completion: str) -> str | None:
        """The last line of the answer (a deduction's output, an abduction's input, a program's last line)."""
        return _last_line(completion) or None

    def diagnostics(self, completions: list[str], metas: list[dict[str, Any]], scores: list[float]) -> dict[str, float]:
        """Held-out accuracy per task type (what the ``azr`` benchmark compares)."""
        out = {}
        for kind in TYPES:
            mine = [s for s, m in zip(scores, metas) if m.get("type") == kind]
            if mine:
                out[f"{kind}_acc"] = sum(s >= 1.0 for s in mine) / len(mine)
        return out
