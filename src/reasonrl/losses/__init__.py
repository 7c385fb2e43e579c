"""Losses: the clipped policy loss (ratio level x trust region x aggregation), the KL penalty to a
reference policy and the entropy bonus. Every loss returns ``(loss, metrics)``.
"""
from __future__ import annotations

from .aggregate import AGG_MODES, aggregate, masked_mean
from .kl import KL_ESTIMATORS, entropy_bonus, kl_loss, kl_penalty
from .policy import RATIO_LEVELS, policy_loss

__all__ = [
    "AGG_MODES",
    "aggregate",
    "masked_mean",
    "RATIO_LEVELS",
    "policy_loss",
    "KL_ESTIMATORS",
    "kl_penalty",
    "kl_loss",
    "entropy_bonus",
]
