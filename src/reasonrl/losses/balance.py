"""Distribution matching by trajectory balance: FlowRL, DISA and TraFL (shared/specs/objectives.md 1.5, 7, 8).

The three methods train the policy toward the reward-tilted target ``pi*(y|x) ∝ pi_ref(y|x) exp(beta r(x,y))``
instead of maximising reward. They share one squared residual (a GFlowNet trajectory-balance
condition with length-normalised log-probs, FlowRL's convention, arXiv 2509.15207):

    delta_i = log Z(x) + lbar_theta(y_i) - lbar_ref(y_i) - beta r_hat_i,      L = mean_i w_i delta_i^2

and differ in where ``log Z`` comes from (FlowRL: a learned head; DISA: an offline importance-sampled
estimate, frozen; TraFL: a head again) and how ``lbar`` is measured (autoregressive token mean, or,
for a masked-diffusion LM, an ELBO surrogate). Everything here is a pure function of tensors:

* :func:`sequence_weight` -- FlowRL's detached sequence importance weight ``w`` and its variants;
* :func:`trajectory_balance` -- the residual and the loss, normalised by the minibatch's global row
  count so that any micro-batch split adds up to the same value and gradient;
* :func:`log_partition_is` -- DISA's offline estimate of ``log Z(x)`` from N proposals, with the
  effective sample sizes of its weights;
* :func:`draw_masks` / :func:`elbo_estimate` -- TraFL's masked-token likelihood surrogate (LLaDA's
  ELBO, arXiv 2502.09992; d1's one-step estimate is its t = 1 case, arXiv 2504.12216).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = [
    "WEIGHTS",
    "draw_masks",
    "elbo_estimate",
    "ess",
    "log_partition_is",
    "sequence_weight",
    "token_mean",
    "trajectory_balance",
]

# FlowRL's variants of w (verl recipe/flowrl/flowrl_actor.py): "clip" = clamp(w, 1 - lo, 1 + hi)
# (flowrl_clip), "cap" = min(w, cap) (the TIS variant's cap of 10), "none" = the raw ratio (vanilla),
# "one" = 1 (on-policy; TraFL's default, its old likelihoods being noisy estimates themselves)
WEIGHTS = ("clip", "cap", "none", "one")
_MAX_LOG_W = 20.0  # exp(20) ~ 5e8: a stale row cannot make w infinite


def token_mean(logp: Tensor, mask: Tensor) -> Tensor:
    """(N, T) token log-probs, (N, T) 0/1 mask -> (N,) their masked mean ``lbar`` (0 for an empty row)."""
    m = mask.to(logp.dtype)
    return (logp * m).sum(-1) / m.sum(-1).clamp(min=1)


def sequence_weight(
    logp: Tensor,
    old_logp: Tensor,
    mask: Tensor,
    mode: str = "clip",
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    cap: float = 10.0,
) -> Tensor:
    """(N, T) policy and behaviour log-probs, (N, T) mask -> (N,) detached ``w``.

    The raw weight is the sequence ratio ``exp(sum_t m (l - l_old))`` (a product of token ratios, as
    FlowRL's code: not GSPO's geometric mean); ``mode`` picks its variant (:data:`WEIGHTS`)."""
    if mode not in WEIGHTS:
        raise ValueError(f"unknown importance weight {mode!r}; valid: {', '.join(WEIGHTS)}")
    if mode == "one":
        return torch.ones(logp.shape[0], dtype=logp.dtype, device=logp.device)
    m = mask.to(logp.dtype)
    log_w = ((logp.detach() - old_logp) * m).sum(-1).clamp(-_MAX_LOG_W, _MAX_LOG_W)  # (N,)
    w = log_w.exp()
    if mode == "clip":
        return w.clamp(1.0 - clip_low, 1.0 + clip_high)
    return w.clamp(max=cap) if mode == "cap" else w


def trajectory_balance(
    log_z: Tensor, lbar: Tensor, lbar_ref: Tensor, reward: Tensor, weight: Tensor, beta: float, n_seqs: int
) -> tuple[Tensor, dict[str, float]]:
    """The trajectory-balance loss of n rows of a minibatch of ``n_seqs`` rows.

    Inputs are (n,): ``log_z`` (a head's output with grad, or a frozen table's value), ``lbar`` (the
    policy's length-normalised log-likelihood, with grad), ``lbar_ref``, ``reward`` (``r_hat``: the
    group-normalised or the raw reward), ``weight`` (detached). ``delta = log_z + lbar - lbar_ref -
    beta reward``; the loss is ``sum_i w_i delta_i^2 / n_seqs``, so micro-batches of one minibatch add
    up to ``mean_i w_i delta_i^2`` over it. Metrics ending in ``_term`` are such sums too (exact
    minibatch means once added up); ``balance/delta_std`` is this micro-batch's own."""
    delta = log_z + lbar - lbar_ref - beta * reward  # (n,)
    n = max(int(n_seqs), 1)
    loss = (weight.detach() * delta.pow(2)).sum() / n
    d = delta.detach()
    metrics = {
        "balance/loss_term": float(loss.detach()),
        "balance/delta_term": float(d.sum()) / n,
        "balance/delta_abs_term": float(d.abs().sum()) / n,
        "balance/log_z_term": float(log_z.detach().sum()) / n,
        "balance/w_term": float(weight.sum()) / n,
        "balance/logp_gap_term": float((lbar - lbar_ref).detach().sum()) / n,
        "balance/delta_std": float(d.std()) if d.numel() > 1 else 0.0,
    }
    return loss, metrics


def ess(log_w: Tensor) -> float:
    """(N,) log-weights -> the effective sample size ``(sum w)^2 / sum w^2`` (Kish), in [1, N]."""
    return float((2 * torch.logsumexp(log_w, 0) - torch.logsumexp(2 * log_w, 0)).exp())


def log_partition_is(lbar_ref: Tensor, lbar_mu: Tensor, reward: Tensor, beta: float) -> tuple[float, dict[str, float]]:
    """DISA's offline estimate of ``log Z(x) = log E_{y ~ pi_ref}[exp(beta r)]`` from N proposals ``y_n ~ mu``.

    (N,) proposal log-likelihoods under the reference and the proposal model (the same convention as
    the training residual: length-normalised by default) and (N,) raw rewards ->
    ``log Z_hat = logsumexp_n(L_ref - L_mu + beta r_n) - log N`` and its diagnostics: ``ess``, the
    Kish ESS of the importance weights ``pi_ref / mu`` (N when mu is the reference), and
    ``ess_tilted``, that of the terms ``exp(L_ref - L_mu + beta r)`` the estimate sums (with a large
    beta it falls to the number of rewarded proposals: the estimate rests on those)."""
    if not (lbar_ref.shape == lbar_mu.shape == reward.shape) or lbar_ref.dim() != 1 or not len(lbar_ref):
        raise ValueError(
            f"log_partition_is needs three (N,) tensors, N >= 1; got {tuple(lbar_ref.shape)}, "
            f"{tuple(lbar_mu.shape)}, {tuple(reward.shape)}"
        )
    log_is = (lbar_ref - lbar_mu).double()  # (N,) log pi_ref / mu
    terms = log_is + beta * reward.double()  # (N,)
    log_z = float(torch.logsumexp(terms, 0)) - math.log(len(terms))
    return log_z, {
        "ess": ess(log_is),
        "ess_tilted": ess(terms),
        "n": float(len(terms)),
        "reward_mean": float(reward.double().mean()),
    }


def draw_masks(
    rows: int, k: int, length: int, generator: torch.Generator, t: float | None = None, t_min: float = 1e-3
) -> tuple[Tensor, Tensor]:
    """TraFL's noise for ``rows`` sequences of ``length`` positions, ``k`` Monte Carlo draws each:
    (rows, k) mask levels and (rows, k, length) bool masks, each position masked with probability t.

    ``t=None``: ``t ~ U(t_min, 1]`` as LLaDA's forward process (``(1 - eps) u + eps``, eps = ``t_min``);
    a number: that fixed level (d1's style; ``t=1`` masks everything: the one-step estimate).
    Drawn on the CPU from ``generator``, so the same seed gives the same masks on any device."""
    if t is None:
        u = torch.rand(rows, k, generator=generator, dtype=torch.float64)
        levels = ((1.0 - t_min) * (1.0 - u) + t_min).float()  # (rows, k) in (t_min, 1]
    else:
        levels = torch.full((rows, k), float(t))
    masks = torch.rand(rows, k, length, generator=generator) < levels[..., None]  # (rows, k, length)
    return levels, masks


def elbo_estimate(token_logp: Tensor, masked: Tensor, t: Tensor, scored: Tensor) -> Tensor:
    """The masked-diffusion ELBO surrogate of each sequence, length-normalised (TraFL's ``lbar``).

    ``token_logp`` (N, K, L): log p(y_j | x, y masked by draw k) at every position; ``masked`` (N, K, L)
    bool; ``t`` (N, K) the draws' mask levels; ``scored`` (N, L) 0/1, the response positions (its
    length n = the row's sum). ``l_hat = (1/K) sum_k (1/t_k) sum_{j masked, scored} log p_kj`` and
    ``lbar = l_hat / n``: unmasked positions and positions outside the response contribute nothing."""
    m = masked.to(token_logp.dtype) * scored[:, None, :].to(token_logp.dtype)  # (N, K, L)
    per_draw = (token_logp * m).sum(-1) / t.to(token_logp.dtype)  # (N, K)
    n = scored.to(token_logp.dtype).sum(-1).clamp(min=1)  # (N,)
    return per_draw.mean(-1) / n  # (N,)
