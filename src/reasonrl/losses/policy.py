"""The clipped policy-gradient loss, as three separate knobs (cf. verl / SkyRL):

1. **ratio level**: ``"token"`` -- ``rho_t = pi/pi_old`` per token (PPO, GRPO, DAPO); or
   ``"sequence"`` -- GSPO's length-normalised sequence ratio
   ``s_i = exp(mean_t (l - l_old))`` shared by every token of response i (arXiv 2507.18071).
2. **trust region**: PPO-clip ``S = min(rho A, clip(rho, 1-clip_low, 1+clip_high) A)`` with
   decoupled bounds (DAPO clip-higher, arXiv 2503.14476), plus optional dual-clip for A < 0
   (Ye et al. 2020, arXiv 1912.09729).
3. **aggregation**: any mode of :func:`reasonrl.losses.aggregate.aggregate`.

``loss = -aggregate(S)``; the function returns ``(loss, metrics)``.
"""
from __future__ import annotations

import torch
from torch import Tensor

from .aggregate import Count, aggregate, check_agg, masked_mean

__all__ = ["RATIO_LEVELS", "policy_loss"]

RATIO_LEVELS = ("token", "sequence")

# exp(20) ~ 5e8: a stale or padded token cannot turn the ratio into inf; real ratios never get there
_MAX_LOG_RATIO = 20.0


def _check_args(logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, ratio: str,
                clip_low: float, clip_high: float, dual_clip: float | None, agg: str,
                norm_len: Count | None) -> None:
    if ratio not in RATIO_LEVELS:
        raise ValueError(f"unknown ratio level {ratio!r}; valid values: {', '.join(RATIO_LEVELS)}")
    check_agg(agg, norm_len)
    if logp.dim() != 2:
        raise ValueError(f"logp must be (N, T), got {tuple(logp.shape)}")
    for name, t in (("old_logp", old_logp), ("mask", mask)):
        if t.shape != logp.shape:
            raise ValueError(f"{name} must have the shape of logp {tuple(logp.shape)}, got {tuple(t.shape)}")
    if advantages.shape not in (logp.shape[:1], logp.shape):
        raise ValueError(f"advantages must be (N,) = {tuple(logp.shape[:1])} or (N, T) = {tuple(logp.shape)}, "
                         f"got {tuple(advantages.shape)}")
    if not 0 <= clip_low < 1 or clip_high < 0:
        raise ValueError(f"need 0 <= clip_low < 1 and clip_high >= 0, got clip_low={clip_low}, clip_high={clip_high}")
    if dual_clip is not None and dual_clip <= 1:
        raise ValueError(f"dual_clip must be > 1 (Ye et al. 2020 use 3), got {dual_clip}")


def _log_ratio(logp: Tensor, old_logp: Tensor, mask: Tensor, level: str) -> Tensor:  # -> (N, T)
    """log pi/pi_old per token, or GSPO's mean log-ratio of the row broadcast to its tokens."""
    m = mask.to(logp.dtype)
    # padded positions may hold garbage log-probs; zero them before anything is exponentiated
    token = torch.where(m != 0, logp - old_logp.detach(), torch.zeros_like(logp))  # (N, T)
    if level == "sequence":
        # GSPO eq. 7: geometric mean of token ratios; the gradient flows through this mean
        lens = m.sum(dim=-1, keepdim=True).clamp(min=1)  # (N, 1)
        token = ((token * m).sum(dim=-1, keepdim=True) / lens).expand_as(logp)  # (N, T)
    return token.clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)


def _surrogate(rho: Tensor, adv: Tensor, clip_low: float, clip_high: float,
               dual_clip: float | None) -> Tensor:  # (N, T) -> (N, T)
    """PPO-clip objective per token (to be maximised)."""
    unclipped = rho * adv
    clipped = rho.clamp(1.0 - clip_low, 1.0 + clip_high) * adv
    s = torch.minimum(unclipped, clipped)
    if dual_clip is not None:
        # for A < 0 the min never clips a large rho, so the loss grows without bound (Ye et al. 2020):
        # floor the objective at c*A, which stops the gradient of such tokens
        s = torch.where(adv < 0, torch.maximum(s, dual_clip * adv), s)
    return s


@torch.no_grad()
def _metrics(loss: Tensor, rho: Tensor, log_ratio: Tensor, adv: Tensor, mask: Tensor,
             clip_low: float, clip_high: float, dual_clip: float | None) -> dict[str, float]:
    """Token-averaged diagnostics over the mask, local to this call."""
    m = mask.to(rho.dtype)
    on = m != 0

    def frac(cond: Tensor) -> float:
        return float(masked_mean(cond.to(rho.dtype), m))

    dual = frac((adv < 0) & (rho > dual_clip)) if dual_clip is not None else 0.0
    u = -log_ratio  # l_old - l; k3 with the behaviour policy in the reference's place
    return {
        "loss/policy": float(loss),
        "loss/clip_frac_low": frac((adv < 0) & (rho < 1.0 - clip_low)),
        "loss/clip_frac_high": frac((adv > 0) & (rho > 1.0 + clip_high)),
        "loss/clip_frac_dual": dual,
        "loss/ratio_mean": float(masked_mean(rho, m)),
        "loss/ratio_max": float(rho[on].max()) if bool(on.any()) else 0.0,
        "loss/approx_kl": float(masked_mean(torch.expm1(u) - u, m)),  # k3, cancellation-free
    }


def policy_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    ratio: str = "token",
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float | None = None,
    agg: str = "token-mean",
    norm_len: Count | None = None,
    n_tokens: Count | None = None,
    n_seqs: Count | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """Clipped policy-gradient loss ``-aggregate(S)`` and its metrics.

    Args:
        logp: (N, T) log-probs of the sampled tokens under the current policy (carries the gradient).
        old_logp: (N, T) log-probs under the behaviour policy (treated as constant).
        advantages: (N,) one per response, or (N, T) per token (treated as constant).
        mask: (N, T), 1 = trainable token.
        ratio: ``"token"`` or ``"sequence"`` (GSPO: one clipped ratio per response).
        clip_low, clip_high: ratio band ``[1 - clip_low, 1 + clip_high]`` (DAPO: 0.2, 0.28).
        dual_clip: ``c > 1`` caps the per-token loss of A < 0 tokens at ``-c A``; None = off.
        agg, norm_len, n_tokens, n_seqs: see :func:`reasonrl.losses.aggregate.aggregate`; pass the
            global counts when accumulating gradients over micro-batches.

    Metrics (python floats, token means over the mask): ``loss/policy``, ``loss/clip_frac_low``
    (A<0, rho<1-clip_low), ``loss/clip_frac_high`` (A>0, rho>1+clip_high), ``loss/clip_frac_dual``
    (A<0, rho>c), ``loss/ratio_mean``, ``loss/ratio_max``, ``loss/approx_kl`` (mean of
    ``exp(l_old - l) - (l_old - l) - 1``, the k3 estimator between behaviour and current policy).
    """
    _check_args(logp, old_logp, advantages, mask, ratio, clip_low, clip_high, dual_clip, agg, norm_len)
    adv = advantages.detach().to(logp.dtype)
    adv = adv.unsqueeze(-1).expand_as(logp) if adv.dim() == 1 else adv  # (N, T)
    log_ratio = _log_ratio(logp, old_logp, mask, ratio)  # (N, T)
    rho = torch.exp(log_ratio)  # (N, T)
    s = _surrogate(rho, adv, clip_low, clip_high, dual_clip)  # (N, T)
    loss = -aggregate(s, mask, agg, norm_len=norm_len, n_tokens=n_tokens, n_seqs=n_seqs)
    # approx_kl always uses the token log-ratio, whatever level the loss clips at
    token_log_ratio = _log_ratio(logp.detach(), old_logp, mask, "token")
    metrics = _metrics(loss, rho, token_log_ratio, adv, mask, clip_low, clip_high, dual_clip)
    return loss, metrics
