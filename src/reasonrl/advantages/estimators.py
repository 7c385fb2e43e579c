"""Advantage estimators: group rewards in, per-response advantages out.

Every estimator is a pure function ``(B, G) -> (B, G)``: ``B`` prompts, ``G`` sampled responses
per prompt, one scalar reward per response. The result is the advantage of each response, which
the loss gives to every token of that response.

* :func:`grpo` -- group z-score (DeepSeekMath, arXiv 2402.03300), with the std optionally taken
  over the whole batch (TRL ``scale_rewards="batch"``) or dropped.
* :func:`dr_grpo` -- group-centred reward, no std (Dr. GRPO, arXiv 2503.20783).
* :func:`rloo` -- leave-one-out baseline (Ahmadian et al. 2024, arXiv 2402.14740).
* :func:`reinforce_pp` -- REINFORCE++ global batch normalisation (Hu 2025, arXiv 2501.03262).
* :func:`reinforce_pp_group` -- REINFORCE++-baseline: group mean subtracted, then one batch std.
* :func:`reinforce` -- the reward itself, no baseline (REINFORCE, Williams 1992): the estimator a
  critic part (PPO's GAE, :mod:`reasonrl.parts.critic`) replaces, so groups of one are allowed.

A group whose rewards are all equal carries no learning signal; every estimator returns exactly
0 for it (not a rounding residue divided by ``eps``) -- except :func:`reinforce` and :func:`reinforce_pp`,
which have no group baseline by design (reinforce_pp gives exactly 0 only to a batch whose rewards are all
equal; reinforce never centres).
"""

from __future__ import annotations

import functools
from typing import Callable

import torch
from torch import Tensor

__all__ = [
    "grpo",
    "dr_grpo",
    "rloo",
    "reinforce",
    "reinforce_pp",
    "reinforce_pp_group",
    "SCALES",
    "ESTIMATORS",
    "get_estimator",
]

SCALES = ("group", "batch", "none")


def _check_rewards(rewards: Tensor) -> Tensor:
    """Validate a (B, G) reward tensor and return it as floating point."""
    if not isinstance(rewards, Tensor):
        raise TypeError(f"rewards must be a torch.Tensor of shape (B, G), got {type(rewards).__name__}")
    if rewards.dim() != 2:
        raise ValueError(f"rewards must have shape (B, G) = (prompts, samples), got {tuple(rewards.shape)}")
    if not rewards.is_floating_point():
        rewards = rewards.to(torch.get_default_dtype())
    return rewards


def _constant_groups(rewards: Tensor) -> Tensor:  # (B, G) -> (B, 1) bool
    """Groups whose rewards are all equal; their advantage is forced to exactly 0."""
    return rewards.amax(dim=1, keepdim=True) == rewards.amin(dim=1, keepdim=True)


def _centred(rewards: Tensor) -> Tensor:  # (B, G) -> (B, G)
    """r - group mean, exactly 0 in constant groups (the float mean of equal values can be off by an ulp)."""
    centred = rewards - rewards.mean(dim=1, keepdim=True)  # (B, G)
    return centred.masked_fill(_constant_groups(rewards), 0.0)


def grpo(rewards: Tensor, scale: str = "group", eps: float = 1e-6, unbiased: bool = True) -> Tensor:
    """GRPO advantage ``(r - mean_group(r)) / (std + eps)``: (B, G) -> (B, G).

    Args:
        rewards: (B, G) rewards, one row per prompt.
        scale: ``"group"`` divides by each group's std (DeepSeekMath); ``"batch"`` divides by one
            std over all B*G rewards while still centring per group (TRL ``scale_rewards="batch"``,
            which keeps easy/hard prompts from being up-weighted, cf. Dr. GRPO); ``"none"`` only
            centres (then equal to :func:`dr_grpo`).
        eps: added to the std so near-constant groups do not explode.
        unbiased: ``True`` uses the N-1 std like ``torch.std`` in verl and TRL; ``False`` uses N.

    A group with all-equal rewards gets exactly 0.
    """
    if scale not in SCALES:
        raise ValueError(f"unknown scale {scale!r}; valid values: {', '.join(SCALES)}")
    rewards = _check_rewards(rewards)
    centred = _centred(rewards)  # (B, G)
    if scale == "none":
        return centred
    correction = 1 if unbiased else 0
    n = rewards.shape[1] if scale == "group" else rewards.numel()
    if n <= correction:
        # G = 1: the N-1 std is undefined, but every such group is constant, so its advantage is 0
        return centred
    if scale == "group":
        std = rewards.std(dim=1, keepdim=True, correction=correction)  # (B, 1)
    else:
        std = rewards.std(correction=correction)  # () one scale for the whole batch
    adv = centred / (std + eps)  # (B, G)
    return adv.masked_fill(_constant_groups(rewards), 0.0)


def dr_grpo(rewards: Tensor) -> Tensor:
    """Dr. GRPO advantage ``r - mean_group(r)``: (B, G) -> (B, G).

    Dr. GRPO drops the std division because it gives too-easy and too-hard prompts (small std)
    more weight than their signal deserves (Liu et al. 2025, §3).
    """
    return _centred(_check_rewards(rewards))


def rloo(rewards: Tensor) -> Tensor:
    """REINFORCE leave-one-out advantage ``r_i - mean_{j != i} r_j``: (B, G) -> (B, G).

    The baseline excludes the response itself, so it is independent of that response and the
    estimator stays unbiased (Kool et al. 2019; Ahmadian et al. 2024). Needs G >= 2.
    Algebraically it is ``G / (G - 1) * (r_i - mean(r))``.
    """
    rewards = _check_rewards(rewards)
    g = rewards.shape[1]
    if g < 2:
        raise ValueError(f"rloo needs at least 2 samples per prompt (G >= 2), got G={g}")
    baseline = (rewards.sum(dim=1, keepdim=True) - rewards) / (g - 1)  # (B, G) mean of the others
    adv = rewards - baseline  # (B, G)
    return adv.masked_fill(_constant_groups(rewards), 0.0)


def _batch_std(values: Tensor, unbiased: bool) -> Tensor | None:  # (B, G) -> () or None
    """One std over all B*G values; None when it is undefined (a single value with the N-1 form)."""
    correction = 1 if unbiased else 0
    if values.numel() <= correction:
        return None
    return values.std(correction=correction)


def reinforce_pp(rewards: Tensor, eps: float = 1e-6, unbiased: bool = True) -> Tensor:
    """REINFORCE++ advantage ``(r - mean_batch(r)) / (std_batch(r) + eps)``: (B, G) -> (B, G).

    REINFORCE++ (Hu 2025, arXiv 2501.03262) drops the per-prompt baseline and normalises over the
    whole batch, so a prompt's advantage does not depend on how hard its group found it. A group
    with equal rewards therefore gets a non-zero advantage unless the whole batch is constant
    (which gives exactly 0). ``unbiased=True`` is the N-1 std (``torch.std``), as in :func:`grpo`.
    """
    rewards = _check_rewards(rewards)
    if bool(rewards.max() == rewards.min()):
        return torch.zeros_like(rewards)
    centred = rewards - rewards.mean()  # (B, G)
    std = _batch_std(rewards, unbiased)  # () ; never None here: a non-constant batch has >= 2 values
    return centred / (std + eps)


def reinforce_pp_group(rewards: Tensor, eps: float = 1e-6, unbiased: bool = True) -> Tensor:
    """REINFORCE++-baseline ``c / (std_batch(c) + eps)`` with ``c = r - mean_group(r)``: (B, G) -> (B, G).

    The group mean is the baseline (it removes the prompt's difficulty); one std over the whole
    batch of centred values sets the scale (Hu 2025, arXiv 2501.03262, "REINFORCE++-baseline").
    Differs from ``grpo(scale="batch")`` in the std: that one is taken over the raw rewards, this
    one over the centred values [inferred from the OpenRLHF description; the brief's choice].
    Constant groups get exactly 0.
    """
    rewards = _check_rewards(rewards)
    centred = _centred(rewards)  # (B, G), exactly 0 in constant groups
    if bool((centred == 0).all()):
        return centred
    std = _batch_std(centred, unbiased)  # ()
    return centred / (std + eps)


def reinforce(rewards: Tensor) -> Tensor:
    """REINFORCE's advantage: the reward itself, ``A = r`` (Williams 1992; no baseline): (B, G) -> (B, G).

    Compares nothing inside a group, so G = 1 is fine. Its use here is as the placeholder a critic
    part overwrites with GAE (PPO: the learned value is the baseline); alone it is high-variance.
    """
    return _check_rewards(rewards).clone()


Estimator = Callable[..., Tensor]

ESTIMATORS: dict[str, Estimator] = {
    "grpo": grpo,
    "dr_grpo": dr_grpo,
    "rloo": rloo,
    "reinforce_pp": reinforce_pp,
    "reinforce_pp_baseline": reinforce_pp_group,
    "reinforce": reinforce,
}


def get_estimator(name: str) -> Estimator:
    """The estimator registered under ``name`` in :data:`ESTIMATORS`."""
    try:
        return ESTIMATORS[name]
    except KeyError:
        raise ValueError(
            f"unknown advantage estimator {name!r}; valid names: {', '.join(sorted(ESTIMATORS))}"
        ) from None


@functools.lru_cache(maxsize=None)
def group_relative(estimator: str) -> bool:
    """True when the estimator compares a prompt's samples with each other, so a group of one
    sample gets no signal: probed on two one-sample groups with different rewards (an all-zero
    advantage, or a refusal as rloo's, means group-relative). Covers estimators added later."""
    if estimator not in ESTIMATORS:
        return False  # reported by the advantage.estimator rule
    try:
        adv = get_estimator(estimator)(torch.tensor([[0.0], [1.0]]))  # (B=2, G=1)
    except ValueError:
        return True
    return bool((adv == 0).all())
