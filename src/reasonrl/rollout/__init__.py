"""Rollout engines behind one Generator protocol."""

from .base import Generator, Rollouts, SamplingParams, concat_rollouts, select_rows
from .hf import HFEngine, position_ids_from_mask
from .diffusion import DiffusionEngine, engine_for, is_diffusion
from .sampling import filter_top_k_top_p, sample_next

__all__ = [
    "DiffusionEngine",
    "engine_for",
    "is_diffusion",
    "Generator",
    "concat_rollouts",
    "select_rows",
    "HFEngine",
    "Rollouts",
    "SamplingParams",
    "filter_top_k_top_p",
    "position_ids_from_mask",
    "sample_next",
]
