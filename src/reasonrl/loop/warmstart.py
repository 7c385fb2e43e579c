"""A warm start that teaches a small model to read the self-teacher contexts (``pretrain --contexts``).

The self-teacher recipes (SSOPD, EGRSD, NudgeRL, CIPO, STRIDE) put something in the policy's
context that the plain prompt lacks: a correct solution, a hint, a failed attempt, a critique
followed by the steps before the first error. A model warm-started on plain prompts alone has
never seen such a context. The shipped tiny reasoner gets 0-3% greedy accuracy with any of them,
against about 50% without one, so the "teacher" would be worse than the student. This wrapper
mixes these contexts into the demonstrations of a warm start. Each context is written with the
default template of the recipe part that uses it, so the contexts the model learns are the ones
the recipes show it. The target is always the task's own demonstration (for a redirect, the part
after the kept prefix).
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any, Iterator

from ..errors import UserError
from ..parts import EGRSD, SSOPD, Correction, HintSampling, Redirect
from ..parts.correction import correction_prompt
from ..seeds import stable_seed
from ..tasks import Item, TaskWrapper
from ..tasks import guidance as g

CONTEXTS = ("solution", "hint", "correction", "redirect")


class ContextMix(TaskWrapper):
    """``task`` whose *train* items carry, with probability ``rate``, one of ``kinds`` of context
    (chosen uniformly; keyed by the item's key and ``seed``, so a mix is reproducible). Held-out
    items stay plain, so the warm start's evaluation is the usual plain pass@1."""

    def __init__(self, task: Any, rate: float = 0.5, kinds: tuple[str, ...] = CONTEXTS, seed: int = 0):
        unknown = sorted(set(kinds) - set(CONTEXTS))
        if unknown or not kinds or not 0.0 <= rate <= 1.0:
            raise ValueError(f"ContextMix needs kinds from {CONTEXTS} and 0 <= rate <= 1; got {kinds}, {rate}")
        super().__init__(task)
        self.rate, self.kinds, self.seed = rate, tuple(kinds), seed

    def iter_items(self, split: str, seed: int) -> Iterator[Item]:
        for item in self.task.iter_items(split, seed):
            rng = random.Random(stable_seed(self.seed, "context", item.key))
            if split != "train" or rng.random() >= self.rate:
                yield item
            else:
                yield with_context(self.task, item, rng.choice(self.kinds), rng)


def context_mix(task: Any, contexts: str, rate: float, seed: int) -> ContextMix:
    """``pretrain --contexts solution,hint,... --context-rate R``: the task with the mix (``all``: every kind)."""
    kinds = CONTEXTS if contexts == "all" else tuple(k.strip() for k in contexts.split(","))
    try:
        return ContextMix(task, rate=rate, kinds=kinds, seed=seed)
    except ValueError as err:
        raise UserError(f"--contexts {contexts!r} / --context-rate {rate}: {err}") from err


def with_context(task: Any, item: Item, kind: str, rng: random.Random) -> Item:
    """``item`` with a ``kind`` context in its prompt, written as the recipe parts write it."""
    demo, x = item.demo, item.prompt
    if demo is None:
        raise ValueError(f"item {item.key!r} has no demonstration to warm-start on")
    if kind == "solution":  # SSOPD's and EGRSD's teacher contexts, half each
        template = rng.choice([SSOPD().template, EGRSD().template])
        return dataclasses.replace(item, prompt=template.format(prompt=x, solution=demo))
    if kind == "hint":  # NudgeRL's hinted prompt
        hint = rng.choice(g.hints(task, item))
        return dataclasses.replace(item, prompt=HintSampling().template.format(hint=hint, prompt=x))
    wrong = g.corrupt_digit(task, demo, rng)
    if kind == "correction":  # CIPO: fix a failed attempt (here, the demonstration with one digit wrong)
        return dataclasses.replace(item, prompt=correction_prompt(Correction().template, x, wrong))
    # STRIDE: the critique of the wrong attempt, then the steps before its first error, then the rest
    crit = g.critique(task, item, wrong)
    prefix, cut = g.prefix_before_step(task, wrong, crit.first_error)
    if demo[:cut] != prefix:  # the corruption lies at or after the first error, so the kept steps are right
        raise AssertionError(f"kept prefix {prefix!r} is not a prefix of the demonstration {demo!r}")
    return dataclasses.replace(
        item, prompt=x + Redirect().template.format(critique=crit.text) + prefix, demo=demo[cut:]
    )
