"""Token-level divergences between a student's and a teacher's next-token distributions.

The distillation terms of the self-teacher methods (SSOPD arXiv 2605.17497, EGRSD arXiv
2605.13255, NudgeRL, VPD) and of on-policy distillation from an external teacher compare, at every
position of a completion, the student's distribution with a teacher's (the same model under another
context, or another model). The teacher side never carries a gradient here: it is a target.

Kinds (p_T teacher, p_S student, both tempered by ``temperature``):
- ``forward_kl``: KL(p_T || p_S) = sum_v p_T (log p_T - log p_S); mass-covering, its gradient in the
  student's logits is (p_S - p_T) / temperature.
- ``reverse_kl``: KL(p_S || p_T); mode-seeking.
- ``jsd``: the generalised Jensen-Shannon divergence of on-policy distillation (GKD, Agarwal et al.
  arXiv 2306.13649, as TRL's GKD trainer defines it): with M = beta p_T + (1 - beta) p_S,
  beta KL(p_T || M) + (1 - beta) KL(p_S || M); beta=0 is *defined* as forward KL and beta=1 as
  reverse KL (the mixture formula itself goes to 0 at both ends, so small interior betas scale
  the term down: choose the endpoints for pure KLs).
``top_k``: both distributions restricted to the teacher's k most likely tokens and renormalised
there (the truncated variant; memory for a large vocabulary is the caller's concern, see
:mod:`reasonrl.distill.context`). ``clip``: D_t <- min(D_t, clip) per token (a clipped token gives
no gradient), as OPSD-style methods bound outlier positions.
"""

from __future__ import annotations

import torch
from torch import Tensor

DIVERGENCES = ("forward_kl", "reverse_kl", "jsd")


def _kl(logp: Tensor, logq: Tensor) -> Tensor:  # (..., V), (..., V) -> (...) KL(p || q), 0 log 0 = 0
    p = logp.exp()
    return torch.where(p > 0, p * (logp - logq), torch.zeros_like(p)).sum(-1)


def _restrict(logp_s: Tensor, logp_t: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """Both log-distributions on the teacher's top-k support, renormalised: (N, T, V) -> (N, T, k)."""
    top = logp_t.topk(k, dim=-1).indices  # (N, T, k)
    s, t = logp_s.gather(-1, top), logp_t.gather(-1, top)
    return s - s.logsumexp(-1, keepdim=True), t - t.logsumexp(-1, keepdim=True)


def per_token_divergence(
    student_logits: Tensor,
    teacher_logits: Tensor,
    *,
    kind: str = "forward_kl",
    beta: float = 0.5,
    temperature: float = 1.0,
    top_k: int | None = None,
) -> Tensor:
    """(N, T, V) student logits (with grad), (N, T, V) teacher logits -> (N, T) divergence per position."""
    if kind not in DIVERGENCES:
        raise ValueError(f"unknown divergence {kind!r}; valid: {', '.join(DIVERGENCES)}")
    if not 0 <= beta <= 1 or temperature <= 0 or (top_k is not None and top_k < 1):
        raise ValueError(
            f"token_divergence: beta must be in [0, 1], temperature > 0, top_k >= 1 or None; "
            f"got beta={beta}, temperature={temperature}, top_k={top_k}"
        )
    if student_logits.shape != teacher_logits.shape:
        raise ValueError(
            f"student and teacher logits differ in shape: {tuple(student_logits.shape)} vs "
            f"{tuple(teacher_logits.shape)} (same tokenizer and positions needed)"
        )
    logp_s = (student_logits.float() / temperature).log_softmax(-1)  # (N, T, V)
    logp_t = (teacher_logits.detach().float() / temperature).log_softmax(-1)  # (N, T, V) a target: no grad
    if top_k is not None and top_k < logp_s.shape[-1]:
        logp_s, logp_t = _restrict(logp_s, logp_t, top_k)
    if kind == "forward_kl" or (kind == "jsd" and beta == 0):
        return _kl(logp_t, logp_s)
    if kind == "reverse_kl" or beta == 1:
        return _kl(logp_s, logp_t)
    # log M = log(beta p_T + (1 - beta) p_S), computed in log space
    log_m = torch.logaddexp(logp_t + torch.log(torch.tensor(beta)), logp_s + torch.log(torch.tensor(1 - beta)))
    return beta * _kl(logp_t, log_m) + (1 - beta) * _kl(logp_s, log_m)


def token_divergence(
    student_logits: Tensor,
    teacher_logits: Tensor,
    mask: Tensor,
    *,
    kind: str = "forward_kl",
    beta: float = 0.5,
    temperature: float = 1.0,
    top_k: int | None = None,
    clip: float | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """Token-mean divergence over ``mask`` (N, T) and its metrics; see the module docstring."""
    d = per_token_divergence(
        student_logits, teacher_logits, kind=kind, beta=beta, temperature=temperature, top_k=top_k
    )  # (N, T)
    m = mask.to(d.dtype)
    n = m.sum().clamp(min=1)
    clipped = torch.zeros_like(d, dtype=torch.bool) if clip is None else (d > clip) & (m > 0)
    if clip is not None:
        d = torch.minimum(d, torch.full_like(d, clip))
    loss = (d * m).sum() / n
    raw = d.detach() * m
    metrics = {
        "distill/divergence": float(raw.sum() / n),
        "distill/divergence_max": float(raw.max()) if raw.numel() else 0.0,
        "distill/clip_frac": float(clipped.sum() / n),
        "distill/tokens": float(m.sum()),
    }
    return loss, metrics
