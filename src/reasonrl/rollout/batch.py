"""The data types of one step: the :class:`Batch` of groups the batch maker builds and the trainer
updates on, the :class:`Groups` a second round adds to it, and a part's :class:`Channel` on it.

They live here, below the recipe parts, so that the part protocol (:mod:`reasonrl.parts.protocol`)
can name them in its contexts; the operations on a batch (join, keep, statistics) stay in the loop
(:mod:`reasonrl.loop.stepdata`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from ..tasks.base import Item
from .base import Rollouts


@dataclass
class Channel:
    """A part's data on one batch (``batch.parts[key]``): ``rows`` holds (R, ...) tensors, one row per
    rollout row, cut with the batch's rows when a selector keeps some groups; ``values`` anything
    else (FEST's demonstration pairs)."""

    rows: dict[str, torch.Tensor] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)


@dataclass
class Groups:
    """Groups a second round adds to the batch: ``len(items)`` groups of G rows each (row-major as
    the first round's). ``preset``: advantages fixed by the round (NaN: the recipe's estimator);
    ``weight``: a per-row factor on the advantage (a loss weight, an importance weight)."""

    items: list[Item]
    ro: Rollouts
    rewards: torch.Tensor  # (B', G)
    correct: torch.Tensor  # (B', G)
    preset: torch.Tensor | None = None  # (B', G) NaN where the estimator decides
    weight: torch.Tensor | None = None  # (B' * G,)
    # what a round hands its own hooks: the values of its channel on the batch (FEST's demo pairs)
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class Batch:
    """One step's data, rows in rollout order (B*G)."""

    items: list[Item]
    ro: Rollouts
    rewards: torch.Tensor  # (B, G) total reward
    correct: torch.Tensor  # (B, G) raw task accuracy, 0/1
    advantages: torch.Tensor | None = None  # (R,) or (R, T)
    loss_mask: torch.Tensor | None = None  # (R, T) tokens the loss sees (completion mask, minus filtered rows)
    ref_logp: torch.Tensor | None = None  # (R, T)
    metrics: dict[str, float] = field(default_factory=dict)
    kinds: torch.Tensor | None = None  # (B,) 0: a first-round group, k: added by the recipe's k-th round
    preset: torch.Tensor | None = None  # (B, G) advantages a round fixed (NaN: the estimator's)
    weight: torch.Tensor | None = None  # (R,) factor on each row's advantage (round loss weights, IS weights)
    scores: torch.Tensor | None = None  # (B,) the selector's score of each group when it was generated (NaN: none)
    extra_labels: torch.Tensor | None = None  # (R, T) ids the policy's forward also scores (TGPO: the teacher's)
    # each reward the batch computed, by name, unweighted, per row (NaN: declined, or a round's added row)
    reward_terms: dict[str, torch.Tensor] = field(default_factory=dict)  # name -> (R,)
    learner_logp: torch.Tensor | None = None  # (R, T) the trainer's log-probs at sampling (issue 43: vLLM rollouts)
    parts: dict[str, Channel] = field(default_factory=dict)  # each part's own data on this batch, by part key

    def channel(self, key: str) -> Channel:
        """The part ``key``'s channel on this batch (made empty on first use)."""
        return self.parts.setdefault(key, Channel())

    def group_kinds(self) -> torch.Tensor:  # (B,)
        return torch.zeros(len(self.items), dtype=torch.long) if self.kinds is None else self.kinds
