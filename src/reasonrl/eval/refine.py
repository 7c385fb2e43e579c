"""Test-time generate -> verify -> refine loop (SU-01's test-time scaling, after lyang36/IMO25;
spec distill-and-data section 13 (a) 4): each held-out answer is checked by a verifier; a rejected
one is rewritten from a refine prompt holding the previous answer and the verifier's report, up to
``rounds`` times or until accepted.

The verifier is pluggable and, for the headline number, never sees the gold answer:

- ``self``: the model itself reads its answer under a verify prompt and answers yes/no (its text is
  the bug report);
- ``format``: the task's own answer extraction (an answer that cannot be read is rejected).

``oracle`` checks against the gold answer: an **upper bound** on what a perfect verifier would give,
reported under keys of its own (``refine_oracle_upper_bound/...``), never as the loop's result. Gold
answers are used by every verifier only to *score* the answers of each round.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Sequence

from ..rollout import Generator, SamplingParams
from ..tasks import Item, Task, is_correct
from ..models.chat import PLAIN

VERIFY_TEMPLATE = (
    "{prompt}{attempt}\nVerify the solution above step by step. Is it correct? Answer yes or no, "
    "then name the first wrong step.\n"
)
# ends with the task's prompt again, as the training refine prompts do, so a small model answers in its own format
REFINE_TEMPLATE = (
    "{prompt}Previous answer:\n{attempt}\nVerifier report:\n{report}\n"
    "Fix the errors and give a refined full solution.\n{prompt}"
)
_YES = re.compile(r"\s*(yes|correct)\b", re.IGNORECASE)


def accepts(verdict_text: str) -> bool:
    """A self-verification accepts when its first word is "yes" or "correct" (any case)."""
    return _YES.match(verdict_text) is not None


@dataclass(frozen=True)
class Verdict:
    ok: bool
    report: str  # what the refine prompt is told (the model's bug report, or a fixed note)


@dataclass(frozen=True)
class SelfVerifier:
    """The model checks its own answer: greedy text under :data:`VERIFY_TEMPLATE`; no gold answer."""

    name = "self"
    oracle = False
    template: str = VERIFY_TEMPLATE

    def __call__(
        self, engine: Generator, task: Task, items: Sequence[Item], attempts: Sequence[str], budget: int
    ) -> list[Verdict]:
        fmt = getattr(engine, "formatter", PLAIN)  # a chat model: the attempt as its turn, the check as the user's
        prompts = [fmt.follow_up(it.prompt, self.template, a) for it, a in zip(items, attempts)]
        texts = engine.generate(prompts, 1, SamplingParams(temperature=0, max_new_tokens=budget)).texts
        return [Verdict(accepts(t), t) for t in texts]


@dataclass(frozen=True)
class FormatVerifier:
    """The task's own answer extraction: an answer that can be read is accepted; no gold answer."""

    name = "format"
    oracle = False

    def __call__(self, engine, task: Task, items, attempts, budget) -> list[Verdict]:
        return [Verdict(task.extract_answer(a) is not None, "no final answer could be read") for a in attempts]


@dataclass(frozen=True)
class OracleVerifier:
    """Checks against the gold answer: an upper bound (a perfect verifier), never the headline."""

    name = "oracle"
    oracle = True

    def __call__(self, engine, task: Task, items, attempts, budget) -> list[Verdict]:
        return [
            Verdict(is_correct(task.verify(a, it.answer, it.meta)), "the final answer is wrong")
            for it, a in zip(items, attempts)
        ]


VERIFIERS = {"self": SelfVerifier, "format": FormatVerifier, "oracle": OracleVerifier}


def refine_loop(
    engine: Generator,
    task: Task,
    items: Sequence[Item],
    attempts: Sequence[str],
    rounds: int,
    verifier: Any,
    budget: int,
    template: str = REFINE_TEMPLATE,
) -> tuple[list[str], list[dict]]:
    """Final answers after up to ``rounds`` verify -> refine rounds (greedy), and one record per item:
    its answer after each round (``answers[0]`` the first), refines used, whether it was accepted."""
    current, accepted, history = list(attempts), [False] * len(items), [[a] for a in attempts]
    refines = [0] * len(items)
    for _ in range(rounds):
        open_ = [i for i in range(len(items)) if not accepted[i]]
        verdicts = (
            verifier(engine, task, [items[i] for i in open_], [current[i] for i in open_], budget) if open_ else []
        )
        todo = []
        for i, v in zip(open_, verdicts):
            accepted[i] = v.ok
            if not v.ok:
                todo.append((i, v.report))
        if todo:
            fmt = getattr(engine, "formatter", PLAIN)
            prompts = [fmt.follow_up(items[i].prompt, template, current[i], report=rep) for i, rep in todo]
            texts = engine.generate(prompts, 1, SamplingParams(temperature=0, max_new_tokens=budget)).texts
            for (i, _), t in zip(todo, texts):
                current[i], refines[i] = t, refines[i] + 1
        for i in range(len(items)):
            history[i].append(current[i])
    records = [
        {"key": it.key, "answers": h, "refines": n, "accepted": a}
        for it, h, n, a in zip(items, history, refines, accepted)
    ]
    return current, records


def refine_summary(task: Task, items: Sequence[Item], records: list[dict], verifier: Any) -> dict[str, float]:
    """Gold-scored pass@1 after each round (round 0: the first answers), the acceptance rate and the mean
    number of refines; keys under ``refine/`` or, for the gold oracle, ``refine_oracle_upper_bound/``."""
    prefix = "refine_oracle_upper_bound" if verifier.oracle else "refine"
    n_rounds = len(records[0]["answers"]) if records else 0
    correct = [
        [is_correct(task.verify(r["answers"][k], it.answer, it.meta)) for it, r in zip(items, records)]
        for k in range(n_rounds)
    ]
    out = {f"{prefix}/pass@1_round{k}": sum(c) / len(c) for k, c in enumerate(correct)}
    out.update(
        {
            f"{prefix}/pass@1": out[f"{prefix}/pass@1_round{n_rounds - 1}"],
            f"{prefix}/accept_rate": sum(r["accepted"] for r in records) / len(records),
            f"{prefix}/mean_refines": sum(r["refines"] for r in records) / len(records),
        }
    )
    for r, ok in zip(records, correct[-1]):
        r["correct"] = ok
    return out
