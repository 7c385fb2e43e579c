"""Advantage estimators: pure functions from (B, G) group rewards to (B, G) advantages, and
shapers that rescale or mask advantages afterwards (EDAS, negative-advantage veto), and the
sub-group / second-round maths of NudgeRL, CIPO and STRIDE.

Pick an estimator by name with :func:`get_estimator` (names in :data:`ESTIMATORS`).
"""

from __future__ import annotations

from .estimators import (
    ESTIMATORS,
    SCALES,
    dr_grpo,
    get_estimator,
    group_relative,
    grpo,
    reinforce_pp,
    reinforce_pp_group,
    rloo,
)
from .shapers import NONE_POLICIES, VETO_TRIGGERS, edas, negative_veto_mask
from .subgroups import (
    VERDICTS,
    cipo_pick_failure,
    cipo_reward,
    cipo_rewards,
    cipo_select,
    harmless_advantage,
    nudge_advantages,
    nudge_contexts,
    nudge_dropout_counts,
    parse_first_error,
    parse_verdict,
    verifier_reward,
)

__all__ = [
    "grpo",
    "dr_grpo",
    "rloo",
    "reinforce_pp",
    "reinforce_pp_group",
    "SCALES",
    "ESTIMATORS",
    "get_estimator",
    "group_relative",
    "edas",
    "negative_veto_mask",
    "NONE_POLICIES",
    "VETO_TRIGGERS",
    "nudge_advantages",
    "nudge_dropout_counts",
    "nudge_contexts",
    "cipo_select",
    "cipo_pick_failure",
    "cipo_reward",
    "cipo_rewards",
    "parse_first_error",
    "parse_verdict",
    "VERDICTS",
    "harmless_advantage",
    "verifier_reward",
]
