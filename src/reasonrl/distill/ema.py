"""A slow copy of the policy's trainable weights, and scoring with it without a second module.

An exponential moving average of the weights is the usual teacher that does not drift with the
student step by step (mean teacher, Tarvainen & Valpola 2017; BYOL's target network): SSOPD's
``ssopd.teacher=ema`` (spec distill-and-data.md section 1 (b): "theta-bar = current weights with
no grad. Option: pi_old or EMA"). Only the trainable parameters are averaged (with LoRA: the
adapters), so the copy costs what the optimiser's first moment costs; it is a plain dict of
tensors, so a part keeps it in its checkpointed state and a resume restores it exactly.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

__all__ = ["trainable_snapshot", "ema_update", "WithWeights"]


def trainable_snapshot(model) -> dict[str, Tensor]:
    """A detached float32 copy of ``model``'s trainable parameters, by name."""
    return {n: p.detach().float().clone() for n, p in model.named_parameters() if p.requires_grad}


@torch.no_grad()
def ema_update(ema: dict[str, Tensor], model, decay: float) -> float:
    """In place: ``e <- decay * e + (1 - decay) * p`` for every averaged parameter; returns the
    largest |p - e| after the update (how far the teacher trails the policy)."""
    if not 0.0 <= decay <= 1.0:
        raise ValueError(f"ema_update: decay must be in [0, 1], got {decay}")
    params = dict(model.named_parameters())
    missing = sorted(set(ema) - set(params))
    if missing:
        raise ValueError(f"ema_update: the EMA holds parameters the model lacks: {missing[:3]}")
    gap = 0.0
    for name, e in ema.items():
        p = params[name].detach().to(e.device, e.dtype)
        e.mul_(decay).add_(p, alpha=1.0 - decay)
        gap = max(gap, float((p - e).abs().max())) if e.numel() else gap
    return gap


class WithWeights:
    """``model`` called with ``weights`` in place of its own parameters of those names (the rest
    its own), through ``torch.func.functional_call``: the EMA teacher's forward on the policy's
    module, no second copy of the frozen weights. Quacks as the model for the scoring helpers
    (``parameters()`` for the device, ``__call__`` for the forward)."""

    def __init__(self, model, weights: dict[str, Tensor]):
        self.model, self.weights = model, weights

    def parameters(self):
        return self.model.parameters()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        dtype = {n: p.dtype for n, p in self.model.named_parameters()}
        weights = {n: w.to(dtype.get(n, w.dtype)) for n, w in self.weights.items()}
        return torch.func.functional_call(self.model, weights, args, kwargs)
