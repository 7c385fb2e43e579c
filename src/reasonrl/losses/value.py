"""The critic's losses: the clipped value loss of PPO and the Bradley-Terry loss of a reward model.

* :func:`value_loss` -- ``0.5 * max((V - R)^2, (clip(V, V_old - c, V_old + c) - R)^2)`` per token,
  aggregated like the policy loss (verl ``compute_value_loss``; the clip keeps the critic's step
  inside a band around the values that computed the advantages, as PPO2's value clipping; verl's
  default ``cliprange_value`` is 0.5). ``clip=None`` is the plain squared error.
* :func:`bt_loss` -- the Bradley-Terry negative log-likelihood of a preference ``y_c > y_r``,
  ``-log sigmoid(r_c - r_r - margin)``, plus TRL's optional centring term
  ``coef * mean((r_c + r_r)^2)`` (Eisenstein et al. 2023, arXiv 2312.09244), which pins the
  reward's free offset near 0 (TRL ``RewardTrainer``, ``center_rewards_coefficient``).

Pure functions of tensors; each returns ``(loss, metrics)``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from .aggregate import Count, aggregate, masked_mean

__all__ = ["bt_loss", "value_loss"]


def value_loss(
    values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    mask: Tensor,
    *,
    clip: float | None = 0.5,
    agg: str = "token-mean",
    n_tokens: Count | None = None,
    n_seqs: Count | None = None,
    norm_len: Count | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """(N, T) predicted values (with grad), values at rollout time, GAE returns and a 0/1 mask ->
    the clipped value loss (aggregated over the mask with the global counts given) and its metrics:
    ``critic/vf_clip_frac`` (tokens where the clipped branch is the larger error, so it is the one
    used), ``critic/vpred_mean``, ``critic/value_error`` (token mean of ``(V - R)^2``)."""
    if not (values.shape == old_values.shape == returns.shape == mask.shape) or values.dim() != 2:
        raise ValueError(
            f"value_loss needs (N, T) values, old values, returns and mask; got {tuple(values.shape)}, "
            f"{tuple(old_values.shape)}, {tuple(returns.shape)}, {tuple(mask.shape)}"
        )
    if clip is not None and clip <= 0:
        raise ValueError(f"value clip must be > 0 (verl uses 0.5) or None for none, got {clip}")
    old, target = old_values.detach().to(values.dtype), returns.detach().to(values.dtype)
    err = (values - target) ** 2  # (N, T)
    if clip is None:
        per_token, clipped_used = err, torch.zeros_like(err, dtype=torch.bool)
    else:
        vclip = old + (values - old).clamp(-clip, clip)  # (N, T) clip(V, V_old - c, V_old + c)
        err_clip = (vclip - target) ** 2
        per_token, clipped_used = torch.maximum(err, err_clip), err_clip > err
    loss = 0.5 * aggregate(per_token, mask, agg, norm_len=norm_len, n_tokens=n_tokens, n_seqs=n_seqs)
    m = mask.to(values.dtype)
    with torch.no_grad():
        metrics = {
            "critic/vf_clip_frac": float(masked_mean(clipped_used.to(values.dtype), m)),
            "critic/vpred_mean": float(masked_mean(values.detach(), m)),
            "critic/value_error": float(masked_mean(err.detach(), m)),
        }
    return loss, metrics


def bt_loss(
    chosen: Tensor, rejected: Tensor, *, margin: Tensor | float = 0.0, center_coef: float = 0.0
) -> tuple[Tensor, dict[str, float]]:
    """(P,) rewards of the chosen and the rejected response of P pairs -> the mean Bradley-Terry loss
    ``-log sigmoid(r_c - r_r - margin)`` (+ ``center_coef * mean((r_c + r_r)^2)``) and its metrics:
    ``rm/accuracy`` (pairs with r_c > r_r), ``rm/margin`` (mean r_c - r_r), ``rm/chosen``,
    ``rm/rejected`` (mean rewards)."""
    if chosen.dim() != 1 or chosen.shape != rejected.shape:
        raise ValueError(
            f"bt_loss needs (P,) chosen and rejected rewards; got {tuple(chosen.shape)}, {tuple(rejected.shape)}"
        )
    if center_coef < 0:
        raise ValueError(f"center_coef must be >= 0, got {center_coef}")
    diff = chosen - rejected  # (P,)
    loss = -F.logsigmoid(diff - margin).mean()
    if center_coef:
        loss = loss + center_coef * ((chosen + rejected) ** 2).mean()
    with torch.no_grad():
        metrics = {
            "rm/loss": float(loss),
            "rm/accuracy": float((diff > 0).float().mean()),
            "rm/margin": float(diff.mean()),
            "rm/chosen": float(chosen.mean()),
            "rm/rejected": float(rejected.mean()),
        }
    return loss, metrics
