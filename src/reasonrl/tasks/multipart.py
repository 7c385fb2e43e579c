"""Built-in task ``multipart``: several small sums in one problem, answered in one ``\\boxed{...}``.

A stand-in for multi-part physics problems that the tiny reasoner can learn (Physics-R1's reward,
spec section 7(b), scores every part and ANDs them). The prompt lists the parts with ``(a)``,
``(b)``, ... labels; the demonstration works each part column by column, as the ``arithmetic``
task does, on its own labelled line, then boxes the answers in order, separated by ``; ``::

    (a) 34+5 (b) 12-7
    ->
    (a) 4+5+0=9,3+0+0=3
    (b) 12-7-0=5,1-0-1=0
    \\boxed{39; 5}

``verify`` is :class:`~reasonrl.rewards.physics.PhysicsMatch` (binary: all parts right, in order),
so any recipe's correctness on this task is Physics-R1's. Every character is printable ASCII, so
the tiny reasoner's character vocabulary covers it. Train and test are disjoint by construction: a
salted hash of the problem key (``34+5;12-7``) decides the split (:func:`~reasonrl.tasks.base.in_test_split`).

Options: ``parts`` (2), ``min_digits`` (1), ``max_digits`` (2), ``ops`` (``+-``), ``test_fraction`` (0.1).
A negative part answer is written with ``-`` in the box; its line carries the ``~`` marker of the
arithmetic task.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Iterator

from ..rewards.physics import PhysicsMatch, predicted_parts
from ..rewards.latex import parse_quantity
from .arithmetic import binary_step
from .base import Item, check_split, in_test_split, make_config

LABELS = "abcdefgh"


@dataclass(frozen=True)
class MultipartConfig:
    parts: int = 2
    min_digits: int = 1
    max_digits: int = 2
    ops: str = "+-"
    test_fraction: float = 0.1

    def __post_init__(self):
        if not 2 <= self.parts <= len(LABELS):
            raise ValueError(f"parts must be in 2..{len(LABELS)}, got {self.parts}")
        if not 1 <= self.min_digits <= self.max_digits:
            raise ValueError(f"need 1 <= min_digits <= max_digits, got {self.min_digits}, {self.max_digits}")
        if not self.ops or set(self.ops) - {"+", "-"}:
            raise ValueError(f"ops must be made of '+' and '-', got {self.ops!r}")
        if not 0.0 < self.test_fraction < 1.0:
            raise ValueError(f"test_fraction must be in (0, 1), got {self.test_fraction}")


def solve_parts(parts: list[tuple[int, str, int]]) -> tuple[str, list[int]]:
    """The demonstration of ``[(a, op, b), ...]`` and each part's value."""
    lines, values = [], []
    for label, (a, op, b) in zip(LABELS, parts):
        text, value = binary_step(a, op, b)
        lines.append(f"({label}) {text}")
        values.append(value)
    return "\n".join(lines) + "\n\\boxed{" + "; ".join(map(str, values)) + "}", values


class MultipartTask:
    """``parts`` additions / subtractions of two numbers each, answered together in one box."""

    name = "multipart"

    def __init__(self, **options: Any):
        self.config = make_config(MultipartConfig, "multipart", options)
        self.reward = PhysicsMatch()

    @property
    def max_new_tokens(self) -> int:
        """About 1.5x the longest demonstration: a part line is its label (4), a ``~`` and max_digits
        column steps of <= 10 characters; the box is 8 characters plus each answer, sign and separator."""
        c = self.config
        longest = c.parts * (5 + c.max_digits * 10 + 1) + 8 + c.parts * (c.max_digits + 4)
        return int(1.5 * longest)

    def _number(self, rng: random.Random) -> int:
        d = rng.randint(self.config.min_digits, self.config.max_digits)
        return rng.randint(0 if d == 1 else 10 ** (d - 1), 10**d - 1)

    def make_item(self, parts: list[tuple[int, str, int]]) -> Item:
        key = ";".join(f"{a}{op}{b}" for a, op, b in parts)
        demo, values = solve_parts(parts)
        prompt = " ".join(f"({label}) {a}{op}{b}" for label, (a, op, b) in zip(LABELS, parts)) + "\n"
        return Item(key=key, prompt=prompt, answer="; ".join(map(str, values)), meta={"parts": len(parts)}, demo=demo)

    def iter_items(self, split: str, seed: int) -> Iterator[Item]:
        check_split(split)
        rng, want_test, c = random.Random(f"{seed}:{split}"), split == "test", self.config
        while True:
            parts = [(self._number(rng), rng.choice(c.ops), self._number(rng)) for _ in range(c.parts)]
            item = self.make_item(parts)
            if in_test_split(item.key, c.test_fraction) == want_test:
                yield item

    def verify(self, completion: str, answer: str, meta: dict[str, Any]) -> float:
        return self.reward.judge(completion, answer, f"the multipart item answered {answer!r}").score

    def extract_answer(self, completion: str) -> str | None:
        """The boxed parts, each number canonicalised (``39; 5``), for majority votes; None without a box."""
        parts = predicted_parts(completion, self.config.parts)
        if parts is None:
            return None
        values = [parse_quantity(p) for p in parts]
        return "; ".join(p if v is None else f"{v:g}" for p, v in zip(parts, values))
