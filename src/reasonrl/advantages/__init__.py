"""Advantage estimators: pure functions from (B, G) group rewards to (B, G) advantages.

Pick one by name with :func:`get_estimator` (names in :data:`ESTIMATORS`).
"""
from __future__ import annotations

from .estimators import ESTIMATORS, SCALES, dr_grpo, get_estimator, grpo, rloo

__all__ = ["grpo", "dr_grpo", "rloo", "SCALES", "ESTIMATORS", "get_estimator"]
