"""Pairwise and supervised terms on demonstrations: sigmoid DPO, SFT, and FEST's decaying weight.

Pure functions on tensors; no model. FEST (FEw-ShoT demonstration-guided RLVR, arXiv 2605.15012;
shared/specs/distill-and-data.md section 5) adds ``alpha_e * L_sup`` to the RL loss, where

* ``L_sup`` is sigmoid DPO (Rafailov et al. 2023, arXiv 2305.18290) with the demonstration as the
  chosen response and an incorrect rollout of the policy as the rejected one:
  ``-log sigmoid(beta * ((l_c - ref_c) - (l_r - ref_r)))``, ``l(y)`` the sum of the completion's
  token log-probs (``length_norm``: their mean, the spec's GRPO-token-mean variant), or the SFT
  ablation ``-mean_t log pi(y+_t)`` (spec (b), ``sup_loss="sft"``);
* ``alpha_e`` decays with ``e``, the number of completed passes over the demonstration set
  (spec (b): ``alpha_0 * gamma**e``, alpha_0 = 1, gamma = 0.5; options linear-to-zero and cosine
  over ``E`` passes). The DPO form is [paper-page summary], the decay form and constants [inferred].

The DPO metrics follow TRL's DPOTrainer naming: implicit rewards ``beta * (l - ref)`` of each side,
their margin, and the accuracy (chosen reward above the rejected one).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "ALL_CORRECT",
    "DECAY_SCHEDULES",
    "NEGATIVES",
    "demo_weight",
    "dpo_sigmoid",
    "pick_rejected",
    "sequence_logp",
    "sft_nll",
]

DECAY_SCHEDULES = ("exponential", "linear", "cosine")
NEGATIVES = ("one", "all")  # rejected rollouts per demonstration: the first incorrect one, or every incorrect one
ALL_CORRECT = ("skip", "lowest_likelihood")  # a demo prompt whose rollouts are all correct (spec (b): either)


def sequence_logp(logp: Tensor, mask: Tensor, length_norm: bool = False) -> Tensor:
    """(N, T) token log-probs, (N, T) 0/1 mask -> (N,) ``l(y)``: the masked sum, or with
    ``length_norm`` the masked mean (an empty row gives 0 either way)."""
    m = mask.to(logp.dtype)  # (N, T)
    total = (logp * m).sum(-1)  # (N,)
    return total / m.sum(-1).clamp(min=1) if length_norm else total  # (N,)


def dpo_sigmoid(
    policy_chosen: Tensor, ref_chosen: Tensor, policy_rejected: Tensor, ref_rejected: Tensor, beta: float = 0.1
) -> tuple[Tensor, dict[str, Tensor]]:
    """Sigmoid DPO per pair: four (N,) sequence log-probs -> (N,) losses and (N,) detached metrics.

    ``z = beta * ((l_c - ref_c) - (l_r - ref_r))``, loss ``-log sigmoid(z)`` = softplus(-z), computed
    with ``logsigmoid`` so a large margin never overflows. Metrics per pair: ``chosen_reward`` =
    beta (l_c - ref_c), ``rejected_reward`` = beta (l_r - ref_r), ``margin`` = z, ``accuracy`` =
    1[chosen_reward > rejected_reward] (TRL's rewards/chosen, rewards/rejected, rewards/margins,
    rewards/accuracies)."""
    if beta <= 0:
        raise ValueError(f"dpo beta must be > 0, got {beta}")
    shapes = {tuple(x.shape) for x in (policy_chosen, ref_chosen, policy_rejected, ref_rejected)}
    if len(shapes) != 1:
        raise ValueError(f"dpo inputs must be four (N,) tensors of one shape, got {sorted(shapes)}")
    chosen = beta * (policy_chosen - ref_chosen)  # (N,)
    rejected = beta * (policy_rejected - ref_rejected)  # (N,)
    z = chosen - rejected  # (N,)
    loss = -F.logsigmoid(z)  # (N,)
    metrics = {
        "chosen_reward": chosen.detach(),
        "rejected_reward": rejected.detach(),
        "margin": z.detach(),
        "accuracy": (chosen > rejected).to(z.dtype).detach(),
    }  # (N,) each
    return loss, metrics


def sft_nll(logp: Tensor, mask: Tensor) -> Tensor:
    """(N, T) token log-probs of the demonstrations, (N, T) mask -> (N,) ``-mean_t log pi(y+_t)``
    (FEST's ``sup_loss="sft"`` ablation; one token mean per demonstration)."""
    return -sequence_logp(logp, mask, length_norm=True)  # (N,)


def demo_weight(
    passes: int, alpha0: float = 1.0, gamma: float = 0.5, schedule: str = "exponential", total_passes: int = 8
) -> float:
    """``alpha_e`` after ``passes`` completed passes over the demonstrations.

    ``exponential``: ``alpha0 * gamma**e`` (the spec's default: 1, 0.5, 0.125 after 0, 1, 3 passes);
    ``linear``: ``alpha0 * max(0, 1 - e / E)``; ``cosine``: ``alpha0 * (1 + cos(pi * min(e, E) / E)) / 2``,
    ``E = total_passes`` (both reach 0 after E passes and stay there)."""
    if passes < 0 or total_passes < 1:
        raise ValueError(f"demo_weight: passes must be >= 0 and total_passes >= 1, got {passes}, {total_passes}")
    if schedule == "exponential":
        return alpha0 * gamma**passes
    if schedule == "linear":
        return alpha0 * max(0.0, 1.0 - passes / total_passes)
    if schedule == "cosine":
        return alpha0 * 0.5 * (1.0 + math.cos(math.pi * min(passes, total_passes) / total_passes))
    raise ValueError(f"unknown demo weight schedule {schedule!r}; valid: {', '.join(DECAY_SCHEDULES)}")


def pick_rejected(
    correct: Tensor, seq_logp: Tensor, negatives: str = "one", all_correct: str = "skip"
) -> tuple[Tensor, Tensor]:
    """The rejected side of each demonstration's pairs from its own rollouts (spec (b): "prefer an
    incorrect one; if all are correct, skip or use the lowest-likelihood one").

    (B, G) 0/1 correctness and (B, G) behaviour sequence log-probs of the rollouts of B demo
    prompts -> (P,) demo index and (P,) rollout column of each pair, demo-major. ``negatives="one"``
    takes the first incorrect rollout (the G samples are i.i.d., so this is a uniform pick) and
    ``"all"`` every incorrect one; a demo without an incorrect rollout gets no pair (``skip``) or one
    with its least likely rollout (``lowest_likelihood``, the first on ties)."""
    if negatives not in NEGATIVES or all_correct not in ALL_CORRECT:
        raise ValueError(
            f"pick_rejected: negatives must be one of {NEGATIVES} and all_correct one of {ALL_CORRECT}, "
            f"got {negatives!r}, {all_correct!r}"
        )
    if correct.shape != seq_logp.shape or correct.dim() != 2:
        raise ValueError(
            f"pick_rejected: correct and seq_logp must be (B, G) alike, got {tuple(correct.shape)} "
            f"and {tuple(seq_logp.shape)}"
        )
    demo, col = [], []
    for b in range(correct.shape[0]):
        wrong = (correct[b] == 0).nonzero().squeeze(-1).tolist()  # columns of incorrect rollouts
        if wrong:
            chosen_cols = wrong if negatives == "all" else wrong[:1]
        elif all_correct == "lowest_likelihood":
            chosen_cols = [int(seq_logp[b].argmin())]
        else:
            chosen_cols = []
        demo += [b] * len(chosen_cols)
        col += chosen_cols
    return torch.tensor(demo, dtype=torch.long), torch.tensor(col, dtype=torch.long)  # (P,), (P,)
