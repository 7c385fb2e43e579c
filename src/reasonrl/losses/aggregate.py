"""Loss aggregation: how per-token values of a batch become one scalar.

All modes take ``values`` and ``mask`` of shape (N, T) (N responses, T token positions; mask 1 =
trainable token) and return ``sum_i sum_t w_{i,t} m_{i,t} v_{i,t}`` for a per-token weight w:

====================================  =========================================================
``"token-mean"`` (DAPO)               ``w = 1 / n_tokens``: every token weighs the same
``"seq-mean-token-mean"`` (GRPO)      ``w = 1 / (n_seqs * |y_i|)``: every response weighs the same
``"seq-mean-token-sum"``              ``w = 1 / n_seqs``: long responses weigh more
``"seq-mean-token-sum-norm"``         ``w = 1 / (n_seqs * norm_len)``: Dr. GRPO, a constant, so
                                      no length bias (arXiv 2503.20783, §3.1)
====================================  =========================================================

Because the result is a weighted *sum* over rows, passing the global ``n_tokens`` / ``n_seqs`` of
the whole optimiser batch makes the micro-batch aggregates add up exactly to the full-batch
aggregate: gradient accumulation over 4 micro-batches of 1 equals one batch of 4 (the invariant
TRL tests; verl and SkyRL normalise by the global token count for the same reason).
"""

from __future__ import annotations

from typing import Union

import torch
from torch import Tensor

__all__ = ["AGG_MODES", "aggregate", "masked_mean", "check_agg"]

AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")

Count = Union[int, float, Tensor]


def check_agg(agg: str, norm_len: Count | None = None) -> None:
    """Raise ValueError for an unknown mode or a missing/invalid ``norm_len``."""
    if agg not in AGG_MODES:
        raise ValueError(f"unknown aggregation {agg!r}; valid values: {', '.join(AGG_MODES)}")
    if agg == "seq-mean-token-sum-norm":
        if norm_len is None:
            raise ValueError(
                "agg='seq-mean-token-sum-norm' (Dr. GRPO) needs norm_len, "
                "the constant length to divide by (e.g. the max completion length)"
            )
        if float(norm_len) <= 0:
            raise ValueError(f"norm_len must be > 0, got {float(norm_len)}")


def _check_shapes(values: Tensor, mask: Tensor) -> None:
    if values.dim() != 2 or values.shape != mask.shape:
        raise ValueError(f"values and mask must both be (N, T); got {tuple(values.shape)} and {tuple(mask.shape)}")


def _count(given: Count | None, default: Tensor | int, name: str) -> Tensor | float:
    """A denominator: the given global count, else the local default, at least 1.

    Clamping at 1 means a batch without any trainable token aggregates to 0 instead of NaN (its
    numerator is 0 anyway).
    """
    if given is None:
        return default.clamp(min=1) if isinstance(default, Tensor) else max(float(default), 1.0)
    if float(given) < 0:
        raise ValueError(f"{name} must be >= 0, got {float(given)}")
    return given.clamp(min=1) if isinstance(given, Tensor) else max(float(given), 1.0)


def masked_values(values: Tensor, mask: Tensor) -> Tensor:  # (N, T) -> (N, T)
    """``m * v`` with masked-out positions set to exactly 0, so garbage (inf/NaN) in padding cannot leak."""
    mask = mask.to(values.dtype)
    return torch.where(mask != 0, values, torch.zeros_like(values)) * mask


def masked_mean(values: Tensor, mask: Tensor) -> Tensor:  # (N, T) -> ()
    """Token mean over the mask; 0 when the mask is empty."""
    _check_shapes(values, mask)
    return masked_values(values, mask).sum() / mask.to(values.dtype).sum().clamp(min=1)


def aggregate(
    values: Tensor,
    mask: Tensor,
    agg: str,
    *,
    norm_len: Count | None = None,
    n_tokens: Count | None = None,
    n_seqs: Count | None = None,
) -> Tensor:
    """Aggregate per-token ``values`` (N, T) over ``mask`` (N, T) into a scalar (see module doc).

    Args:
        agg: one of :data:`AGG_MODES`.
        norm_len: the constant length of ``"seq-mean-token-sum-norm"`` (required there only).
        n_tokens: global number of trainable tokens in the optimiser batch (default: local mask sum).
        n_seqs: global number of responses in the optimiser batch (default: local N).

    A row with an empty mask contributes 0 in every mode (no NaN), but still counts in ``n_seqs``.
    """
    check_agg(agg, norm_len)
    _check_shapes(values, mask)
    mask = mask.to(values.dtype)
    contrib = masked_values(values, mask)  # (N, T)
    if agg == "token-mean":
        return contrib.sum() / _count(n_tokens, mask.sum(), "n_tokens")
    seqs = _count(n_seqs, values.shape[0], "n_seqs")
    if agg == "seq-mean-token-sum":
        return contrib.sum() / seqs
    if agg == "seq-mean-token-sum-norm":
        return contrib.sum() / (seqs * float(norm_len))
    # seq-mean-token-mean: 1/|y_i| per row, 0 for empty rows (clamp keeps the unused branch finite)
    lens = mask.sum(dim=-1)  # (N,)
    inv_len = torch.where(lens > 0, 1.0 / lens.clamp(min=1), torch.zeros_like(lens))  # (N,)
    return (contrib.sum(dim=-1) * inv_len).sum() / seqs
