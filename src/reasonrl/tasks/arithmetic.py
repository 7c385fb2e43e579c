"""Built-in task: multi-digit addition / subtraction with a digit-by-digit chain of thought.

Prompt ``347+85=?`` followed by a newline; the demonstration works column by column from the
least significant digit, writing the carry (or borrow) it brings in, e.g. for 347+85::

    7+5+0=12,4+8+1=13,3+0+1=4
    A:432

Subtraction writes the borrowed ten into the minuend digit (``12-5-0=7``, borrow 1 next); a
negative difference swaps the operands behind a ``~`` marker. More than two terms are worked
left to right, one line per binary operation, each intermediate line ending in ``>result``.
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Any, Iterator

from .base import Item, check_split, in_test_split, make_config

ANSWER_RE = re.compile(r"A:\s*(-?\d+)")


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

    def verify(self, completion: str, answer: str, meta: dict[str, Any]) -> float:
        got = extract_answer(completion)
        return float(got is not None and got == str(int(answer)))

    def extract_answer(self, completion: str) -> str | None:
        return extract_answer(completion)

    def diagnostics(self, completions: list[str], metas: list[dict[str, Any]],
                    scores: list[float]) -> dict[str, float]:
        """With the spaced style in the demonstrations: how often outputs use it (VSPO's behaviour)."""
        if self.config.spaced_rate == 0:
            return {}
        return {"spaced_rate": sum(bool(re.search(SPACED_RE, c)) for c in completions) / max(len(completions), 1)}
