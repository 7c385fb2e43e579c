"""Advantage estimators: pure functions from (B, G) group rewards to (B, G) advantages, and
shapers that rescale or mask advantages afterwards (EDAS, negative-advantage veto).

Pick an estimator by name with :func:`get_estimator` (names in :data:`ESTIMATORS`).
"""
from __future__ import annotations

from .estimators import (
    ESTIMATORS,
    SCALES,
    dr_grpo,
    get_estimator,
    grpo,
    reinforce_pp,
    reinforce_pp_group,
    rloo,
)
from .shapers import NONE_POLICIES, VETO_TRIGGERS, edas, negative_veto_mask

__all__ = [
    "grpo",
    "dr_grpo",
    "rloo",
    "reinforce_pp",
    "reinforce_pp_group",
    "SCALES",
    "ESTIMATORS",
    "get_estimator",
    "edas",
    "negative_veto_mask",
    "NONE_POLICIES",
    "VETO_TRIGGERS",
]
