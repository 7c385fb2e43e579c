"""The gap between an inference engine's log-probs and the trainer's own, and its correction (issue 43).

An engine with its own copy of the weights (vLLM) samples from a distribution close to, not equal to, the
trainer's: other kernels, another precision, weights a few optimiser steps old (``rollout.sync_every``).
As TRL's ``vllm_importance_sampling_correction`` and verl's rollout correction do (Yao et al. 2025, "Your
efficient RL framework secretly brings you off-policy RL training"), the policy loss takes the *trainer's*
log-probs at sampling time as its old policy (its ratio is 1 on the first optimiser step) and each token's
advantage is weighted by the truncated importance weight ``min(pi_learner / pi_engine, cap)``
(token-level TIS; TRL's former default ``vllm_importance_sampling_cap=2`` and verl's ``tis_imp_ratio_cap``).

Truncated sampling (top-k, top-p, min-p): vLLM's ``processed_logprobs`` are normalised over the tokens the
truncation kept, the trainer's over the whole vocabulary, so their ratio would carry the kept mass ``S``
(TRL #6789; TRL 1.17 "unbiased importance sampling under top-k, top-p and min-p"). :func:`kept_log_mass`
replays vLLM's truncation on the trainer's logits and gives ``log S``, which puts the engine's log-probs on
the trainer's support: ``log p_T(y) = log q_trunc(y) + log S`` (the tempered, untruncated log-prob the
Generator contract asks for). Pure functions, shapes commented.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["MAX_LOG_RATIO", "engine_correction", "kept_log_mass", "mismatch_metrics", "tis_weights", "vllm_support"]

MAX_LOG_RATIO = 20.0  # exp(20) ~ 5e8: a padded or wildly stale token cannot make an inf weight


def tis_weights(learner_logp: Tensor, engine_logp: Tensor, cap: float) -> Tensor:  # (N, T) x2 -> (N, T)
    """Truncated importance weights ``min(exp(learner - engine), cap)``, detached (a correction of the
    sampling distribution, not a path for the gradient)."""
    log_ratio = (learner_logp - engine_logp).detach().clamp(max=MAX_LOG_RATIO)
    return log_ratio.exp().clamp(max=cap)


def mismatch_metrics(learner_logp: Tensor, engine_logp: Tensor, mask: Tensor, cap: float | None) -> dict[str, float]:
    """Mean and max |delta log p| over the tokens of ``mask`` (N, T), and with a ``cap`` the share of those
    tokens whose importance ratio reached it and the mean weight (``mismatch/*``)."""
    m = mask > 0
    if not bool(m.any()):
        return {}
    delta = (learner_logp - engine_logp).detach()[m]  # (n_tokens,)
    out = {"mismatch/dlogp_abs_mean": float(delta.abs().mean()), "mismatch/dlogp_abs_max": float(delta.abs().max())}
    if cap is not None:
        out["mismatch/capped_frac"] = float((delta >= math.log(cap)).float().mean())
        out["mismatch/is_weight_mean"] = float(delta.clamp(max=MAX_LOG_RATIO).exp().clamp(max=cap).mean())
    return out


def engine_correction(
    mode: str, cap: float, logp: Tensor, engine_logp: Tensor, learner_logp: Tensor | None, adv: Tensor, mask: Tensor
) -> tuple[Tensor, Tensor, dict[str, float]]:
    """The policy loss's old log-probs and advantages for rollouts an engine sampled: (N, T) trainer
    log-probs ``logp`` (with grad), (N, T) engine log-probs, (N, T) trainer log-probs at sampling time
    (None: ``logp`` itself, exact on a batch's first optimiser step), (N,) or (N, T) advantages, (N, T)
    mask -> (old (N, T), advantages (N, T) or as given, metrics). ``mode``: ``"tis"`` weights each token's
    advantage by :func:`tis_weights` (the weight is positive, so it scales the clipped surrogate, dual
    clip included, as TRL multiplies the per-token loss); ``"none"`` leaves the advantages alone (the
    ratio still starts at 1: the trainer's own log-probs are the old policy). ValueError on another mode."""
    if mode not in ("tis", "none"):
        raise ValueError(f"unknown importance-sampling correction {mode!r}; valid: tis, none")
    old = logp.detach() if learner_logp is None else learner_logp.to(logp)
    metrics = mismatch_metrics(old, engine_logp, mask, cap if mode == "tis" else None)
    if mode == "none":
        return old, adv, metrics
    w = tis_weights(old, engine_logp.to(old), cap)  # (N, T)
    return old, (adv[:, None] if adv.dim() == 1 else adv) * w, metrics


def vllm_support(scaled: Tensor, top_k: int, top_p: float, min_p: float) -> Tensor:  # (..., V) -> (..., V) bool
    """The tokens vLLM's sampler keeps from tempered logits ``scaled``, in its order (vllm/v1/sample):
    min-p on the tempered probabilities (p >= min_p * p_max), then top-k (logits at least the k-th
    largest; ties kept), then top-p on the distribution renormalised after top-k (ascending cumulative
    mass <= 1 - top_p dropped, the most likely token always kept)."""
    keep = torch.ones_like(scaled, dtype=torch.bool)
    if min_p > 0:
        probs = scaled.softmax(-1)
        keep &= probs >= min_p * probs.amax(-1, keepdim=True)
    if top_k > 0 and top_k < scaled.shape[-1]:
        kth = scaled.topk(top_k, dim=-1).values[..., -1:]  # (..., 1)
        keep &= scaled >= kth
    if top_p < 1:
        masked = scaled.masked_fill(~keep, float("-inf"))
        sorted_logits, order = masked.sort(dim=-1)  # ascending
        cum = sorted_logits.softmax(-1).cumsum(-1)
        drop_sorted = cum <= 1 - top_p
        drop_sorted[..., -1] = False  # at least one token
        keep &= ~torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
    return keep


def kept_log_mass(logits: Tensor, temperature: float, top_k: int, top_p: float, min_p: float) -> Tensor:
    """(..., V) logits -> (...,) ``log S``: the log of the tempered probability mass that vLLM's truncation
    keeps (:func:`vllm_support`); 0 with no truncation. ``logq_trunc + log S`` is the tempered,
    untruncated log-prob of a kept token."""
    scaled = logits.float() / (temperature or 1.0)
    if top_k <= 0 and top_p >= 1 and min_p <= 0:
        return torch.zeros(scaled.shape[:-1], dtype=scaled.dtype, device=scaled.device)
    keep = vllm_support(scaled, top_k, top_p, min_p)
    return scaled.masked_fill(~keep, float("-inf")).logsumexp(-1) - scaled.logsumexp(-1)
