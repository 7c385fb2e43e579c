"""The optimiser-step schedule of the RL loop: the learning-rate factor, and how a batch's rows are
split into minibatches (kept out of :mod:`reasonrl.loop.trainer` so that it stays small)."""

from __future__ import annotations

import math
from typing import Callable

import torch


def lr_lambda(warmup: int, total: int, schedule: str, min_ratio: float) -> Callable[[int], float]:
    def factor(s: int) -> float:
        if s < warmup:
            return (s + 1) / warmup
        if schedule == "constant":
            return 1.0
        progress = min(1.0, (s - warmup) / max(1, total - warmup))
        return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    if schedule not in ("cosine", "constant"):
        raise ValueError(f"unknown optim.schedule {schedule!r}; valid: cosine, constant")
    return factor


def split_even(order: torch.Tensor, n: int) -> list[torch.Tensor]:
    """Exactly ``n`` consecutive parts of ``order`` whose sizes differ by at most one (empty parts
    only when it has fewer than ``n`` entries), so every scheduled minibatch step exists."""
    return list(order.tensor_split(n))


def group_rows(groups: torch.Tensor, group_size: int) -> torch.Tensor:
    """(g,) group indices -> (g * G,) their rows, group by group (rows are group-major)."""
    return (groups[:, None] * group_size + torch.arange(group_size)).flatten()


def clip_if_finite(params, max_norm: float) -> float | None:
    """Clip the gradients of ``params`` to total L2 norm ``max_norm`` and return their norm before
    clipping, or return None (gradients untouched) when that norm is not finite: a NaN or inf in any
    gradient makes the total norm NaN or inf, so one check covers every parameter. The norm is read
    to the host once: a check per parameter tensor costs one device sync each (~290 for a 0.5B
    model). ``torch.nn.utils.clip_grad_norm_`` is these two calls with the read in between."""
    grads = [p.grad for p in params if p.grad is not None]
    norm = torch.nn.utils.get_total_norm(grads)  # 0-dim; tensor(0.) when there are no gradients
    # FSDP's sharded gradients give a DTensor of partial norms: full_tensor() combines the ranks' parts
    value = float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)  # the step's one device-to-host read
    if not math.isfinite(value):
        return None
    torch.nn.utils.clip_grads_with_norm_(params, max_norm, norm)
    return value


def param_groups(policy_params: list, modules: dict[str, dict], optim) -> list[dict]:
    """AdamW's parameter groups: the policy's (the recipe's ``optim``) first, then one per part module
    (``{part key: {name: PartModule}}``, :class:`reasonrl.parts.protocol.PartModule`) with its own lr,
    betas, weight decay and gradient clip. Each group carries its ``name``, ``max_grad_norm`` and
    ``scheduled`` (whether the recipe's LR schedule scales it); a parameter in two groups is an error."""
    groups = [{"params": policy_params, "name": "policy", "max_grad_norm": optim.max_grad_norm, "scheduled": True}]
    seen = {id(p) for p in policy_params}
    for key, mods in modules.items():
        for name, pm in mods.items():
            params = [p for p in pm.module.parameters() if p.requires_grad]
            if any(id(p) in seen for p in params):
                raise ValueError(
                    f"part module '{key}.{name}' shares parameters with the policy or another part "
                    "module: a module a part owns must hold its own parameters"
                )
            seen.update(id(p) for p in params)
            groups.append(
                {
                    "params": params,
                    "name": f"{key}.{name}",
                    "lr": pm.lr,
                    "weight_decay": pm.weight_decay,
                    "betas": pm.betas or (optim.beta1, optim.beta2),
                    "max_grad_norm": pm.max_grad_norm or optim.max_grad_norm,
                    "scheduled": pm.schedule,
                }
            )
    return groups


def group_lambdas(groups: list[dict], factor: Callable[[int], float]) -> list[Callable[[int], float]]:
    """The LR factor of each group: the recipe's schedule, or a constant 1 for an unscheduled part module."""
    return [factor if g["scheduled"] else _constant for g in groups]


def _constant(_step: int) -> float:
    return 1.0


def clip_groups(groups: list[dict]) -> dict[str, float] | None:
    """Clip each parameter group's gradient to its own ``max_grad_norm`` (:func:`clip_if_finite`) and
    return each group's norm before clipping by name, or None when one is not finite (the step is
    then skipped whole). One host read per group."""
    norms: dict[str, float] = {}
    for g in groups:
        norm = clip_if_finite(g["params"], g["max_grad_norm"])
        if norm is None:
            return None
        norms[g["name"]] = norm
    return norms


def make_optimizer(
    groups: list[dict], optim, total: int
) -> tuple[torch.optim.AdamW, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW over ``groups`` (:func:`param_groups`; the recipe's ``optim`` gives the defaults) and its
    LR schedule over ``total`` optimiser steps, applied to the groups that follow it."""
    opt = torch.optim.AdamW(groups, lr=optim.lr, betas=(optim.beta1, optim.beta2), weight_decay=optim.weight_decay)
    factor = lr_lambda(optim.warmup_steps, total, optim.schedule, optim.min_lr_ratio)
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, group_lambdas(groups, factor))
