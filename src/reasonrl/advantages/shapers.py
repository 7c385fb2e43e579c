"""Advantage shapers: run after the estimator, before the loss.

* :func:`edas` -- Error Diversity Advantage Shaping (Liu et al., arXiv 2605.17333): the penalty
  of a wrong rollout is scaled by how common its wrong answer is within the group.
* :func:`negative_veto_mask` -- Mu-GRPO's negative-advantage veto (Tian et al., arXiv
  2605.17570): in a response with A < 0, drop every token update from a trigger token onwards.

Both are pure functions; each returns ``(result, metrics)`` with metrics as python floats.
Only the concepts come from the abstracts; the exact formulas are this library's spec
(``specs/objectives.md`` sections 2 and 3) and are marked [inferred] where the spec marks them.
"""

from __future__ import annotations

from collections import Counter
from typing import Hashable, Optional, Sequence

import torch
from torch import Tensor

__all__ = ["NONE_POLICIES", "VETO_TRIGGERS", "edas", "negative_veto_mask"]

NONE_POLICIES = ("cluster", "singleton")
VETO_TRIGGERS = ("out_of_band", "ratio_high", "ratio_low", "prefix_logratio")

Answer = Optional[Hashable]


# --- EDAS --------------------------------------------------------------------------------------


def _check_edas(
    advantages: Tensor,
    answers: Sequence[Sequence[Answer]],
    correct: Tensor,
    gamma: float,
    none_policy: str,
    lambda_min: float | None,
    lambda_max: float | None,
) -> tuple[int, int]:
    if not isinstance(advantages, Tensor) or advantages.dim() not in (2, 3):
        raise ValueError(
            "advantages must be a (B, G) or (B, G, T) tensor, got "
            f"{tuple(advantages.shape) if isinstance(advantages, Tensor) else type(advantages).__name__}"
        )
    b, g = advantages.shape[:2]
    if tuple(correct.shape) != (b, g):
        raise ValueError(f"correct must have shape (B, G) = {(b, g)}, got {tuple(correct.shape)}")
    if len(answers) != b or any(len(row) != g for row in answers):
        raise ValueError(
            f"answers must be B={b} lists of G={g} answers (str or None), got lengths {[len(row) for row in answers]}"
        )
    if gamma < 0:
        raise ValueError(f"gamma must be >= 0 (0 = no shaping), got {gamma}")
    if none_policy not in NONE_POLICIES:
        raise ValueError(f"unknown none_policy {none_policy!r}; valid values: {', '.join(NONE_POLICIES)}")
    if lambda_min is not None and lambda_max is not None and lambda_min > lambda_max:
        raise ValueError(f"need lambda_min <= lambda_max, got {lambda_min} > {lambda_max}")
    return b, g


def _cluster_sizes(answers: Sequence[Answer], wrong: Sequence[bool], none_policy: str) -> tuple[list[float], int]:
    """n(a_i) for each wrong rollout (0 for correct ones) and the number of distinct wrong answers.

    With ``none_policy="singleton"`` every unparsable answer gets a key of its own (its index).
    """

    def key(i: int, a: Answer) -> Hashable:
        return ("<none>", i) if a is None and none_policy == "singleton" else ("answer", a)

    keys = {i: key(i, a) for i, (a, w) in enumerate(zip(answers, wrong)) if w}
    counts = Counter(keys.values())
    sizes = [float(counts[keys[i]]) if i in keys else 0.0 for i in range(len(answers))]
    return sizes, len(counts)


def edas(
    advantages: Tensor,
    answers: Sequence[Sequence[Answer]],
    correct: Tensor,
    *,
    gamma: float = 1.0,
    none_policy: str = "cluster",
    lambda_min: float | None = None,
    lambda_max: float | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """EDAS: ``A'_i = lambda_i * A_i`` for wrong rollouts with ``A_i < 0``; (B, G) -> (B, G).

    ``lambda_i = n(a_i)^gamma / mean_{j in W} n(a_j)^gamma``, where W is the group's wrong
    rollouts and ``n(a)`` the number of them whose normalised final answer is ``a`` (spec section
    3; the functional form is [inferred] -- the paper's abstract only says frequent wrong answers
    are penalised more and rare ones less). Because lambda has mean 1 over W, a group whose wrong
    rollouts all carry the same negative advantage (binary rewards with GRPO / Dr. GRPO) keeps its
    total negative advantage mass; only its distribution changes. That no longer holds exactly
    when some wrong rollout has ``A >= 0`` (it is left untouched) or lambda is clipped.

    Args:
        advantages: (B, G) advantages from any estimator, or (B, G, T) per token (lambda is then
            applied to every token of the rollout whose value is < 0).
        answers: B lists of G normalised final answers; ``None`` = no parsable answer.
        correct: (B, G) bool / 0-1; W = the rollouts with ``correct == 0``.
        gamma: strength, >= 0; ``gamma = 0`` returns the input unchanged.
        none_policy: ``"cluster"`` puts all ``None`` answers of a group in one cluster,
            ``"singleton"`` makes each its own [inferred, spec default "cluster"].
        lambda_min, lambda_max: optional clip of lambda (default none) [inferred].

    If every rollout is wrong, GRPO-like estimators already give A = 0, so EDAS changes nothing.

    Metrics: ``edas/diversity`` (mean over groups with |W| > 0 of #distinct wrong answers / |W|;
    0 when no group has a wrong rollout), ``edas/lambda_max`` (largest lambda applied to a
    negative advantage; 1 when none is), ``edas/frac_groups_shaped`` (fraction of the B groups
    with at least one advantage changed).
    """
    b, g = _check_edas(advantages, answers, correct, gamma, none_policy, lambda_min, lambda_max)
    wrong = ~correct.to(torch.bool)  # (B, G)
    sizes, diversity = [], []
    for i in range(b):
        row, distinct = _cluster_sizes(answers[i], wrong[i].tolist(), none_policy)
        sizes.append(row)
        n_wrong = int(wrong[i].sum())
        if n_wrong:
            diversity.append(distinct / n_wrong)
    n = torch.tensor(sizes, dtype=torch.float64).reshape(b, g)  # (B, G), 0 for correct rollouts
    lam = _edas_lambda(n, wrong, gamma, lambda_min, lambda_max).to(advantages.dtype)  # (B, G)
    if advantages.dim() == 3:
        lam, wrong = lam.unsqueeze(-1), wrong.unsqueeze(-1)  # (B, G, 1)
    apply = wrong & (advantages < 0)  # (B, G) or (B, G, T)
    shaped = torch.where(apply, lam * advantages, advantages)
    changed = (shaped != advantages).flatten(1).any(dim=1)  # (B,); flatten, not reshape(b, -1): B = 0 is allowed
    applied = torch.where(apply, lam.expand_as(advantages), torch.full_like(advantages, float("-inf")))
    lam_max = float(applied.max()) if bool(apply.any()) else 1.0
    return shaped, {
        "edas/diversity": sum(diversity) / len(diversity) if diversity else 0.0,
        "edas/lambda_max": lam_max,
        "edas/frac_groups_shaped": float(changed.to(torch.float64).mean()) if b else 0.0,
    }


def _edas_lambda(
    n: Tensor, wrong: Tensor, gamma: float, lambda_min: float | None, lambda_max: float | None
) -> Tensor:  # (B, G) -> (B, G)
    """``n^gamma / mean_W n^gamma`` on the wrong rollouts, 1 elsewhere."""
    if gamma == 0:
        return torch.ones_like(n)  # exactly the identity, whatever the clip says
    powered = torch.where(wrong, n.pow(gamma), torch.zeros_like(n))  # (B, G)
    n_wrong = wrong.sum(dim=1, keepdim=True).clamp(min=1)  # (B, 1)
    mean = powered.sum(dim=1, keepdim=True) / n_wrong  # (B, 1); >= 1 whenever the group has W
    lam = torch.where(wrong, powered / mean.clamp(min=1e-12), torch.ones_like(n))
    if lambda_min is not None or lambda_max is not None:
        lam = torch.where(wrong, lam.clamp(min=lambda_min, max=lambda_max), lam)
    return lam


# --- negative-advantage veto -------------------------------------------------------------------


def _check_veto(
    ratio: Tensor, advantages: Tensor, mask: Tensor, trigger: str, thresholds: dict[str, float | None]
) -> None:
    if ratio.dim() != 2 or mask.shape != ratio.shape:
        raise ValueError(f"ratio and mask must both be (N, T); got {tuple(ratio.shape)} and {tuple(mask.shape)}")
    if advantages.shape not in (ratio.shape[:1], ratio.shape):
        raise ValueError(
            f"advantages must be (N,) = {tuple(ratio.shape[:1])} or (N, T) = "
            f"{tuple(ratio.shape)}, got {tuple(advantages.shape)}"
        )
    if trigger not in VETO_TRIGGERS:
        raise ValueError(f"unknown veto trigger {trigger!r}; valid values: {', '.join(VETO_TRIGGERS)}")
    needs = {"ratio_high": "tau_hi", "ratio_low": "tau_lo", "prefix_logratio": "tau_cum"}
    if trigger in needs and thresholds[needs[trigger]] is None:
        raise ValueError(f"trigger={trigger!r} needs {needs[trigger]}")
    if trigger == "out_of_band" and (not 0 <= thresholds["clip_low"] < 1 or thresholds["clip_high"] < 0):
        raise ValueError(f"need 0 <= clip_low < 1 and clip_high >= 0, got {thresholds}")


def _row_is_negative(advantages: Tensor, on: Tensor) -> Tensor:  # -> (N,) bool
    """Per-row sign: the (N,) value, or the first trainable token's value of an (N, T) advantage."""
    if advantages.dim() == 1:
        return advantages < 0
    first = on.to(torch.int64).argmax(dim=-1, keepdim=True)  # (N, 1) first masked position
    return (advantages.gather(-1, first).squeeze(-1) < 0) & on.any(dim=-1)


def _triggers(
    ratio: Tensor,
    on: Tensor,
    trigger: str,
    clip_low: float,
    clip_high: float,
    tau_lo: float | None,
    tau_hi: float | None,
    tau_cum: float | None,
) -> Tensor:  # (N, T) bool
    rho = torch.where(on, ratio, torch.ones_like(ratio))  # padding may hold garbage; rho = 1 there
    if trigger == "out_of_band":
        hit = (rho < 1.0 - clip_low) | (rho > 1.0 + clip_high)
    elif trigger == "ratio_high":
        hit = rho > tau_hi
    elif trigger == "ratio_low":
        hit = rho < tau_lo
    else:
        # log of the prefix importance weight prod_{s<=t} rho_s (only trainable tokens count)
        hit = torch.log(rho).cumsum(dim=-1).abs() > tau_cum
    return hit & on


def negative_veto_mask(
    ratio: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    trigger: str = "out_of_band",
    clip_low: float = 0.5,
    clip_high: float = 1.0,
    tau_lo: float | None = None,
    tau_hi: float | None = None,
    tau_cum: float | None = None,
    include_trigger: bool = True,
) -> tuple[Tensor, dict[str, float]]:
    """Mu-GRPO negative-advantage veto: an (N, T) 0/1 mask, 0 from the trigger token t* onwards.

    In a response with A < 0, once a token's ratio leaves the trust region the rest of the
    response comes from states the current policy would rarely reach (its prefix weight
    prod rho_s has collapsed or exploded), yet per-token PPO still pushes those tokens down at
    full weight; Mu-GRPO drops that suffix (arXiv 2605.17570; the trigger rule is [inferred],
    spec section 2). Rows with A >= 0 are never vetoed.

    Args:
        ratio: (N, T) token ratios ``rho = pi / pi_old`` (detached here).
        advantages: (N,) or (N, T); a row is negative if its value (for (N, T): its first
            trainable token's value) is < 0.
        mask: (N, T), 1 = trainable token; only those can trigger.
        trigger: ``"out_of_band"`` (default: rho < 1-clip_low or rho > 1+clip_high, the relaxed
            band [0.5, 2.0] by default [inferred]), ``"ratio_high"`` (rho > tau_hi),
            ``"ratio_low"`` (rho < tau_lo), ``"prefix_logratio"`` (|sum_{s<=t} m log rho_s| > tau_cum).
        include_trigger: veto the trigger token itself (default) or only what follows it.

    Multiply the result into the loss's mask (``policy_loss(..., token_mask=veto)``).
    Metrics: ``veto/frac_tokens`` (vetoed trainable tokens / trainable tokens) and
    ``veto/frac_rows`` (rows that are negative and have a trigger / N).
    """
    _check_veto(
        ratio,
        advantages,
        mask,
        trigger,
        dict(clip_low=clip_low, clip_high=clip_high, tau_lo=tau_lo, tau_hi=tau_hi, tau_cum=tau_cum),
    )
    on = mask != 0  # (N, T)
    hit = _triggers(ratio.detach(), on, trigger, clip_low, clip_high, tau_lo, tau_hi, tau_cum)  # (N, T)
    seen = hit.to(torch.int64).cumsum(dim=-1)  # (N, T) triggers at or before t
    if not include_trigger:
        seen = seen - hit.to(torch.int64)  # triggers strictly before t
    negative = _row_is_negative(advantages.detach(), on)  # (N,)
    vetoed = (seen > 0) & negative.unsqueeze(-1)  # (N, T)
    dtype = ratio.dtype if ratio.is_floating_point() else torch.get_default_dtype()
    veto = (~vetoed).to(dtype)  # (N, T)
    n_on = int(on.sum())
    rows = hit.any(dim=-1) & negative  # (N,)
    return veto, {
        "veto/frac_tokens": float((vetoed & on).sum()) / n_on if n_on else 0.0,
        "veto/frac_rows": float(rows.sum()) / ratio.shape[0] if ratio.shape[0] else 0.0,
    }
