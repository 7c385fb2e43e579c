"""AZR's program world (Absolute Zero Reasoner, arXiv 2505.03335; spec envs-selfplay-eval.md section 1),
sized for a character-level model: triplets, the validation of a proposed program, and the sandbox.

A **triplet** is (program, input, output) with output = program(input). AZR's programs are Python
functions ``def f(...)``; here a program is a short script of the ``code`` task's grammar that reads
one integer from stdin (``a=int(input())``) and prints its result [inferred: the tiny model's 512
positions fit such a script, its stdin and a worked trace]. Every program, proposed or graded, runs
only in the sandbox (:func:`reasonrl.tasks.codegen.trace_programs`: one sandbox process per batch, a
line-event cap that stops infinite loops, the sandbox's own limits on time, memory, processes,
files and network), never in the trainer.

**Validation** of a proposed program, stage by stage (AZR's released code): it parses; it names none
of AZR's banned modules and words (plus ours, :data:`BANNED`); it runs without error on its input;
it is **deterministic**: two separate sandbox runs print the same output (``random`` and
``id(object())`` do not). The first failing stage and its reason are reported.
"""

from __future__ import annotations

import ast
import random
from dataclasses import dataclass
from typing import Any, Sequence

from .codegen import sample_program, trace_programs

__all__ = [
    "BANNED",
    "IDENTITY",
    "TYPES",
    "CodeTriplet",
    "Validation",
    "banned_names",
    "run_programs",
    "sample_triplet",
    "validate_programs",
]

TYPES = ("deduction", "abduction", "induction")  # AZR's code_o, code_i, code_f
# AZR's banned imports and words (released code), plus what a stdin script has no use for
BANNED = (
    "logging",
    "random",
    "multiprocessing",
    "pebble",
    "subprocess",
    "threading",
    "datetime",
    "time",
    "hashlib",
    "hmac",
    "bcrypt",
    "os",
    "sys",
    "calendar",
    "socket",
    "open",
    "eval",
    "exec",
    "__import__",
    "compile",
    "globals",
    "locals",
    "breakpoint",
)
IDENTITY = "a=int(input())\nprint(a)\n"  # AZR seeds its buffers with the identity program


@dataclass(frozen=True)
class CodeTriplet:
    """(program, input, output): ``output`` is what the program prints on ``input`` (no trailing newline)."""

    program: str
    input: str
    output: str

    def as_dict(self) -> dict[str, str]:
        return {"program": self.program, "input": self.input, "output": self.output}


@dataclass(frozen=True)
class Validation:
    """The verdict on one proposed program: ``ok``, or the ``stage`` that failed and why."""

    ok: bool
    stage: str  # "parse" | "banned" | "run" | "determinism" | "" when ok
    reason: str = ""
    output: str = ""


def banned_names(code: str, banned: Sequence[str] = BANNED) -> list[str]:
    """The ``banned`` modules and names a parsed program uses (imports, names, attributes), in order."""
    found: list[str] = []
    for node in ast.walk(ast.parse(code)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name.split(".")[0] for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [(node.module or "").split(".")[0]]
        elif isinstance(node, ast.Name):
            names = [node.id]
        elif isinstance(node, ast.Attribute):
            names = [node.attr]
        found += [n for n in names if n in banned and n not in found]
    return found


def run_programs(
    pairs: Sequence[tuple[str, str]], *, cache: bool = True, timeout: float = 5.0, memory_mb: int = 256
) -> list[tuple[str | None, str | None]]:
    """(output, error) of each (program, stdin) pair, run in the sandbox in one batch; output is None
    when the program failed (error says why: an exception, the line-event cap, the sandbox's limits)."""
    results = trace_programs(list(pairs), timeout=timeout, memory_mb=memory_mb, cache=cache)
    return [(None, r["error"]) if r["error"] else (r["output"].rstrip("\n"), None) for r in results]


def _static(code: str) -> Validation | None:
    """The parse and banned-name stages; None when both pass."""
    try:
        banned = banned_names(code)
    except SyntaxError as err:
        return Validation(False, "parse", f"SyntaxError: {err.msg} (line {err.lineno})")
    if banned:
        return Validation(False, "banned", f"uses {', '.join(banned)}")
    return None


def validate_programs(pairs: Sequence[tuple[str, str]], *, check_banned: bool = True) -> list[Validation]:
    """Validate (program, input) pairs: parse, banned names (``check_banned``), a first and a second
    sandbox run (uncached, separate processes) whose outputs must agree. Two batched sandbox calls
    for the lot."""
    verdicts: list[Validation | None] = []
    for code, _ in pairs:
        static = _static(code)
        if static is not None and not check_banned and static.stage == "banned":
            static = None
        verdicts.append(static)
    todo = [i for i, v in enumerate(verdicts) if v is None]
    runs = [run_programs([pairs[i] for i in todo], cache=False) for _ in range(2)] if todo else [[], []]
    for i, first, second in zip(todo, *runs):
        if first[0] is None:
            verdicts[i] = Validation(False, "run", first[1] or "failed")
        elif second[0] != first[0]:
            verdicts[i] = Validation(False, "determinism", f"two runs printed {first[0]!r} and {second[0]!r}")
        else:
            verdicts[i] = Validation(True, "", "", first[0])
    return [v for v in verdicts if v is not None]


def sample_triplet(rng: random.Random, cfg: Any) -> tuple[str, str]:
    """A program of the ``code`` grammar that reads its input (``a=int(input())`` first) and its stdin;
    ``cfg`` is a :class:`~reasonrl.tasks.code.CodeConfig` with ``input_prob=1``."""
    if cfg.input_prob != 1.0:
        raise ValueError(f"AZR's programs read their input: the grammar needs input_prob=1, got {cfg.input_prob}")
    return sample_program(rng, cfg)
