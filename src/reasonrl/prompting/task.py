"""The prompter's task: contexts of a worker task, scored by a frozen worker (prompt-policy RL, spec
envs-selfplay-eval.md 5).

An item is one context c (a family of the worker task's instances: the whole task, or the instances
sharing some ``meta`` fields) with M instances; the prompter writes a prompt for c; ``verify`` is the
worker's mean success on the M instances with that prompt (R(p)). The test split gives one held-out
instance per item under the history-free prompter prompt, so the trainer's greedy evaluation is the
worker's held-out accuracy with the one-shot prompt.

What the prompter writes becomes the worker's prompt through a renderer [inferred]:
``text`` (the completion's first line, verbatim: a capable prompter) or ``hints`` (a fragment
vocabulary for a small prompter: the digits 1-9 of its first line pick the instance's task hints by
number, e.g. arithmetic's "column 1 carries 1"; no digit, no prompt).
"""

from __future__ import annotations

import random
from typing import Any, Iterator, Sequence

from ..errors import UserError
from ..seeds import stable_seed
from ..tasks import Item
from ..tasks.guidance import hints as task_hints
from .buffer import Experience, format_history
from .workers import Worker, WorkerCalls

__all__ = ["RENDERERS", "PromptTask", "context_of", "prompt_key", "prompter_prompt", "render"]

RENDERERS = ("text", "hints")
PROMPTER_TEMPLATE = "task: {context}\n{history}prompt:\n"  # [inferred]; {history} is empty in one-shot mode


def context_of(item: Item, fields: str) -> str:
    """The context of a worker instance: ``task`` (one context) or ``meta:f1,f2`` (its meta's values)."""
    if fields == "task":
        return "all"
    names = fields.removeprefix("meta:").split(",")
    missing = [n for n in names if n not in item.meta]
    if missing:
        raise UserError(f"prompt_policy.contexts={fields!r}: instance {item.key!r} has no meta field {missing[0]!r}")
    return " ".join(f"{n}={item.meta[n]}" for n in names)


def prompter_prompt(context: str, history: Sequence[Experience]) -> str:
    block = f"tried:\n{format_history(history)}" if history else ""
    return PROMPTER_TEMPLATE.format(context=context, history=block)


def first_line(text: str) -> str:
    return text.strip().split("\n")[0].strip() if text.strip() else ""


def _picks(text: str, max_fragments: int) -> list[int]:
    """The hint numbers the ``hints`` renderer reads: the first line's digits 1-9, each once, in order."""
    return list(dict.fromkeys(int(c) for c in first_line(text) if c in "123456789"))[:max_fragments]


def prompt_key(kind: str, text: str, max_fragments: int = 2) -> str:
    """The prompt ``text`` stands for, whatever the instance: the first line (``text``) or the hint numbers
    picked (``hints``); texts with one key give the worker the same prompt (the buffer pools their R)."""
    if kind == "text":
        return first_line(text)
    if kind != "hints":
        raise ValueError(f"unknown renderer {kind!r}; valid: {', '.join(RENDERERS)}")
    return "hints:" + ",".join(map(str, _picks(text, max_fragments)))


def render(kind: str, text: str, task: Any, instance: Item, max_fragments: int = 2) -> str:
    """The worker's prompt for ``instance`` from the prompter's ``text`` (see the module)."""
    if kind == "text":
        return first_line(text)
    if kind != "hints":
        raise ValueError(f"unknown renderer {kind!r}; valid: {', '.join(RENDERERS)}")
    picks = _picks(text, max_fragments)
    if not picks:
        return ""
    hs = task_hints(task, instance)
    return "\n".join(hs[k - 1] for k in picks if k <= len(hs))


class PromptTask:
    """The worker ``task`` seen by the prompter (``name`` ``prompt_policy``). ``calls`` counts worker calls."""

    name = "prompt_policy"

    def __init__(
        self,
        task: Any,
        worker: Worker,
        *,
        contexts: str = "task",
        instances: int = 4,
        renderer: str = "hints",
        max_fragments: int = 2,
        pool: int = 256,
        budget: int = 0,
        seed: int = 0,
    ):
        self.task, self.worker, self.fields, self.m = task, worker, contexts, instances
        self.renderer, self.max_fragments, self.calls = renderer, max_fragments, WorkerCalls(budget)
        self.pools = {split: self._pool(split, pool, seed) for split in ("train", "test")}
        self.contexts = sorted(self.pools["train"])
        self._results: dict[tuple[str, str], tuple[float, str]] = {}

    @property
    def max_new_tokens(self) -> int:
        return 24  # a prompt line (or a few fragment numbers)

    def _pool(self, split: str, n: int, seed: int) -> dict[str, list[Item]]:
        """Up to ``n`` distinct instances of a split (from its first 20 n draws), by context (seeded; the run's)."""
        out: dict[str, list[Item]] = {}
        seen: set[str] = set()
        for _, it in zip(range(20 * n), self.task.iter_items(split, stable_seed(seed, "prompt-pool"))):
            if it.key not in seen:
                seen.add(it.key)
                out.setdefault(context_of(it, self.fields), []).append(it)
            if len(seen) == n:
                break
        if not out:
            raise UserError(f"prompt_policy: task {self.task.name!r} gave no {split} instances")
        return out

    def instances(self, context: str, key: Any, m: int | None = None) -> list[Item]:
        """``m`` (default M) train instances of ``context`` drawn without replacement, seeded by ``key``."""
        pool = self.pools["train"][context]
        return random.Random(str(key)).sample(pool, min(m or self.m, len(pool)))

    def item(self, context: str, history: Sequence[Experience], instances: list[Item], key: str) -> Item:
        return Item(
            key=key,
            prompt=prompter_prompt(context, history),
            answer="",
            meta={"context": context, "instances": instances, "history": len(history)},
        )

    def iter_items(self, split: str, seed: int) -> Iterator[Item]:
        """Train: history-free items of M instances each, contexts in turn; test: one held-out instance each."""
        rng = random.Random(f"prompt-policy:{seed}:{split}")
        while True:
            for c in self.contexts:
                if split == "test":
                    for inst in self.pools["test"].get(c, []):
                        yield self.item(c, [], [inst], f"{c}|{inst.key}")
                    continue
                yield self.item(c, [], self.instances(c, rng.random()), f"{c}|{rng.random()}")
            if split == "test":
                return

    def render(self, text: str, instance: Item) -> str:
        return render(self.renderer, text, self.task, instance, self.max_fragments)

    def prompt_key(self, text: str) -> str:
        return prompt_key(self.renderer, text, self.max_fragments)

    def prepare(self, completions: Sequence[str], metas: Sequence[dict]) -> None:
        """Every (prompt, instance) the batch needs, run by the worker in one call (each counted)."""
        pairs = [(c, inst) for c, m in zip(completions, metas) for inst in m["instances"]]
        results = self.calls.run(self.worker, [(self.render(c, inst), inst) for c, inst in pairs])
        self._results = {(c, inst.key): r for (c, inst), r in zip(pairs, results)}

    def results(self, completion: str, instances: Sequence[Item]) -> list[tuple[float, str]]:
        """(success, trace) of each instance with ``completion``'s prompt (run now if ``prepare`` did not)."""
        missing = [inst for inst in instances if (completion, inst.key) not in self._results]
        if missing:
            got = self.calls.run(self.worker, [(self.render(completion, inst), inst) for inst in missing])
            self._results.update({(completion, inst.key): r for inst, r in zip(missing, got)})
        return [self._results[(completion, inst.key)] for inst in instances]

    def verify(self, completion: str, answer: str, meta: dict[str, Any]) -> float:
        """R(p): the worker's mean success over the item's instances."""
        res = self.results(completion, meta["instances"])
        return sum(s for s, _ in res) / len(res)

    def extract_answer(self, completion: str) -> str | None:
        return first_line(completion) or None
