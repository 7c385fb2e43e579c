"""Population-based training's replacement step (PopuLoRA; spec envs-selfplay-eval.md 4 (b)).

Every K steps, within each sub-population (teachers, students) separately: rank the members by their
conservative skill mu - 3 sigma; the bottom floor(frac * N) are replaced, each by an offspring of the
top survivors made with one of the same-rank operators (:mod:`.operators`). The offspring inherits
its first parent's mu, with sigma raised to at least ``offspring_sigma`` (its skill is uncertain
again), and starts with a fresh optimiser state (the part resets it). The paper says "replacement
step of a population-based training loop"; the schedule, the fraction, the parent pool and the
operator draw are [inferred].

Pure logic over names and ratings: the part applies the plan to the adapters.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from .operators import LoRAFactors, crossover_modulewise, crossover_svd, mutate_gaussian, mutate_spectral
from .ratings import Rating, conservative

__all__ = [
    "CROSSOVERS",
    "MUTATIONS",
    "OPERATORS",
    "Replacement",
    "make_offspring",
    "offspring_rating",
    "pbt_plan",
    "ranked",
]

MUTATIONS = ("gaussian", "spectral")
CROSSOVERS = ("modulewise", "svd")
OPERATORS = MUTATIONS + CROSSOVERS


@dataclass(frozen=True)
class Replacement:
    """Member ``child`` is overwritten by ``operator`` applied to ``parents`` (best first; two for a crossover)."""

    child: str
    parents: tuple[str, ...]
    operator: str


def ranked(ratings: Mapping[str, Rating]) -> list[str]:
    """Member names, best conservative skill first (ties: by name, so the order never depends on a dict's)."""
    return sorted(ratings, key=lambda n: (-conservative(ratings[n]), n))


def pbt_plan(
    ratings: Mapping[str, Rating], frac: float, operators: Sequence[str], rng: np.random.Generator
) -> list[Replacement]:
    """The replacements of one sub-population: the bottom floor(frac * N) members (worst first), each from
    parents drawn among the top max(2, n) survivors. A crossover needs two parents: with one survivor only
    the mutations among ``operators`` are drawn (none there: no replacement is possible, an error)."""
    bad = [op for op in operators if op not in OPERATORS]
    if bad or not operators:
        raise ValueError(f"unknown PBT operator(s) {bad}; valid: {', '.join(OPERATORS)}")
    order = ranked(ratings)
    n = min(int(math.floor(frac * len(order) + 1e-9)), len(order) - 1)  # at least one survivor
    if n <= 0:
        return []
    survivors, bottom = order[:-n], order[-n:][::-1]
    pool = survivors[: max(2, n)]
    usable = [op for op in operators if op in MUTATIONS or len(pool) >= 2]
    if not usable:
        raise ValueError(f"PBT: {len(pool)} survivor(s) cannot make a crossover and no mutation is allowed")
    plan = []
    for child in bottom:
        op = usable[int(rng.integers(len(usable)))]
        if op in CROSSOVERS:
            i, j = sorted(rng.choice(len(pool), size=2, replace=False).tolist())
            parents = (pool[i], pool[j])
        else:
            parents = (pool[int(rng.integers(len(pool)))],)
        plan.append(Replacement(child=child, parents=parents, operator=op))
    return plan


def offspring_rating(parent: Rating, offspring_sigma: float) -> Rating:
    """The parent's mu, its sigma raised to at least ``offspring_sigma`` (never lowered)."""
    return (parent[0], max(parent[1], offspring_sigma))


def make_offspring(
    op: str, parents: Sequence[LoRAFactors], rng: np.random.Generator, *, sigma: float, interp: float
) -> dict:
    """Apply ``op`` to the parents' factors: ``gaussian`` / ``spectral`` (strength ``sigma``) on the first,
    ``modulewise`` / ``svd`` (weight ``interp`` on the first parent) on both."""
    if op == "gaussian":
        return mutate_gaussian(parents[0], sigma, rng)
    if op == "spectral":
        return mutate_spectral(parents[0], sigma, rng)
    if op == "modulewise":
        return crossover_modulewise(parents[0], parents[1], rng)[0]
    if op == "svd":
        return crossover_svd(parents[0], parents[1], interp)
    raise ValueError(f"unknown PBT operator {op!r}; valid: {', '.join(OPERATORS)}")
