"""Losses: the clipped policy loss (ratio level x trust region x aggregation), the KL penalty to a
reference policy, SAGE's shaped-anchor KL, the entropy bonus, token divergences for distillation, and
CorR-PO's entropy/gradient correlation (a reward regulariser), and the self-teacher token weights of
SSOPD / EGRSD. Every loss returns ``(loss, metrics)``.
"""

from __future__ import annotations

from .aggregate import AGG_MODES, aggregate, masked_mean
from .anchors import (
    SAGE_GUIDES,
    SURPRISAL_NORMS,
    branch_guide,
    cyclic_cosine,
    random_guide,
    sage_guide,
    sage_kl_loss,
    shaped_kl,
    surprisal_weights,
    token_guide,
)
from .corr import (
    CORR_METHODS,
    CORR_SIGNS,
    corr_po_bonus,
    defined_rows,
    hidden_grad_norm,
    inversion_score,
    logit_grad_norm,
    pearson_per_row,
    spearman_per_row,
    token_stats,
)
from .divergence import DIVERGENCES, per_token_divergence, token_divergence
from .kl import KL_ESTIMATORS, entropy_bonus, kl_loss, kl_penalty
from .policy import RATIO_LEVELS, TRUST_REGIONS, policy_loss
from .selfteach import (
    DIRECTIONS,
    FRONTIER_FORMS,
    MAGNITUDE_FORMS,
    egrsd_gate,
    egrsd_magnitude,
    egrsd_token_weights,
    frontier_weight,
    lookahead_entropy,
    ssopd_pairs,
)

__all__ = [
    "DIVERGENCES",
    "per_token_divergence",
    "token_divergence",
    "AGG_MODES",
    "aggregate",
    "masked_mean",
    "RATIO_LEVELS",
    "TRUST_REGIONS",
    "policy_loss",
    "KL_ESTIMATORS",
    "kl_penalty",
    "kl_loss",
    "entropy_bonus",
    "SAGE_GUIDES",
    "SURPRISAL_NORMS",
    "cyclic_cosine",
    "branch_guide",
    "surprisal_weights",
    "token_guide",
    "random_guide",
    "shaped_kl",
    "sage_guide",
    "sage_kl_loss",
    "CORR_METHODS",
    "CORR_SIGNS",
    "token_stats",
    "logit_grad_norm",
    "hidden_grad_norm",
    "defined_rows",
    "pearson_per_row",
    "spearman_per_row",
    "inversion_score",
    "corr_po_bonus",
    "FRONTIER_FORMS",
    "MAGNITUDE_FORMS",
    "DIRECTIONS",
    "ssopd_pairs",
    "frontier_weight",
    "egrsd_gate",
    "lookahead_entropy",
    "egrsd_magnitude",
    "egrsd_token_weights",
]
