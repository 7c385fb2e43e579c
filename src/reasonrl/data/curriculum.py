"""SFT curricula (layer 2): pure orderings of demonstrations from their per-example scores.

SU-01 (arXiv 2605.13301; shared/specs/distill-and-data.md section 13) orders its SFT trajectories
by *descending* perplexity under the starting backbone, so the demonstrations the model finds least
likely come first, and does not shuffle. The scores come from one no-grad forward per example
(:func:`reasonrl.loop.sft.demo_nll`); the ordering itself is here, free of models.
"""

from __future__ import annotations

import math
from typing import Sequence

CURRICULA = ("none", "reverse_ppl")


def perplexities(mean_nll: Sequence[float]) -> list[float]:
    """``PPL(y|x) = exp(-(1/|y|) sum_t log p(y_t|x, y_<t))`` from each example's per-token mean NLL."""
    return [math.exp(v) for v in mean_nll]


def reverse_ppl_order(ppl: Sequence[float]) -> list[int]:
    """Example indices by descending perplexity; equal perplexities keep their original order
    (a stable sort: the order is a function of the scores alone, never of a shuffle)."""
    for i, v in enumerate(ppl):
        if math.isnan(v):
            raise ValueError(f"perplexity of example {i} is NaN: the scoring forward produced a non-finite loss")
    return sorted(range(len(ppl)), key=lambda i: -ppl[i])


def check_curriculum(name: str) -> str:
    if name not in CURRICULA:
        raise ValueError(f"unknown curriculum {name!r}; valid: {', '.join(CURRICULA)}")
    return name
