"""``word_math``: one- and two-step arithmetic word problems in plain English, for chat models.

A problem is a short story with small numbers (``Tom has 7 apples and buys 5 more. How many apples
does Tom have now?``), asked in chat format: a system turn that asks for the reasoning and then the
answer inside ``<answer></answer>``, and the story as the user's turn. It is the task the README's
"A real model on your CPU" trains SmolLM2-135M-Instruct on (issue 42): the model starts between 10%
and 60% held-out greedy pass@1 on it (docs/models-and-data.md has the measurements).

The answer is read by :func:`extract_final_number` (reasonrl.rewards.answers), which copes with what
a small instruct model writes when it ignores the tag (``The answer is 12.``, ``#### 12``, a last
number); ``diagnostics`` reports how often the tag itself is used (``answer_tag_rate``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Iterator

from ..rewards.answers import extract_final_number, extract_tag, normalize_number
from .base import Item, check_split, in_test_split, make_config

# measured against two other wordings on SmolLM2-135M-Instruct (docs/models-and-data.md): "step by step"
# made it ramble to the budget (pass@1 0.20, 97 tokens); this one 0.375 in 63 tokens
SYSTEM_PROMPT = (
    "You are a helpful assistant. Answer the question with one short calculation, then write the answer "
    "as a number inside <answer></answer>."
)
NAMES = ("Tom", "Anna", "Sam", "Lily", "Ben", "Mia", "Jack", "Emma", "Leo", "Sara", "Max", "Nora")
THINGS = ("apples", "pencils", "stickers", "marbles", "cookies", "books", "cards", "flowers", "coins", "toys")
OPS = ("add", "sub", "mul", "div")
_tag = extract_tag("answer")


@dataclass(frozen=True)
class WordMathConfig:
    max_value: int = 20  # operands of + and - are 1..max_value; factors of x and / are 2..10
    ops: str = "add,sub,mul,div"  # comma list of add | sub | mul | div
    steps: int = 1  # 1: one operation; 2: a second + or - applied to the first result
    system_prompt: str = SYSTEM_PROMPT  # "" leaves the system turn out (the user turn alone)
    test_fraction: float = 0.2

    def __post_init__(self):
        if not 2 <= self.max_value <= 999:
            raise ValueError(f"max_value must be in [2, 999], got {self.max_value}")
        bad = [o for o in self.op_list if o not in OPS]
        if bad or not self.op_list:
            raise ValueError(f"ops must be a comma list of {', '.join(OPS)}, got {self.ops!r}")
        if self.steps not in (1, 2):
            raise ValueError(f"steps must be 1 or 2, got {self.steps}")
        if not 0.0 < self.test_fraction < 1.0:
            raise ValueError(f"test_fraction must be in (0, 1), got {self.test_fraction}")

    @property
    def op_list(self) -> list[str]:
        return [o.strip() for o in self.ops.split(",") if o.strip()]


def _first_step(op: str, rng: random.Random, top: int, name: str, thing: str) -> tuple[str, str, int]:
    """(story, question, value) of one operation on small numbers."""
    if op in ("add", "sub"):
        a, b = rng.randint(1, top), rng.randint(1, top)
        if op == "add":
            return (
                f"{name} has {a} {thing}. A friend gives {name} {b} more {thing}.",
                f"How many {thing} does {name} have now?",
                a + b,
            )
        a, b = max(a, b), min(a, b)
        return (
            f"{name} has {a} {thing} and gives {b} of them away.",
            f"How many {thing} does {name} have left?",
            a - b,
        )
    a, b = rng.randint(2, 10), rng.randint(2, 10)
    if op == "mul":
        return (
            f"{name} has {a} boxes with {b} {thing} in each box.",
            f"How many {thing} does {name} have in all?",
            a * b,
        )
    return (f"{name} shares {a * b} {thing} equally among {b} friends.", f"How many {thing} does each friend get?", a)


def _second_step(rng: random.Random, value: int, top: int, name: str, thing: str) -> tuple[str, int]:
    """A + or - applied to the first result (never below zero)."""
    c = rng.randint(1, top)
    if c <= value and rng.random() < 0.5:
        return f"Then {name} loses {c} {thing}.", value - c
    return f"Then {name} finds {c} more {thing}.", value + c


def make_problem(rng: random.Random, cfg: WordMathConfig) -> tuple[str, int]:
    """(question text, answer) drawn from ``rng``."""
    name, thing, op = rng.choice(NAMES), rng.choice(THINGS), rng.choice(cfg.op_list)
    story, question, value = _first_step(op, rng, cfg.max_value, name, thing)
    if cfg.steps == 2:
        more, value = _second_step(rng, value, cfg.max_value, name, thing)
        story, question = f"{story} {more}", question.replace(" now?", "?").replace(" left?", "?")
        question = question.replace("does each friend get?", f"does {name} have now?")
    return f"{story} {question}", value


class WordMathTask:
    """Arithmetic word problems in chat format (see the module docs)."""

    name = "word_math"

    def __init__(self, **options: Any):
        self.config = make_config(WordMathConfig, "word_math", options)

    @property
    def max_new_tokens(self) -> int:
        """A few sentences of working and the answer: SmolLM2-135M-Instruct's greedy answers are 25-100 tokens
        (12% of them run to 128, repeating themselves)."""
        return 128 * self.config.steps

    def prompt(self, question: str) -> list[dict[str, str]]:
        turns = [{"role": "user", "content": question}]
        sys_prompt = self.config.system_prompt
        return [{"role": "system", "content": sys_prompt}, *turns] if sys_prompt else turns

    def iter_items(self, split: str, seed: int) -> Iterator[Item]:
        check_split(split)
        rng, want_test = random.Random(f"word_math:{seed}:{split}"), split == "test"
        while True:
            question, value = make_problem(rng, self.config)
            if in_test_split(question, self.config.test_fraction) == want_test:
                yield Item(
                    key=question,
                    prompt=self.prompt(question),
                    answer=str(value),
                    meta={},
                    demo=f"The answer is {value}.\n<answer>{value}</answer>",
                )

    def verify(self, completion: str, answer: str, meta: dict[str, Any]) -> float:
        got = extract_final_number(completion)
        return float(got is not None and got == normalize_number(answer))

    def extract_answer(self, completion: str) -> str | None:
        return extract_final_number(completion)

    def diagnostics(self, completions: list[str], metas: list[dict[str, Any]], scores: list[float]) -> dict[str, float]:
        """How often the greedy answers use the tag the system prompt asks for."""
        return {"answer_tag_rate": sum(_tag(c) is not None for c in completions) / max(len(completions), 1)}
