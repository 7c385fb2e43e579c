"""Advantages normalised within buckets of rows and never across them.

AZR's Task-Relative REINFORCE++ (TRR++, arXiv 2505.03335; code: ``adv_estimator=reinforce_plus_plus``
computed per problem-type batch before the batches are concatenated) keeps one baseline and one scale
per (role, task type): six buckets, since a proposer's reward and a deduction solver's reward live
on different scales. EvoEnv and PopuLoRA reuse it per role (and per adapter).
"""

from __future__ import annotations

from typing import Hashable, Sequence

import torch
from torch import Tensor

__all__ = ["role_task_advantages"]


def role_task_advantages(rewards: Tensor, keys: Sequence[Hashable], eps: float = 1e-6, unbiased: bool = True) -> Tensor:
    """REINFORCE++ inside each bucket: ``(r - mean_b) / (std_b + eps)`` for the rows of bucket b.

    rewards: (N,) one reward per row; keys: N bucket keys (any hashable, e.g. ``("propose", "deduction")``).
    Returns (N,). A bucket whose rewards are all equal (a single row included) gets exactly 0: it
    holds no signal about which of its rows was better. ``unbiased``: the N-1 std, as ``torch.std``.
    """
    if rewards.dim() != 1 or len(keys) != len(rewards):
        raise ValueError(
            f"role_task_advantages needs (N,) rewards and N keys, got {tuple(rewards.shape)} and {len(keys)} keys"
        )
    out = torch.zeros_like(rewards, dtype=torch.float32)  # (N,)
    for key in dict.fromkeys(keys):
        rows = torch.tensor([k == key for k in keys])  # (N,) bool
        r = rewards[rows].float()  # (n_b,)
        if bool(r.max() == r.min()):
            continue  # constant bucket: 0
        out[rows] = (r - r.mean()) / (r.std(correction=1 if unbiased else 0) + eps)
    return out
