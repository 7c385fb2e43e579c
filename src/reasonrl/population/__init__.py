"""Populations of LoRA adapters (PopuLoRA, spec envs-selfplay-eval.md 4): same-rank operators on
numpy factors, ratings and PFSP matchmaking, and PBT's replacement plan. Pure maths and logic; the
``populora`` part (:mod:`reasonrl.parts.populora`) applies them to peft adapters."""

from .operators import crossover_modulewise, crossover_svd, mutate_gaussian, mutate_spectral, refactor
from .pbt import OPERATORS, Replacement, make_offspring, offspring_rating, pbt_plan, ranked
from .ratings import RatingModel, conservative, pfsp_pick, pfsp_weights

__all__ = [
    "OPERATORS",
    "RatingModel",
    "Replacement",
    "conservative",
    "crossover_modulewise",
    "crossover_svd",
    "make_offspring",
    "mutate_gaussian",
    "mutate_spectral",
    "offspring_rating",
    "pbt_plan",
    "pfsp_pick",
    "pfsp_weights",
    "ranked",
    "refactor",
]
