"""Advantages of a batch in which some rows have no reward (a judge that timed out or did not parse, issue 41).

Such a row is neither right nor wrong: scoring it 0 would teach the policy that whatever made the judge fail
is as bad as a wrong answer. So it is left out: it gets no advantage (and the batch maker masks it out of the
loss), and its group's advantages come from the group's scored rows alone.

* :func:`fill_unscored`: the value an unscored row shows in the batch's reward tensor (its group's mean over
  the scored rows, 0 when none is), so statistics and filters that read the rewards see a neutral value.
* :func:`scored_advantages`: the estimator over the complete groups together (one call: any batch-wide
  statistic is taken over them) and over each incomplete group's scored rows alone (a (1, G') call). For the
  group-local estimators (grpo with ``scale`` group or none, dr_grpo, rloo, reinforce) this is exactly the
  estimator on the scored rows; for those with batch-wide statistics (``scale=batch``, reinforce_pp) an
  incomplete group's statistics are its own. A group-relative estimator gives a group with fewer than two
  scored rows nothing (it has nothing to compare).
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from .estimators import group_relative


def fill_unscored(rewards: Tensor, scored: Tensor) -> Tensor:
    """(B, G) rewards, (B, G) bool ``scored`` -> (B, G): unscored entries replaced by their group's mean
    over the scored ones (0 in a group with none)."""
    m = scored.to(rewards.dtype)  # (B, G)
    total, n = (rewards * m).sum(-1, keepdim=True), m.sum(-1, keepdim=True)  # (B, 1) each
    mean = torch.where(n > 0, total / n.clamp(min=1), torch.zeros_like(total))  # (B, 1)
    return torch.where(scored, rewards, mean.expand_as(rewards))


def scored_advantages(advantage: Callable[[Tensor], Tensor], rewards: Tensor, scored: Tensor) -> Tensor:
    """(B, G) rewards and (B, G) bool ``scored`` -> (B, G) advantages, 0 on unscored rows (module docs).
    ``advantage``: the recipe's estimator (an :class:`~reasonrl.parts.Advantage`, or any (B, G) -> (B, G))."""
    if bool(scored.all()):
        return advantage(rewards)
    complete = scored.all(-1)  # (B,)
    out = torch.zeros(rewards.shape, dtype=rewards.dtype if rewards.is_floating_point() else torch.float32)
    if bool(complete.any()):
        out[complete] = _two_d(advantage(rewards[complete])).to(out.dtype)
    name = getattr(advantage, "estimator", None)
    relative = group_relative(name) if isinstance(name, str) else True
    for g in (~complete).nonzero().squeeze(-1).tolist():
        rows = scored[g].nonzero().squeeze(-1)  # (G',)
        if len(rows) >= 2 or (len(rows) == 1 and not relative):
            out[g, rows] = _two_d(advantage(rewards[g, rows][None]))[0].to(out.dtype)
    return out


def _two_d(adv: Tensor) -> Tensor:
    if adv.dim() != 2:
        raise ValueError(f"rows without a reward need an estimator with (B, G) advantages, got {tuple(adv.shape)}")
    return adv
