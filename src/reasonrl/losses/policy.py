"""The clipped policy-gradient loss, as three separate knobs (cf. verl / SkyRL):

1. **ratio level**: ``"token"`` -- ``rho_t = pi/pi_old`` per token (PPO, GRPO, DAPO);
   ``"sequence"`` -- GSPO's length-normalised sequence ratio
   ``s_i = exp(mean_t (l - l_old))`` shared by every token of response i (arXiv 2507.18071);
   ``"sequence-token"`` -- GSPO-token, ``s_{i,t} = sg[s_i] * pi_t / sg[pi_t]``: the value of s_i,
   but each token keeps its own gradient, so per-token advantages work (GSPO paper, eq. 13).
2. **trust region**: ``"clip"`` -- PPO-clip ``S = min(rho A, clip(rho, 1-clip_low, 1+clip_high) A)``
   with decoupled bounds (DAPO clip-higher, arXiv 2503.14476), plus optional dual-clip for A < 0
   (Ye et al. 2020, arXiv 1912.09729); ``"cispo"`` -- ``S = sg[clip(rho, ...)] * A * l``
   (MiniMax-M1, arXiv 2506.13585): the weight is clipped and detached, so no token loses its
   gradient.
3. **aggregation**: any mode of :func:`reasonrl.losses.aggregate.aggregate`.

``loss = -aggregate(token_mask * S)``; the function returns ``(loss, metrics)``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .aggregate import Count, aggregate, check_agg, masked_mean

__all__ = ["RATIO_LEVELS", "TRUST_REGIONS", "policy_loss"]

RATIO_LEVELS = ("token", "sequence", "sequence-token")
TRUST_REGIONS = ("clip", "cispo")

# exp(20) ~ 5e8: a stale or padded token cannot turn the ratio into inf; real ratios never get there
_MAX_LOG_RATIO = 20.0


def _check_args(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    ratio: str,
    clip_low: float,
    clip_high: float,
    dual_clip: float | None,
    agg: str,
    norm_len: Count | None,
    trust_region: str = "clip",
    token_mask: Tensor | None = None,
) -> None:
    if ratio not in RATIO_LEVELS:
        raise ValueError(f"unknown ratio level {ratio!r}; valid values: {', '.join(RATIO_LEVELS)}")
    if trust_region not in TRUST_REGIONS:
        raise ValueError(f"unknown trust region {trust_region!r}; valid values: {', '.join(TRUST_REGIONS)}")
    if trust_region == "cispo" and dual_clip is not None:
        raise ValueError("dual_clip only applies to trust_region='clip'; CISPO's clipped weight is already bounded")
    if token_mask is not None and token_mask.shape != logp.shape:
        raise ValueError(f"token_mask must have the shape of logp {tuple(logp.shape)}, got {tuple(token_mask.shape)}")
    check_agg(agg, norm_len)
    if logp.dim() != 2:
        raise ValueError(f"logp must be (N, T), got {tuple(logp.shape)}")
    for name, t in (("old_logp", old_logp), ("mask", mask)):
        if t.shape != logp.shape:
            raise ValueError(f"{name} must have the shape of logp {tuple(logp.shape)}, got {tuple(t.shape)}")
    if advantages.shape not in (logp.shape[:1], logp.shape):
        raise ValueError(
            f"advantages must be (N,) = {tuple(logp.shape[:1])} or (N, T) = {tuple(logp.shape)}, "
            f"got {tuple(advantages.shape)}"
        )
    if not 0 <= clip_low < 1 or clip_high < 0:
        raise ValueError(f"need 0 <= clip_low < 1 and clip_high >= 0, got clip_low={clip_low}, clip_high={clip_high}")
    if dual_clip is not None and dual_clip <= 1:
        raise ValueError(f"dual_clip must be > 1 (Ye et al. 2020 use 3), got {dual_clip}")


def _log_ratio(logp: Tensor, old_logp: Tensor, mask: Tensor, level: str) -> Tensor:  # -> (N, T)
    """log pi/pi_old per token, GSPO's mean log-ratio of the row broadcast to its tokens, or
    GSPO-token's ``sg[log s_i] + l_t - sg[l_t]``."""
    m = mask.to(logp.dtype)
    on = m != 0
    # padded positions may hold garbage log-probs; zero them before anything is exponentiated
    token = torch.where(on, logp - old_logp.detach(), torch.zeros_like(logp))  # (N, T)
    if level != "token":
        # GSPO eq. 7: geometric mean of token ratios; the gradient flows through this mean
        lens = m.sum(dim=-1, keepdim=True).clamp(min=1)  # (N, 1)
        seq = ((token * m).sum(dim=-1, keepdim=True) / lens).expand_as(logp)  # (N, T)
        if level == "sequence":
            token = seq
        else:
            # GSPO eq. 13: value log s_i, gradient 1 wrt its own l_t (d log s_{i,t} / d l_t = 1)
            own = torch.where(on, logp - logp.detach(), torch.zeros_like(logp))  # (N, T), value 0
            token = torch.where(on, seq.detach() + own, torch.zeros_like(logp))
    return token.clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)


def _surrogate(
    rho: Tensor, adv: Tensor, clip_low: float, clip_high: float, dual_clip: float | None
) -> Tensor:  # (N, T) -> (N, T)
    """PPO-clip objective per token (to be maximised)."""
    unclipped = rho * adv
    clipped = rho.clamp(1.0 - clip_low, 1.0 + clip_high) * adv
    s = torch.minimum(unclipped, clipped)
    if dual_clip is not None:
        # for A < 0 the min never clips a large rho, so the loss grows without bound (Ye et al. 2020):
        # floor the objective at c*A, which stops the gradient of such tokens
        s = torch.where(adv < 0, torch.maximum(s, dual_clip * adv), s)
    return s


def _cispo(
    rho: Tensor, adv: Tensor, logp: Tensor, mask: Tensor, clip_low: float, clip_high: float
) -> Tensor:  # (N, T) -> (N, T)
    """CISPO objective per token ``sg[clip(rho)] * A * l`` (MiniMax-M1, arXiv 2506.13585, eq. 4).

    PPO-clip zeroes the gradient of tokens outside the band; CISPO clips the importance weight
    instead, so rare tokens whose ratio jumps (often the "reflective" forks in long chains of
    thought) still get a gradient. The value is the REINFORCE-style ``w A log pi`` (as written in
    the paper and in verl), so it is not comparable to a PPO-clip loss value; its gradient is.
    """
    weight = rho.detach().clamp(1.0 - clip_low, 1.0 + clip_high)  # (N, T)
    logp_kept = torch.where(mask != 0, logp, torch.zeros_like(logp))  # the paper's l; garbage in padding -> 0
    return weight * adv * logp_kept


@torch.no_grad()
def _metrics(
    loss: Tensor,
    rho: Tensor,
    log_ratio: Tensor,
    adv: Tensor,
    mask: Tensor,
    clip_low: float,
    clip_high: float,
    dual_clip: float | None,
    trust_region: str = "clip",
) -> dict[str, float]:
    """Token-averaged diagnostics over the mask, local to this call."""
    m = mask.to(rho.dtype)
    on = m != 0

    def frac(cond: Tensor) -> float:
        return float(masked_mean(cond.to(rho.dtype), m))

    dual = frac((adv < 0) & (rho > dual_clip)) if dual_clip is not None else 0.0
    u = -log_ratio  # l_old - l; k3 with the behaviour policy in the reference's place
    # PPO-clip only clips where the min picks the clipped branch (sign of A matters); CISPO clips
    # the weight of every token outside the band
    low, high = rho < 1.0 - clip_low, rho > 1.0 + clip_high
    if trust_region == "clip":
        low, high = low & (adv < 0), high & (adv > 0)
    return {
        "loss/policy": float(loss),
        "loss/clip_frac_low": frac(low),
        "loss/clip_frac_high": frac(high),
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
    trust_region: str = "clip",
    token_mask: Tensor | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """Clipped policy-gradient loss ``-aggregate(S)`` and its metrics.

    Args:
        logp: (N, T) log-probs of the sampled tokens under the current policy (carries the gradient).
        old_logp: (N, T) log-probs under the behaviour policy (treated as constant).
        advantages: (N,) one per response, or (N, T) per token (treated as constant).
        mask: (N, T), 1 = trainable token.
        ratio: ``"token"``, ``"sequence"`` (GSPO: one clipped ratio per response) or
            ``"sequence-token"`` (GSPO-token: the value of GSPO's ratio, per-token gradients; with
            an (N,) advantage its gradient equals GSPO's).
        clip_low, clip_high: ratio band ``[1 - clip_low, 1 + clip_high]`` (DAPO: 0.2, 0.28).
        dual_clip: ``c > 1`` caps the per-token loss of A < 0 tokens at ``-c A``; None = off.
            Only with ``trust_region="clip"``.
        agg, norm_len, n_tokens, n_seqs: see :func:`reasonrl.losses.aggregate.aggregate` (global counts).
        trust_region: ``"clip"`` (PPO-clip, default) or ``"cispo"`` (clipped, detached IS weight
            times ``A log pi``; MiniMax-M1 tunes only the upper bound: a clip_low near 1 disables the lower).
        token_mask: optional (N, T) 0/1 mask (e.g. the negative veto) multiplied into the per-token
            objective *without* changing the normalisers: masked tokens still count in ``n_tokens``
            / ``|y_i|``, so masking lowers the loss scale instead of redistributing it. No metric sees it.

    Metrics (python floats, token means over the mask): ``loss/policy``, ``loss/clip_frac_low``
    (A<0, rho<1-clip_low; for CISPO any token whose weight was clipped at the lower bound),
    ``loss/clip_frac_high`` (A>0, rho>1+clip_high; CISPO: clipped at the upper bound), ``loss/clip_frac_dual``
    (A<0, rho>c), ``loss/ratio_mean``, ``loss/ratio_max``, ``loss/approx_kl`` (mean of
    ``exp(l_old - l) - (l_old - l) - 1``, the k3 estimator between behaviour and current policy).
    """
    _check_args(
        logp, old_logp, advantages, mask, ratio, clip_low, clip_high, dual_clip, agg, norm_len, trust_region, token_mask
    )
    adv = advantages.detach().to(logp.dtype)
    adv = adv.unsqueeze(-1).expand_as(logp) if adv.dim() == 1 else adv  # (N, T)
    log_ratio = _log_ratio(logp, old_logp, mask, ratio)  # (N, T)
    rho = torch.exp(log_ratio)  # (N, T)
    if trust_region == "cispo":
        s = _cispo(rho, adv, logp, mask, clip_low, clip_high)  # (N, T)
    else:
        s = _surrogate(rho, adv, clip_low, clip_high, dual_clip)  # (N, T)
    if token_mask is not None:
        s = s * token_mask.detach().to(s.dtype)  # (N, T); normalisers untouched (see docstring)
    loss = -aggregate(s, mask, agg, norm_len=norm_len, n_tokens=n_tokens, n_seqs=n_seqs)
    # approx_kl always uses the token log-ratio, whatever level the loss clips at
    token_log_ratio = _log_ratio(logp.detach(), old_logp, mask, "token")
    metrics = _metrics(loss, rho, token_log_ratio, adv, mask, clip_low, clip_high, dual_clip, trust_region)
    return loss, metrics
