"""Generation split over data-parallel ranks behind the engine's own interface.

:class:`ShardedEngine` wraps any engine (in-process or Ray): a call whose rows are keyed (one seed
per prompt) or greedy deals the prompts to ranks (prompt ``i`` to rank ``i % world``), each rank
generates its share, and every rank receives the whole result in the original order. Keyed rows
do not depend on which rows share a batch, so the result is the single process's. A call with a
stateful generator (beam branching, steering) cannot be split that way: every rank generates
everything from its identical generator state (no speed-up, the same rollouts).
"""
from __future__ import annotations

from typing import Any, Sequence

import torch

from ..rollout import Rollouts, SamplingParams, concat_rollouts, select_rows
from .group import Single


class ShardedEngine:
    def __init__(self, engine: Any, group: Single):
        self.inner, self.group = engine, group

    def __getattr__(self, name: str) -> Any:  # model, tok, device, max_rows, ... of the wrapped engine
        return getattr(self.inner, name)

    def generate(self, prompts: Sequence[str], n: int, sampling: SamplingParams,
                 generator: torch.Generator | None = None, seeds: Sequence[int] | None = None) -> Rollouts:
        prompts = list(prompts)
        splittable = seeds is not None or sampling.temperature == 0
        if self.group.world == 1 or not splittable:
            return self.inner.generate(prompts, n, sampling, generator=generator, seeds=seeds)
        W, r = self.group.world, self.group.rank
        mine = list(range(r, len(prompts), W))
        part = self.inner.generate([prompts[i] for i in mine], n, sampling, generator=generator,
                                   seeds=None if seeds is None else [seeds[i] for i in mine]) if mine else None
        parts = self.group.gather(part)
        return reorder(parts, len(prompts), n, self.inner.tok.pad_token_id)


def reorder(parts: list[Rollouts | None], n_prompts: int, n: int, pad_id: int) -> Rollouts:
    """Rank-dealt parts (rank ``w`` holds prompts ``w, w + W, ...``) -> one Rollouts in prompt order."""
    W = len(parts)
    present = [p for p in parts if p is not None]
    joined = concat_rollouts(present, pad_id)
    start, offset = {}, 0
    for w, p in enumerate(parts):
        start[w] = offset
        offset += 0 if p is None else len(p.texts)
    rows = [start[i % W] + (i // W) * n + j for i in range(n_prompts) for j in range(n)]
    out = select_rows(joined, rows)
    out.extras = dict(present[0].extras) if present else {}
    return out
