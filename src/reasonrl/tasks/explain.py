"""Built-in open-ended task ``explain``: explain an arithmetic fact, judged by preference, not by a verifier.

GRLO (spec envs-selfplay-eval section 8) trains a base model with a preference reward model on
open-ended prompts and measures whether the skill transfers to verifiable tasks. In the tiny world
the open-ended prompt states a fact and asks for its explanation, in one of a few phrasings the
base model never saw (``explain 347+85=432``, ``why 347+85=432``, ``347+85=432 because``); a good
answer is the column-by-column working of the arithmetic task ending in ``A:432``.

A **scripted judge** (:func:`judge`) stands for the human rater: it prefers a *correct* answer
(the last ``A:`` line is the fact's value), then a *complete* working (the share of the canonical
steps right before the first wrong one, :func:`reasonrl.tasks.arithmetic.critique_steps`), then a
*concise* one (fewer characters beyond the canonical working). :func:`variants` writes edits of
the canonical working that differ in exactly those ways; preference pairs mix them with the
model's own samples (:mod:`reasonrl.data.preferences`). ``verify`` still checks the final answer,
so ``accuracy`` is logged, but the ``grlo`` recipe gives it no weight in the reward.

Problems share the arithmetic task's keys and split (a salted hash of the expression): a problem
held out here is held out there, so the transfer reading on ``arithmetic`` never scores a fact
the policy was rewarded on.
"""

from __future__ import annotations

import dataclasses
import random
import re
from dataclasses import dataclass
from typing import Any

from .arithmetic import STEP_SEP, ArithmeticTask, critique_steps, extract_answer, parse_problem, solve
from .base import Item, in_test_split
from .guidance import split_steps

TEMPLATES = ("explain {expr}={value}\n", "why {expr}={value}\n", "{expr}={value} because\n")


@dataclass(frozen=True, order=True)
class Verdict:
    """The judge's view of one completion, compared field by field (the first difference decides)."""

    correct: bool  # the last A: line is the fact's value
    complete: float  # share of the canonical steps right before the first wrong one (1: all)
    concise: int  # minus the characters beyond the canonical working's length (0 when not longer)


def judge(key: str, completion: str) -> Verdict:
    """The scripted judge of an explanation of problem ``key`` (see the module notes)."""
    demo, value = solve(*parse_problem(key))
    n = len(split_steps(demo, STEP_SEP))  # canonical steps, the answer line the last
    first = critique_steps(key, completion).first_error  # 1-based; n + 1: something after the answer line
    complete = 1.0 if first is None or first > n else (first - 1) / n
    return Verdict(extract_answer(completion) == str(value), complete, -max(0, len(completion) - len(demo)))


def variants(key: str, rng: random.Random) -> list[str]:
    """Edits of the canonical working of ``key``, one per way the judge tells answers apart: the
    working itself; with a second answer line after it (not concise); the answer alone (not
    complete); one column result off by one (not complete, answer right); the answer off (not
    correct); cut before its answer (not correct); another problem's working (nothing right)."""
    demo, value = solve(*parse_problem(key))
    steps = split_steps(demo, STEP_SEP)[:-1]  # column steps (the answer line is last)
    step = steps[rng.randrange(len(steps))]
    lhs, res = step.rsplit("=", 1)
    off = demo.replace(step, lhs + "=" + re.sub(r"\d+", lambda m: str(int(m.group()) + 1), res, count=1), 1)
    wrong = value + rng.choice([-10, -1, 1, 10])
    terms, ops = parse_problem(key)
    other = solve([t + 1 for t in terms], ops)[0]
    return [
        demo,
        f"{demo}\nA:{value}",
        f"A:{value}",
        off,
        demo.rsplit("A:", 1)[0] + f"A:{wrong}",
        demo[: rng.randrange(1, len(demo) - len(f"A:{value}"))],
        other,
    ]


class ExplainTask(ArithmeticTask):
    """The arithmetic task's problems as facts to explain (options: the arithmetic task's)."""

    name = "explain"

    def make_item(self, terms: list[int], ops: list[str]) -> Item:
        item = super().make_item(terms, ops)
        # the phrasing of a problem is fixed by its key (the split's hash, another salt)
        pick = next(
            i
            for i in range(len(TEMPLATES))
            if in_test_split(item.key, (i + 1) / len(TEMPLATES), salt="reasonrl-explain-v1")
        )
        prompt = TEMPLATES[pick].format(expr=item.key, value=item.answer)
        return dataclasses.replace(item, prompt=prompt, meta={**item.meta, "template": pick})

    def judge(self, item: Item, completion: str) -> Verdict:
        return judge(item.key, completion)

    def variants(self, item: Item, rng: random.Random) -> list[str]:
        return variants(item.key, rng)

    def generated_item(self, text: str, parse: str = "prefix") -> Any:
        return None  # a proposer writes arithmetic problems, not facts to explain
