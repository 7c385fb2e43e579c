"""Built-in task: multi-digit addition / subtraction with a digit-by-digit chain of thought.

Prompt ``347+85=?`` followed by a newline; the demonstration works column by column from the
least significant digit, writing the carry (or borrow) it brings in, e.g. for 347+85::

    7+5+0=12,4+8+1=13,3+0+1=4
    A:432

Subtraction writes the borrowed ten into the minuend digit (``12-5-0=7``, borrow 1 next); a
negative difference swaps the operands behind a ``~`` marker. More than two terms are worked
left to right, one line per binary operation, each intermediate line ending in ``>result``.

Guidance (:mod:`.guidance`): a *step* is one comma-separated column step, numbered from 1 across
all lines in text order; a line's ``~`` and ``>result`` belong to its first and last column step,
and the answer line is the last step (347+85 has 4 steps). The critique compares the completion's
steps, spaces removed, with the canonical working of the problem (so the spaced style is right
too, and the answer step is right when its value is): the first that differs is the first error,
a missing step is wrong, and anything after the answer line is wrong.
"""

from __future__ import annotations

import dataclasses
import random
import re
from dataclasses import dataclass
from typing import Any, Iterator

from ..errors import UserError
from .base import Item, check_split, in_test_split, make_config
from .guidance import Critique, make_critique, prefix_at_step, split_steps

ANSWER_RE = re.compile(r"A:\s*(-?\d+)")
PROBLEM_RE = re.compile(r"\d+(?:[+-]\d+)+")
STEP_SEP = re.compile(r"[,\n]")  # a step: one column step, or the answer line
# a column step: optional ~ (negative line), x op y op carry-or-borrow = result, optional >running total
COLUMN_RE = re.compile(r"(~?)(\d+)([+-])(\d+)[+-](\d+)=(-?\d+)(>-?\d+)?")


@dataclass(frozen=True)
class ArithmeticConfig:
    min_digits: int = 1
    max_digits: int = 3
    terms: int = 2
    ops: str = "+"  # any of "+", "-", "+-"
    test_fraction: float = 0.1
    # fraction of demonstrations (chosen by a hash of the problem) whose chain of thought puts spaces
    # around operators, ``7 + 5 + 0 = 12``: a rare style, the target behaviour of the vspo recipe
    spaced_rate: float = 0.0

    def __post_init__(self):
        if not 1 <= self.min_digits <= self.max_digits:
            raise ValueError(f"need 1 <= min_digits <= max_digits, got {self.min_digits}, {self.max_digits}")
        if self.terms < 2:
            raise ValueError(f"terms must be >= 2, got {self.terms}")
        if not self.ops or set(self.ops) - {"+", "-"}:
            raise ValueError(f"ops must be made of '+' and '-', got {self.ops!r}")
        if not 0.0 <= self.spaced_rate <= 1.0:
            raise ValueError(f"spaced_rate must be in [0, 1], got {self.spaced_rate}")


def _digits(n: int) -> list[int]:
    return [int(c) for c in reversed(str(n))]  # least significant first


def add_columns(a: int, b: int) -> tuple[str, int]:
    """Chain-of-thought columns of a + b (a, b >= 0), and the sum."""
    da, db, carry, steps = _digits(a), _digits(b), 0, []
    for i in range(max(len(da), len(db))):
        x, y = (da[i] if i < len(da) else 0), (db[i] if i < len(db) else 0)
        s = x + y + carry
        steps.append(f"{x}+{y}+{carry}={s}")
        carry = s // 10
    return ",".join(steps), a + b


def sub_columns(a: int, b: int) -> tuple[str, int]:
    """Chain-of-thought columns of a - b for a >= b >= 0, and the difference."""
    da, db, borrow, steps = _digits(a), _digits(b), 0, []
    for i in range(len(da)):
        x, y = da[i], (db[i] if i < len(db) else 0)
        if x - y - borrow < 0:
            steps.append(f"{x + 10}-{y}-{borrow}={x + 10 - y - borrow}")
            borrow = 1
        else:
            steps.append(f"{x}-{y}-{borrow}={x - y - borrow}")
            borrow = 0
    return ",".join(steps), a - b


def binary_step(a: int, op: str, b: int) -> tuple[str, int]:
    """One line of the chain of thought for ``a op b`` (a may be negative after a subtraction)."""
    if op == "+" and a >= 0:
        return add_columns(a, b)
    if op == "-" and a >= b:
        return sub_columns(a, b)
    if op == "-":  # a < b: a - b = -(b - a) for a >= 0
        if a < 0:  # -x - b = -(x + b)
            text, s = add_columns(-a, b)
            return "~" + text, -s
        text, d = sub_columns(b, a)
        return "~" + text, -d
    # op == "+" with a < 0: -x + b
    x = -a
    text, d = sub_columns(b, x) if b >= x else sub_columns(x, b)
    return ("" if b >= x else "~") + text, (d if b >= x else -d)


def solve(terms: list[int], ops: list[str]) -> tuple[str, int]:
    """The demonstration (chain of thought + answer line) and the value of the expression."""
    lines, acc = [], terms[0]
    for i, (op, t) in enumerate(zip(ops, terms[1:])):
        text, acc = binary_step(acc, op, t)
        lines.append(text if i == len(ops) - 1 else f"{text}>{acc}")
    return "\n".join(lines) + f"\nA:{acc}", acc


SPACED_RE = r"\d [-+=] \d"  # an operator written with spaces around it: the spaced style


def spaced(demo: str) -> str:
    """The spaced style of a demonstration: spaces around every operator of the column steps
    (``7 + 5 + 0 = 12``); the answer line and the ``>``/``~`` markers are unchanged."""
    *steps, answer = demo.split("\n")
    return "\n".join([re.sub(r"(?<=\d)([-+=])", r" \1 ", line) for line in steps] + [answer])


def extract_answer(completion: str) -> str | None:
    """Last ``A:<int>`` in the completion, normalised (no leading zeros, no '-0')."""
    found = ANSWER_RE.findall(completion)
    return str(int(found[-1])) if found else None


def parse_problem(key: str) -> tuple[list[int], list[str]]:
    """``"12+9-30"`` -> ([12, 9, 30], ["+", "-"])."""
    if not PROBLEM_RE.fullmatch(key):
        raise UserError(f"arithmetic: {key!r} is not a problem key like '347+85' (digits joined by + or -)")
    return [int(t) for t in re.findall(r"\d+", key)], re.findall(r"[+-]", key)


def generated_problem(text: str, config: ArithmeticConfig, parse: str = "prefix") -> tuple[list[int], list[str]] | None:
    """A generated problem's terms and operators when ``text`` is well-formed in the task's format, else
    None (D2Evo's built-in verifiability, spec distill-and-data.md section 11). Well-formed: exactly
    ``config.terms`` operands of ``min_digits``..``max_digits`` digits without leading zeros, joined by
    operators of ``config.ops``. ``parse="line"``: the first line, less a trailing ``=?`` or ``=``, must
    be such an expression; ``"prefix"``: the longest such expression the text starts with (the rest
    ignored; a small model writes its problem and runs on into a chain of thought)."""
    head = text.lstrip()
    if parse == "line":
        head = re.sub(r"=\??$", "", head.split("\n")[0].strip())
    elif parse != "prefix":
        raise ValueError(f"unknown parse mode {parse!r}; valid: prefix, line")
    m = re.match(r"\d+(?:[+-]\d+){%d}" % (config.terms - 1), head)
    if m is None or (parse == "line" and m.end() != len(head)):
        return None
    nums, ops = re.findall(r"\d+", m.group(0)), re.findall(r"[+-]", m.group(0))
    if any(o not in config.ops for o in ops) or any(n != str(int(n)) for n in nums):
        return None  # an operator the task does not use, or a leading zero
    if not all(config.min_digits <= len(n) <= config.max_digits for n in nums):
        return None
    return [int(n) for n in nums], ops


def _swap_note(a: int, op: str, b: int) -> str | None:
    """What a negative line works out instead (mirrors :func:`binary_step`), or None."""
    if op == "-" and a < 0:
        return f"{a}-{b} is negative: write ~ and add {-a}+{b}"
    if op == "-" and a < b:
        return f"{a}-{b} is negative: write ~ and subtract {b}-{a}"
    if op == "+" and a < 0 and b < -a:
        return f"{a}+{b} is negative: write ~ and subtract {-a}-{b}"
    return None


def column_hints(terms: list[int], ops: list[str]) -> list[str]:
    """Strategy hints computed from the problem (NudgeRL's contexts, arXiv 2605.15726): per line, the
    columns that carry (or borrow), the number of columns, column 1's step, the ~ of a negative
    line; then the answer's digit count. Columns count from the ones column (column 1)."""
    many, out, acc = len(ops) > 1, [], terms[0]
    if many:
        out.append(f"work left to right, one line per operation: {len(ops)} lines")
    for j, (op, t) in enumerate(zip(ops, terms[1:]), 1):
        where = f"line {j}: " if many else ""
        text, value = binary_step(acc, op, t)
        cols = [COLUMN_RE.fullmatch(c) for c in text.split(",")]
        borrow = cols[0].group(3) == "-"  # a borrowing column writes its minuend digit plus ten
        marked = [i for i, m in enumerate(cols, 1) if int(m.group(2 if borrow else 6)) >= 10]
        verb = "borrows" if borrow else "carries"
        out.append(where + (", ".join(f"column {i} {verb} 1" for i in marked) or f"no column {verb}"))
        out.append(f"{where}{len(cols)} column{'s' * (len(cols) > 1)}, from the ones digit leftwards")
        out.append(f"{where}column 1 is {text.split(',')[0].lstrip('~')}")
        note = _swap_note(acc, op, t)
        if note:
            out.append(where + note)
        acc = value
    size = len(str(abs(acc)))
    out.append(f"the answer {'is negative and ' if acc < 0 else ''}has {size} digit{'s' * (size > 1)}")
    return out


def _lhs(m: re.Match) -> str:
    return m.group(0).split("=")[0]  # a column step's operands, ~ included


def _step_error(got: str, want: str, is_answer: bool) -> str | None:
    """Why step ``got`` is not the canonical ``want`` (one line), or None when it is right."""
    g = re.sub(r"\s+", "", got)
    if g == want:
        return None
    if is_answer:
        m = re.fullmatch(r"A:(-?\d+)", g)
        return None if m and int(m.group(1)) == int(want[2:]) else f"the answer line is {want}, not {got[:40]}"
    gm, wm = COLUMN_RE.fullmatch(g), COLUMN_RE.fullmatch(want)
    if gm and _lhs(gm) == _lhs(wm) and gm.group(6) != wm.group(6):
        return f"{_lhs(wm)} is {wm.group(6)}, not {gm.group(6)}"
    if gm and _lhs(gm) == _lhs(wm):
        return f"the running total is {(wm.group(7) or '>none')[1:]}, not {(gm.group(7) or '>none')[1:]}"
    return f"it should be {want}, not {got[:40]}"


def critique_steps(key: str, completion: str) -> Critique:
    """The first wrong step of ``completion`` against the canonical working of problem ``key``."""
    want = split_steps(solve(*parse_problem(key))[0], STEP_SEP)
    got = split_steps(completion, STEP_SEP)
    for k, w in enumerate(want, 1):
        if k > len(got):
            return make_critique(k, f"step {k}: missing; it should be {w}")
        why = _step_error(got[k - 1], w, is_answer=k == len(want))
        if why:
            return make_critique(k, f"step {k}: {why}")
    if len(got) > len(want):
        k = len(want) + 1
        return make_critique(k, f"step {k}: nothing should follow the answer line, got {got[k - 1][:40]}")
    return make_critique(None, f"all {len(want)} steps are right")


class ArithmeticTask:
    """Addition/subtraction of ``terms`` numbers of ``min_digits``..``max_digits`` digits."""

    name = "arithmetic"

    def __init__(self, **options: Any):
        self.config = make_config(ArithmeticConfig, "arithmetic", options)

    @property
    def max_new_tokens(self) -> int:
        """Generation budget, about 1.5x the longest demonstration: a column step is <= 9 characters,
        a line is given max_digits + 1 columns (the real maximum is max_digits), plus the answer."""
        c = self.config
        budget = (c.terms - 1) * ((c.max_digits + 1) * 9 + c.max_digits + 3) + c.max_digits + c.terms + 4
        # the spaced style adds two spaces around each of a column step's three operators
        return budget + ((c.terms - 1) * (c.max_digits + 1) * 6 if c.spaced_rate > 0 else 0)

    def _number(self, rng: random.Random) -> int:
        d = rng.randint(self.config.min_digits, self.config.max_digits)
        return rng.randint(0 if d == 1 else 10 ** (d - 1), 10**d - 1)

    def make_item(self, terms: list[int], ops: list[str]) -> Item:
        expr = str(terms[0]) + "".join(f"{o}{t}" for o, t in zip(ops, terms[1:]))
        demo, value = solve(terms, ops)
        if self.config.spaced_rate > 0 and in_test_split(expr, self.config.spaced_rate, salt="reasonrl-style-v1"):
            demo = spaced(demo)
        meta = {"terms": len(terms), "max_digits": max(len(str(t)) for t in terms), "ops": "".join(ops)}
        return Item(key=expr, prompt=f"{expr}=?\n", answer=str(value), meta=meta, demo=demo)

    def iter_items(self, split: str, seed: int) -> Iterator[Item]:
        check_split(split)
        rng, want_test, c = random.Random(f"{seed}:{split}"), split == "test", self.config
        while True:
            terms = [self._number(rng) for _ in range(c.terms)]
            ops = [rng.choice(c.ops) for _ in range(c.terms - 1)]
            item = self.make_item(terms, ops)
            if in_test_split(item.key, c.test_fraction) == want_test:
                yield item

    def generated_item(self, text: str, parse: str = "prefix") -> Item | None:
        """The item of a problem a model wrote (D2Evo's Questioner), with its TRUE answer computed from
        the expression, or None when ``text`` is not well-formed (:func:`generated_problem`). A problem
        of the held-out split is marked ``meta["held_out"]``: it may be judged, never trained on."""
        found = generated_problem(text, self.config, parse)
        if found is None:
            return None
        item = self.make_item(*found)
        held_out = in_test_split(item.key, self.config.test_fraction)
        return dataclasses.replace(item, meta={**item.meta, "held_out": held_out})

    def verify(self, completion: str, answer: str, meta: dict[str, Any]) -> float:
        got = extract_answer(completion)
        return float(got is not None and got == str(int(answer)))

    def extract_answer(self, completion: str) -> str | None:
        return extract_answer(completion)

    def diagnostics(self, completions: list[str], metas: list[dict[str, Any]], scores: list[float]) -> dict[str, float]:
        """With the spaced style in the demonstrations: how often outputs use it (VSPO's behaviour)."""
        if self.config.spaced_rate == 0:
            return {}
        return {"spaced_rate": sum(bool(re.search(SPACED_RE, c)) for c in completions) / max(len(completions), 1)}

    # guidance (tasks/guidance.py): hints, reference solution, stepwise critique; steps: see the module doc
    def hints(self, item: Item) -> list[str]:
        return column_hints(*parse_problem(item.key))

    def reference_solution(self, item: Item) -> str:
        if item.demo is None:
            raise UserError(f"arithmetic item {item.key!r} has no demonstration (build items with make_item)")
        return item.demo

    def steps(self, completion: str) -> list[str]:
        return split_steps(completion, STEP_SEP)

    def prefix_before_step(self, completion: str, k: int) -> tuple[str, int]:
        return prefix_at_step(completion, k, STEP_SEP)

    def critique(self, item: Item, completion: str) -> Critique:
        return critique_steps(item.key, completion)

    def critique_prompt(self, item: Item, completion: str) -> str:
        return (
            f"check {item.prompt.strip()}\n{completion}\n"
            "first wrong step (steps split at , and line breaks; the answer line is last):\n"
        )
