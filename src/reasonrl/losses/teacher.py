"""External-teacher terms: TGPO (reg and adv variants) and its baselines RKL-OPD and KDRL.

TGPO (Teacher-Guided Policy Optimization, arXiv 2605.13230; shared/specs/distill-and-data.md
section 3; the released code calls it ``tipo``) asks a frozen teacher for its greedy token
``y^T_t = argmax_v pi_T(v | x, y_<t)`` at every prefix of the student's own rollout and pushes the
student toward it. ``l^T_t = log pi_theta(y^T_t | x, y_<t)`` is the student's log-prob of that token.

Sign conventions (every function here returns a *loss* to minimise or an *advantage* to maximise,
as the rest of :mod:`reasonrl.losses`):

* :func:`tgpo_reg_loss` = ``+lambda_k * agg(-l^T)``: minimising it raises ``l^T``; its gradient in
  the student's logits is ``lambda_k w_t (softmax - onehot(y^T))`` (w_t the aggregation weight).
* :func:`tgpo_adv_advantages` = ``A_i + lambda_k exp(sg l^T_old)``: a bonus >= 0 added to the
  sequence advantage, larger where the old policy already gives the teacher token mass.
* :func:`rkl_opd_advantages` = ``log pi_T(y_t) - log pi_old(y_t)``: > 0 where the teacher likes the
  sampled token more than the student; its mean under the student's samples is
  ``-KL(pi_old || pi_T)``, so maximising it lowers the reverse KL.
* :func:`kdrl_loss` = ``+beta * agg(k(log pi_theta(y_t) - log pi_T(y_t)))``, i.e. the objective
  ``J_GRPO - beta KL(pi_theta || pi_T)`` of KDRL's docstring. The released ``compute_token_on_kdrl_loss``
  writes ``pg_loss - beta * KL`` into the *loss*, which minimised *raises* the KL; we follow the
  docstring (the test checks that a gradient step lowers the KL).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .aggregate import Count, aggregate, masked_mean
from .kl import kl_penalty

__all__ = [
    "kdrl_loss",
    "rkl_opd_advantages",
    "teacher_agreement",
    "teacher_coef",
    "tgpo_adv_advantages",
    "tgpo_reg_loss",
]


def teacher_coef(step: int, coef: float, decay: float, min_coef: float = 0.0) -> float:
    """``lambda_k = max(lambda_0 - (k - 1) delta, lambda_min)`` at the 1-based global step ``k``
    (TGPO's ``mix_trainer``: ``teacher_coef - (global_steps - 1) * decay_rate``, floored)."""
    if step < 1:
        raise ValueError(f"teacher_coef: the global step counts from 1, got {step}")
    return max(coef - (step - 1) * decay, min_coef)


def tgpo_reg_loss(
    teacher_token_logp: Tensor,
    mask: Tensor,
    *,
    coef: float,
    agg: str = "token-mean",
    norm_len: Count | None = None,
    n_tokens: Count | None = None,
    n_seqs: Count | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """TGPO-reg's term ``coef * agg(-l^T)``: (N, T) student log-probs of the teacher's ids, (N, T)
    mask -> scalar. ``agg`` and the global counts as the policy loss's, so micro-batches add up."""
    if teacher_token_logp.shape != mask.shape:
        raise ValueError(f"tgpo_reg_loss: shapes differ {tuple(teacher_token_logp.shape)} vs {tuple(mask.shape)}")
    nll = -teacher_token_logp  # (N, T) cross-entropy to the teacher's greedy token
    loss = coef * aggregate(nll, mask, agg, norm_len=norm_len, n_tokens=n_tokens, n_seqs=n_seqs)
    with torch.no_grad():
        metrics = {
            "teacher/tgpo_nll": float(masked_mean(nll, mask)),  # local token mean
            "teacher/tgpo_prob": float(masked_mean(teacher_token_logp.exp(), mask)),
            "teacher/tgpo_term": float(loss),
        }
    return loss, metrics


def tgpo_adv_advantages(seq_adv: Tensor, old_teacher_logp: Tensor, mask: Tensor, coef: float) -> Tensor:
    """TGPO-adv token advantages ``A_i + coef * exp(l^T_old)``: (R,) sequence advantages, (R, T) the
    old policy's log-probs of the teacher's ids, (R, T) mask -> (R, T), 0 off the mask."""
    m = mask.to(old_teacher_logp.dtype)  # (R, T)
    bonus = coef * old_teacher_logp.detach().exp()  # (R, T) sg: a constant of the PPO loss
    return (seq_adv[:, None].to(m.dtype) + bonus) * m  # (R, T)


def rkl_opd_advantages(
    teacher_logp: Tensor,
    old_logp: Tensor,
    mask: Tensor,
    *,
    coef: float = 1.0,
    seq_adv: Tensor | None = None,
    grpo_weight: float = 0.0,
) -> Tensor:
    """RKL-OPD token advantages ``coef (log pi_T(y_t) - log pi_old(y_t)) + grpo_weight A_i``: (R, T),
    (R, T), (R, T) mask [, (R,)] -> (R, T). ``grpo_weight=0`` is the released ``compute_rkl_advantage``
    (distillation alone); ``grpo_weight=1, coef=0.002`` its ``grpo_merge_rkl`` variant."""
    m = mask.to(teacher_logp.dtype)  # (R, T)
    adv = coef * (teacher_logp - old_logp).detach()  # (R, T) per-token reverse-KL reward
    if grpo_weight:
        if seq_adv is None:
            raise ValueError("rkl_opd_advantages: grpo_weight != 0 needs the sequence advantages seq_adv")
        adv = adv + grpo_weight * seq_adv[:, None].to(adv.dtype)  # (R, T)
    return adv * m


def kdrl_loss(
    logp: Tensor,
    teacher_logp: Tensor,
    mask: Tensor,
    *,
    coef: float,
    estimator: str = "k2",
    agg: str = "token-mean",
    norm_len: Count | None = None,
    n_tokens: Count | None = None,
    n_seqs: Count | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """KDRL's term ``+coef * agg(k(logp - teacher_logp))`` (see the module's sign convention): (N, T)
    student log-probs of the sampled tokens (with grad), (N, T) teacher's, (N, T) mask -> scalar.
    ``estimator`` k2 = ``0.5 (log pi_T - log pi_theta)^2`` is the released code's; k1, k3 as :mod:`.kl`."""
    kl = kl_penalty(logp, teacher_logp, estimator)  # (N, T), teacher detached
    loss = coef * aggregate(kl, mask, agg, norm_len=norm_len, n_tokens=n_tokens, n_seqs=n_seqs)
    with torch.no_grad():
        metrics = {"teacher/kdrl_kl": float(masked_mean(kl, mask)), "teacher/kdrl_term": float(loss)}
    return loss, metrics


def teacher_agreement(teacher_ids: Tensor, completion_ids: Tensor, mask: Tensor) -> float:
    """Fraction of the student's sampled tokens that equal the teacher's greedy token: (R, T) x3 ->
    float (1 - the released code's "mismatch ratio"); 0 for an empty mask."""
    m = mask.to(torch.float32)  # (R, T)
    return float(((teacher_ids == completion_ids).float() * m).sum() / m.sum().clamp(min=1))
