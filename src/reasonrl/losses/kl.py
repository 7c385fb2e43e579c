"""KL penalty to a reference policy, and the entropy bonus.

Per-token estimators of ``KL(pi || pi_ref)`` from tokens sampled by pi (Schulman, "Approximating
KL divergence", 2020), with ``d = l - l_ref`` (l = log pi of the sampled token):

* ``k1 = d``: unbiased, but negative on some samples, so it is high-variance.
* ``k2 = d**2 / 2``: biased, low-variance, always >= 0.
* ``k3 = exp(-d) + d - 1``: unbiased and >= 0; the one GRPO uses (DeepSeekMath eq. 4). Its
  gradient in l is ``1 - exp(l_ref - l)``, which pulls l toward l_ref.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from .aggregate import Count, aggregate, check_agg, masked_mean

__all__ = ["KL_ESTIMATORS", "kl_penalty", "kl_loss", "entropy_bonus"]


def _k1(d: Tensor) -> Tensor:
    return d


def _k2(d: Tensor) -> Tensor:
    return 0.5 * d.square()


def _k3(d: Tensor) -> Tensor:
    u = -d  # u = l_ref - l
    return torch.expm1(u) - u  # = exp(u) - u - 1, without the cancellation that makes tiny values negative


KL_ESTIMATORS: dict[str, Callable[[Tensor], Tensor]] = {"k1": _k1, "k2": _k2, "k3": _k3}


def kl_penalty(logp: Tensor, ref_logp: Tensor, estimator: str = "k3") -> Tensor:  # (N, T) -> (N, T)
    """Per-token estimate of ``KL(pi || pi_ref)``: (N, T) log-probs of pi and pi_ref -> (N, T)."""
    if estimator not in KL_ESTIMATORS:
        raise ValueError(f"unknown KL estimator {estimator!r}; valid values: {', '.join(KL_ESTIMATORS)}")
    if logp.shape != ref_logp.shape:
        raise ValueError(
            f"logp and ref_logp must have the same shape; got {tuple(logp.shape)} and {tuple(ref_logp.shape)}"
        )
    # the reference is a fixed target: no gradient goes into it
    return KL_ESTIMATORS[estimator](logp - ref_logp.detach())


def kl_loss(
    logp: Tensor,
    ref_logp: Tensor,
    mask: Tensor,
    *,
    coef: float,
    estimator: str = "k3",
    agg: str = "token-mean",
    norm_len: Count | None = None,
    n_tokens: Count | None = None,
    n_seqs: Count | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """``coef * aggregate(kl_penalty(logp, ref_logp))`` over ``mask`` (all (N, T)); add it to the policy loss.

    Metrics: ``loss/kl`` (token mean of the estimate, local) and ``loss/kl_term`` (the returned loss).
    """
    check_agg(agg, norm_len)
    if mask.shape != logp.shape:
        raise ValueError(f"mask must have the shape of logp {tuple(logp.shape)}, got {tuple(mask.shape)}")
    kl = kl_penalty(logp, ref_logp, estimator)  # (N, T)
    loss = coef * aggregate(kl, mask, agg, norm_len=norm_len, n_tokens=n_tokens, n_seqs=n_seqs)
    with torch.no_grad():
        metrics = {"loss/kl": float(masked_mean(kl, mask)), "loss/kl_term": float(loss)}
    return loss, metrics


def entropy_bonus(
    entropy: Tensor,
    mask: Tensor,
    *,
    coef: float,
    agg: str = "token-mean",
    norm_len: Count | None = None,
    n_tokens: Count | None = None,
    n_seqs: Count | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """``-coef * aggregate(entropy)`` over ``mask`` (both (N, T)): minimising it raises entropy.

    Metrics: ``loss/entropy`` (token mean, local) and ``loss/entropy_term`` (the returned loss).
    """
    check_agg(agg, norm_len)
    loss = -coef * aggregate(entropy, mask, agg, norm_len=norm_len, n_tokens=n_tokens, n_seqs=n_seqs)
    with torch.no_grad():
        metrics = {"loss/entropy": float(masked_mean(entropy, mask)), "loss/entropy_term": float(loss)}
    return loss, metrics
