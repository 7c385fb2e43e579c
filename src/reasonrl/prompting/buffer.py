"""The contrastive experience buffer of prompt-policy RL (spec envs-selfplay-eval.md 5 (b), (c)).

An entry is (context c, prompt p, R(p), critique, per-instance outcomes): R(p) the worker's mean success
with p over M instances. The prompter is conditioned on a history H of the context's k best and k worst
entries, shown with their scores and critiques, best first (the paper's "contrastive experience
buffer"; the exact form [inferred]). ``best(c)`` is the best prompt found so far for c: what the
distillation step (spec 5 (b) step 6) teaches the history-free prompter.

"Best" by what (``target``, [inferred]; issue 41): R(p) is a mean over M sampled instances, so a single
evaluation is noisy. ``mean`` (the default) estimates every prompt by the running mean of all its
evaluations: each time the prompter writes it again (as it does once the target is distilled into it) the
prompt is re-evaluated on fresh instances and a lucky first score is corrected. Evaluations pool by the
prompt's ``key`` (what the worker reads: two texts that render the same prompt are one prompt; default the
text itself); the target's text is the first one written under its key. The target moves only to a prompt
whose estimate is strictly higher than the current target's (after each evaluation; among several, the
highest, the first written of equals): a tie keeps the target, so equally good prompts never trade places
and, for a worker whose R is exact, the target is the first maximum as before. The estimates kept per
context are bounded: every key with an entry in the buffer plus the target (``capacity + 1``; the least
recently evaluated other key is dropped). ``first_max`` is the target before issue 41: the first entry with
the highest single R, never re-evaluated (the earliest wins a tie), kept even after its entry leaves the buffer.

The buffer is plain data: ``state_dict`` / ``from_state`` give and take lists of dicts, so a part's
checkpointed state holds it exactly (entries, the estimates and the first maximum).
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass
from typing import Sequence

__all__ = ["Experience", "ExperienceBuffer", "TARGETS", "Target", "format_history"]

TARGETS = ("mean", "first_max")


@dataclass(frozen=True)
class Experience:
    context: str
    prompt: str  # what the prompter wrote
    reward: float  # R(p): mean worker success over the instances
    critique: str = ""
    outcomes: tuple[float, ...] = ()  # per instance, in order
    order: int = 0  # insertion index within its context (recency)


@dataclass(frozen=True)
class Target:
    """The distillation target of a context: its prompt text, its estimate and how many evaluations made it."""

    context: str
    prompt: str
    reward: float
    evaluations: int


class ExperienceBuffer:
    """At most ``capacity`` entries per context, the oldest dropped first; per context the running estimate of
    each prompt and the first maximum, for ``best`` under ``target`` (see the module)."""

    def __init__(self, capacity: int, target: str = "mean"):
        if capacity < 1:
            raise ValueError(f"ExperienceBuffer needs capacity >= 1, got {capacity}")
        if target not in TARGETS:
            raise ValueError(f"ExperienceBuffer target is one of {TARGETS}, got {target!r}")
        self.capacity, self.target = capacity, target
        self._entries: dict[str, list[Experience]] = {}
        self._best: dict[str, Experience] = {}  # the first maximum (target first_max)
        self._added: dict[str, int] = {}
        # context -> key -> {"prompt": first text, "total": sum of R, "n": evaluations, "first", "last": orders}
        self._stats: dict[str, dict[str, dict]] = {}
        self._target: dict[str, str] = {}  # context -> the key of its target (target mean)

    def add(
        self,
        context: str,
        prompt: str,
        reward: float,
        critique: str = "",
        outcomes: Sequence[float] = (),
        key: str | None = None,
    ) -> Experience:
        """One evaluation of ``prompt`` (``key``: the prompt as the worker reads it; default the text)."""
        n = self._added.get(context, 0)
        e = Experience(context, prompt, float(reward), critique, tuple(float(o) for o in outcomes), n)
        self._added[context] = n + 1
        entries = self._entries.setdefault(context, [])
        entries.append(e)
        del entries[: -self.capacity]
        if context not in self._best or e.reward > self._best[context].reward:  # the earliest wins a tie
            self._best[context] = e
        stats = self._stats.setdefault(context, {})
        s = stats.setdefault(prompt if key is None else key, {"prompt": prompt, "total": 0.0, "n": 0, "first": n})
        s["total"], s["n"], s["last"] = s["total"] + e.reward, s["n"] + 1, n
        mean = lambda k: stats[k]["total"] / stats[k]["n"]  # noqa: E731
        top = max(stats, key=lambda k: (mean(k), -stats[k]["first"]))  # the highest; of equals the first written
        if context not in self._target or mean(top) > mean(self._target[context]):  # strictly better: a tie keeps it
            self._target[context] = top
        if len(stats) > self.capacity + 1:  # the keys of the buffer's entries and the target stay (module)
            keep = self._target[context]
            del stats[min((k for k in stats if k != keep), key=lambda k: stats[k]["last"])]
        return e

    def entries(self, context: str) -> list[Experience]:
        return list(self._entries.get(context, ()))

    def best(self, context: str) -> Target | None:
        """The distillation target of ``context`` under ``target`` (see the module), or None before any entry."""
        if context not in self._added:
            return None
        if self.target == "first_max":
            e = self._best[context]
            return Target(context, e.prompt, e.reward, 1)
        s = self._stats[context][self._target[context]]
        return Target(context, s["prompt"], s["total"] / s["n"], s["n"])

    def contrastive_sample(self, context: str, k_top: int, k_bottom: int, rng: random.Random) -> list[Experience]:
        """The ``k_top`` best and the ``k_bottom`` worst entries of ``context`` (disjoint; all of them when
        there are fewer), sorted by reward, best first. Equal rewards are ordered by ``rng``: seeded, and
        the same rewards do not always show the same prompts."""
        pool = self.entries(context)
        rng.shuffle(pool)
        pool.sort(key=lambda e: -e.reward)  # stable: ties keep the shuffled order
        if len(pool) <= k_top + k_bottom:
            return pool
        return pool[:k_top] + (pool[len(pool) - k_bottom :] if k_bottom else [])

    def __len__(self) -> int:
        return sum(len(v) for v in self._entries.values())

    def state_dict(self) -> dict:
        return {
            "capacity": self.capacity,
            "target": self.target,
            "added": dict(self._added),
            "entries": [asdict(e) for v in self._entries.values() for e in v],
            "best": [asdict(e) for e in self._best.values()],
            "stats": [{"context": c, "key": k, **s} for c, v in self._stats.items() for k, s in v.items()],
            "targets": dict(self._target),
        }

    @classmethod
    def from_state(cls, state: dict) -> "ExperienceBuffer":
        """A buffer from ``state_dict``; one saved before issue 41 (no ``target``) ranked by its first maximum."""
        buf = cls(state["capacity"], state.get("target", "first_max"))
        buf._added = dict(state["added"])
        for d in state["entries"]:
            buf._entries.setdefault(d["context"], []).append(Experience(**{**d, "outcomes": tuple(d["outcomes"])}))
        buf._best = {d["context"]: Experience(**{**d, "outcomes": tuple(d["outcomes"])}) for d in state["best"]}
        for d in state.get("stats", ()):
            buf._stats.setdefault(d["context"], {})[d["key"]] = {
                k: v for k, v in d.items() if k not in ("context", "key")
            }
        buf._target = dict(state.get("targets", {}))
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
