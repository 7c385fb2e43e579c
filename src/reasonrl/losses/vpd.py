"""VPD maths (Variational Policy Distillation, arXiv 2605.15113): posterior, trust-region controller, losses.

Pure functions; no model. Spec: shared/specs/distill-and-data.md section 4. Only the EM split and
the roles come from the abstract (teacher ``q_phi(y | x, f)`` = variational posterior refined by RL
on outcomes inside an adaptive trust region around the student; student ``pi_theta(y | x)``
distilled on its own rollouts); every form below is [inferred] with the spec's defaults.

* ELBO: ``log P(R=1|x) >= E_q[R] - beta KL(q || pi)`` (rewards scaled by 1/beta), maximised by the
  tilted posterior ``q* ∝ pi exp(R / beta)`` (:func:`optimal_posterior`, :func:`elbo`).
* E-step penalty: per-token ``KL(q_phi(.|x, f, y<t) || sg pi_theta(.|x, y<t))`` on the teacher's own
  samples, exact over the vocabulary (:func:`exact_token_kl`) or the k3 estimate on the sampled
  token (:func:`k3_token_kl`); its coefficient follows PPO's adaptive KL rule (:func:`adapt_beta`).
* M-step: per-token divergence of the student from the frozen teacher on the student's rollouts,
  reverse KL ``KL(pi_theta || sg q_phi)`` by default (:func:`m_step_token_loss`).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .divergence import per_token_divergence

__all__ = [
    "M_DIVERGENCES",
    "E_KL_ESTIMATORS",
    "optimal_posterior",
    "categorical_kl",
    "elbo",
    "adapt_beta",
    "exact_token_kl",
    "k3_token_kl",
    "sampled_kl",
    "row_token_mean",
    "m_step_token_loss",
]

M_DIVERGENCES = ("reverse_kl", "forward_kl", "sampled")
E_KL_ESTIMATORS = ("exact", "k3")


def optimal_posterior(prior: Tensor, reward: Tensor, beta: float) -> Tensor:
    """``q*(y) = pi(y) exp(R(y) / beta) / Z``: (K,) prior probabilities, (K,) rewards -> (K,)."""
    if beta <= 0:
        raise ValueError(f"optimal_posterior needs beta > 0, got {beta}")
    logits = prior.log() + reward / beta  # (K,) log of the unnormalised posterior
    return logits.softmax(-1)  # (K,)


def categorical_kl(q: Tensor, p: Tensor) -> Tensor:
    """``KL(q || p) = sum_y q log(q / p)`` over the last axis, 0 log 0 = 0: (..., K), (..., K) -> (...)."""
    return torch.where(q > 0, q * (q.log() - p.log()), torch.zeros_like(q)).sum(-1)


def elbo(q_logits: Tensor, prior: Tensor, reward: Tensor, beta: float) -> Tensor:
    """The E-step objective on a finite outcome space: ``E_q[R] - beta KL(q || pi)`` with ``q =
    softmax(q_logits)``: (K,) logits (the teacher's parameters), (K,) prior, (K,) rewards -> ()."""
    q = q_logits.softmax(-1)  # (K,)
    return (q * reward).sum() - beta * categorical_kl(q, prior)  # ()


def adapt_beta(beta: float, measured_kl: float, target: float, factor: float = 2.0, band: float = 1.5) -> float:
    """PPO's adaptive KL controller (Schulman et al. 2017, sec. 4; spec section 4 (b)): a measured KL
    above ``band * target`` multiplies ``beta`` by ``factor``, one below ``target / band`` divides it,
    anything between leaves it. (delta 0.05: KL 0.1 -> 0.1 becomes 0.2; 0.02 -> 0.05; 0.05 -> 0.1.)"""
    if beta <= 0 or target <= 0 or factor < 1 or band < 1:
        raise ValueError(
            f"adapt_beta needs beta > 0, target > 0, factor >= 1, band >= 1; "
            f"got beta={beta}, target={target}, factor={factor}, band={band}"
        )
    if measured_kl > band * target:
        return beta * factor
    if measured_kl < target / band:
        return beta / factor
    return beta


def exact_token_kl(teacher_logits: Tensor, student_logits: Tensor, temperature: float = 1.0) -> Tensor:
    """``KL(q_phi || sg pi_theta)`` per position over the whole vocabulary, the gradient through the
    teacher only: (N, T, V) teacher logits (grad), (N, T, V) student logits -> (N, T)."""
    # per_token_divergence's "reverse_kl" is KL(first || sg second): the teacher is the one trained here
    return per_token_divergence(teacher_logits, student_logits, kind="reverse_kl", temperature=temperature)


def k3_token_kl(teacher_logp: Tensor, student_logp: Tensor) -> Tensor:
    """Schulman's k3 estimate of ``KL(q || pi)`` on tokens sampled from q: ``r - 1 - log r`` with
    ``r = pi / q`` (>= 0, unbiased): (N, T) teacher log-probs (grad), (N, T) student log-probs -> (N, T)."""
    log_r = student_logp.detach() - teacher_logp  # (N, T)
    return log_r.exp() - 1.0 - log_r  # (N, T)


def sampled_kl(teacher_logp: Tensor, student_logp: Tensor, mask: Tensor) -> float:
    """The controller's measurement: the k1 estimate ``mean_t (log q - log pi)`` over ``mask`` (N, T) of
    tokens sampled from q (unbiased for KL(q || pi); needs log-probs only, no vocabulary-size tensor)."""
    m = mask.to(teacher_logp.dtype)  # (N, T)
    return float(((teacher_logp - student_logp) * m).sum() / m.sum().clamp(min=1))


def row_token_mean(values: Tensor, mask: Tensor) -> Tensor:
    """(N, T) per-token values, (N, T) mask -> (N,) mean over each row's masked tokens (0 for an empty row)."""
    m = mask.to(values.dtype)  # (N, T)
    return (values * m).sum(-1) / m.sum(-1).clamp(min=1)  # (N,)


def m_step_token_loss(
    kind: str,
    *,
    student_logits: Tensor | None = None,
    teacher_logits: Tensor | None = None,
    student_logp: Tensor | None = None,
    teacher_logp: Tensor | None = None,
    temperature: float = 1.0,
) -> Tensor:
    """The M-step's per-token loss (N, T), the gradient through the student only.

    ``reverse_kl`` (default): ``KL(pi_theta || sg q_phi)`` from (N, T, V) logits of both;
    ``forward_kl``: ``KL(sg q_phi || pi_theta)``; ``sampled``: the sampled-token estimate as a
    negative reward, ``sg(log pi - log q) * log pi`` from (N, T) log-probs, whose gradient is
    ``E[(log pi - log q) grad log pi]``, the per-token reverse-KL gradient."""
    if kind not in M_DIVERGENCES:
        raise ValueError(f"unknown M-step divergence {kind!r}; valid: {', '.join(M_DIVERGENCES)}")
    if kind == "sampled":
        return (student_logp.detach() - teacher_logp.detach()) * student_logp  # (N, T)
    return per_token_divergence(student_logits, teacher_logits, kind=kind, temperature=temperature)  # (N, T)
