"""The contrastive experience buffer of prompt-policy RL (spec envs-selfplay-eval.md 5 (b), (c)).

An entry is (context c, prompt p, R(p), critique, per-instance outcomes): R(p) the worker's mean success
with p over M instances. The prompter is conditioned on a history H of the context's k best and k worst
entries, shown with their scores and critiques, best first (the paper's "contrastive experience
buffer"; the exact form [inferred]). ``best(c)`` is the best prompt found so far for c: what the
distillation step teaches the history-free prompter. It is kept even after its entry leaves the buffer.

The buffer is plain data: ``state_dict`` / ``load_state_dict`` give and take lists of dicts, so a part's
checkpointed state holds it exactly.
"""
from __future__ import annotations

import random
from dataclasses import asdict, dataclass
from typing import Sequence

__all__ = ["Experience", "ExperienceBuffer", "format_history"]


@dataclass(frozen=True)
class Experience:
    context: str
    prompt: str  # what the prompter wrote
    reward: float  # R(p): mean worker success over the instances
    critique: str = ""
    outcomes: tuple[float, ...] = ()  # per instance, in order
    order: int = 0  # insertion index within its context (recency)


class ExperienceBuffer:
    """At most ``capacity`` entries per context, the oldest dropped first; the best entry ever per context."""

    def __init__(self, capacity: int):
        if capacity < 1:
            raise ValueError(f"ExperienceBuffer needs capacity >= 1, got {capacity}")
        self.capacity = capacity
        self._entries: dict[str, list[Experience]] = {}
        self._best: dict[str, Experience] = {}
        self._added: dict[str, int] = {}

    def add(self, context: str, prompt: str, reward: float, critique: str = "",
            outcomes: Sequence[float] = ()) -> Experience:
        n = self._added.get(context, 0)
        e = Experience(context, prompt, float(reward), critique, tuple(float(o) for o in outcomes), n)
        self._added[context] = n + 1
        entries = self._entries.setdefault(context, [])
        entries.append(e)
        del entries[:-self.capacity]
        if context not in self._best or e.reward > self._best[context].reward:  # the earliest wins a tie
            self._best[context] = e
        return e

    def entries(self, context: str) -> list[Experience]:
        return list(self._entries.get(context, ()))

    def best(self, context: str) -> Experience | None:
        """The highest-reward entry ever added for ``context`` (the first of equals), or None."""
        return self._best.get(context)

    def contrastive_sample(self, context: str, k_top: int, k_bottom: int, rng: random.Random) -> list[Experience]:
        """The ``k_top`` best and the ``k_bottom`` worst entries of ``context`` (disjoint; all of them when
        there are fewer), sorted by reward, best first. Equal rewards are ordered by ``rng``: seeded, and
        the same rewards do not always show the same prompts."""
        pool = self.entries(context)
        rng.shuffle(pool)
        pool.sort(key=lambda e: -e.reward)  # stable: ties keep the shuffled order
        if len(pool) <= k_top + k_bottom:
            return pool
        return pool[:k_top] + (pool[len(pool) - k_bottom:] if k_bottom else [])

    def __len__(self) -> int:
        return sum(len(v) for v in self._entries.values())

    def state_dict(self) -> dict:
        return {"capacity": self.capacity, "added": dict(self._added),
                "entries": [asdict(e) for v in self._entries.values() for e in v],
                "best": [asdict(e) for e in self._best.values()]}

    @classmethod
    def from_state(cls, state: dict) -> "ExperienceBuffer":
        buf = cls(state["capacity"])
        buf._added = dict(state["added"])
        for d in state["entries"]:
            buf._entries.setdefault(d["context"], []).append(Experience(**{**d, "outcomes": tuple(d["outcomes"])}))
        buf._best = {d["context"]: Experience(**{**d, "outcomes": tuple(d["outcomes"])}) for d in state["best"]}
        return buf


def format_history(history: Sequence[Experience], prompt_chars: int = 24, critique_chars: int = 40) -> str:
    """H as the prompter reads it: one line per entry, ``score: prompt | critique`` (each cut to its budget)."""
    lines = []
    for e in history:
        line = f"{e.reward:.2f}: {e.prompt.strip()[:prompt_chars]}"
        if e.critique:
            line += f" | {e.critique[:critique_chars]}"
        lines.append(line)
    return "".join(f"{ln}\n" for ln in lines)
