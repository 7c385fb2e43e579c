"""LoRA (Hu et al. 2021, arXiv:2106.09685) for any recipe, through ``peft``; and the KL reference.

With adapters the frozen base *is* the initial policy (peft initialises B = 0, so W + BA = W at
step 0), so the reference of a KL term or anchor is the same model with its adapters switched
off: no second copy of the weights. Full fine-tuning keeps a frozen deep copy, as before.
"""

from __future__ import annotations

import copy
from contextlib import contextmanager, nullcontext
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch


def is_lora(model) -> bool:
    """True for a ``peft`` model (it carries its adapter configs)."""
    return hasattr(model, "peft_config") and hasattr(model, "disable_adapter")


def base_model(model):
    """The HF model under the adapters (the model itself without them): where decoder layers live."""
    return model.get_base_model() if is_lora(model) else model


def apply_lora(model, lora, seed: int = 0):
    """``model`` wrapped with trainable LoRA adapters (its own weights frozen) as ``lora`` says (a
    :class:`reasonrl.config.train.Lora`, not imported: config sits above models). ``lora.r == 0`` or a
    model that already has adapters (a resumed trainer given the wrapped model) is returned as is.
    peft injects the adapter layers into ``model`` in place. The A matrices' random init draws from
    a generator seeded by ``seed`` alone, not from whatever the global RNG holds: two trainers of one
    run start from the same adapters, and the caller's RNG stream is left as it was."""
    if lora.r == 0 or is_lora(model):
        return model
    from peft import LoraConfig, get_peft_model

    targets = lora.targets if isinstance(lora.targets, str) else list(lora.targets)
    config = LoraConfig(
        r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout, target_modules=targets, task_type="CAUSAL_LM"
    )
    device = next(model.parameters()).device
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        return get_peft_model(model, config)


def add_adapter(model, name: str, seed: int = 0):
    """A second LoRA adapter ``name`` on a peft ``model``, configured as its ``default`` one (VPD's
    teacher beside the student). peft adds it inactive and frozen (``add_adapter``); here both
    adapters are left trainable, so an optimiser built afterwards holds them both, and ``default``
    stays active. Its A matrices draw from a generator seeded by ``seed`` alone, as :func:`apply_lora`."""
    if not is_lora(model) or "default" not in model.peft_config:
        raise ValueError("add_adapter needs a peft model with a 'default' adapter (lora.r > 0)")
    if name in model.peft_config:
        raise ValueError(f"the model already has an adapter named {name!r}")
    device = next(model.parameters()).device
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        model.add_adapter(name, copy.deepcopy(model.peft_config["default"]))
    for key, p in model.named_parameters():
        if "lora_" in key:
            p.requires_grad_(True)
    return model


def adapter_parameters(model, name: str) -> dict[str, torch.nn.Parameter]:
    """The parameters of adapter ``name`` (keys as ``named_parameters`` gives them)."""
    return {k: p for k, p in model.named_parameters() if "lora_" in k and f".{name}." in k}


@contextmanager
def use_adapter(model, name: str) -> Iterator[torch.nn.Module]:
    """``with use_adapter(model, "teacher"):`` forwards (and generation) run through adapter ``name``;
    on exit ``default`` is active again. peft's ``set_adapter`` also makes the active adapter the only
    trainable one; the adapters' ``requires_grad`` flags are put back as they were on exit, so the
    optimiser's parameters keep receiving gradients from graphs built inside or outside the block."""
    flags = {k: p.requires_grad for k, p in model.named_parameters() if "lora_" in k}
    before = model.active_adapter
    model.set_adapter(name)
    try:
        yield model
    finally:
        model.set_adapter(before)
        for k, p in model.named_parameters():
            if k in flags:
                p.requires_grad_(flags[k])


def merged_copy(model):
    """A plain HF model with the adapters folded into its weights (W + (alpha / r) B A); ``model`` is untouched."""
    return copy.deepcopy(model).merge_and_unload()


class Reference:
    """The reference policy of a KL term: a frozen copy of the initial model (full fine-tuning), or
    the policy itself with its adapters off (LoRA). ``with ref.scoring() as m:`` gives the model to
    score with, in eval mode."""

    def __init__(self, model):
        self.policy = model
        self.frozen = None if is_lora(model) else copy.deepcopy(model).eval().requires_grad_(False)

    @property
    def has_weights(self) -> bool:
        """Whether the reference holds weights of its own (saved beside the checkpoints)."""
        return self.frozen is not None

    @contextmanager
    def scoring(self) -> Iterator[torch.nn.Module]:
        if self.frozen is not None:
            yield self.frozen
            return
        was_training = self.policy.training
        self.policy.eval()  # as the frozen copy: no dropout in the reference's scores
        try:
            with self.policy.disable_adapter():
                yield self.policy
        finally:
            self.policy.train(was_training)


# ------------------------------------------------------------------ a population of adapters (PopuLoRA)
def add_adapters(model, names, seed_of) -> Any:
    """Adapters ``names`` (besides ``default``) on a peft ``model``, each configured as ``default`` with
    its A matrices drawn from ``seed_of(name)`` (:func:`add_adapter`); those already there are kept."""
    for name in names:
        if name != "default" and name not in model.peft_config:
            add_adapter(model, name, seed_of(name))
    return model


def adapter_modules(model, name: str) -> dict[str, tuple[torch.nn.Parameter, torch.nn.Parameter]]:
    """Adapter ``name``'s factor pairs by adapted module (layer x projection): module path ->
    (``lora_A`` weight (r, k), ``lora_B`` weight (d, r)); delta W = (alpha / r) B A. The pair of a
    module is always handled together (a B is meaningless without its A)."""
    found: dict[str, dict[str, torch.nn.Parameter]] = {}
    for key, p in model.named_parameters():
        for side in ("lora_A", "lora_B"):
            if f".{side}.{name}." in key:
                found.setdefault(key.split(f".{side}.")[0], {})[side] = p
    broken = [m for m, pair in found.items() if len(pair) != 2]
    if not found or broken:
        raise ValueError(
            f"adapter {name!r}: no LoRA modules"
            if not found
            else f"adapter {name!r}: {broken[0]} lacks its A or B factor"
        )
    return {m: (pair["lora_A"], pair["lora_B"]) for m, pair in found.items()}


def adapter_factors(model, name: str) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Float64 numpy copies of adapter ``name``'s (A (r, k), B (d, r)) per module (the operators' input)."""
    return {
        m: (a.detach().cpu().double().numpy(), b.detach().cpu().double().numpy())
        for m, (a, b) in adapter_modules(model, name).items()
    }


def set_adapter_factors(model, name: str, factors: dict[str, tuple[np.ndarray, np.ndarray]]) -> None:
    """Write ``factors`` (module -> (A, B), as :func:`adapter_factors` gives) into adapter ``name`` in place
    (the parameters keep their identity, so the optimiser still holds them); every module, same shapes."""
    modules = adapter_modules(model, name)
    if set(factors) != set(modules):
        raise ValueError(f"adapter {name!r}: factors for {len(factors)} modules, the model has {len(modules)}")
    with torch.no_grad():
        for m, (a, b) in modules.items():
            new_a, new_b = factors[m]
            if tuple(new_a.shape) != tuple(a.shape) or tuple(new_b.shape) != tuple(b.shape):
                raise ValueError(
                    f"adapter {name!r} module {m}: shapes {new_a.shape}, {new_b.shape} != "
                    f"{tuple(a.shape)}, {tuple(b.shape)} (the rank must stay the same)"
                )
            a.copy_(torch.from_numpy(np.ascontiguousarray(new_a)).to(a))
            b.copy_(torch.from_numpy(np.ascontiguousarray(new_b)).to(b))


def reset_optimizer_state(optimizer, params) -> int:
    """Forget the optimiser's state (AdamW's moments and step count) of ``params``: they restart as if
    new (a PBT offspring). Returns how many had state. The optimiser's checkpoint then lacks them too,
    so a resumed run restarts them the same way."""
    dropped = 0
    for p in params:
        dropped += int(optimizer.state.pop(p, None) is not None)
    return dropped


def score_by_adapter(model, adapters: Sequence[str | None] | None, score: Callable[[torch.Tensor | None], tuple]):
    """``score(idx)`` (a tuple of (m, ...) tensors or None for the rows ``idx``; None: all rows) run once per
    adapter on that adapter's rows, under it, and put back in row order. ``adapters`` None (or all None):
    one call on every row, under the active adapter. Gradients flow through the reassembly."""
    if adapters is None or all(a is None for a in adapters):
        return score(None)
    outs, rows = [], []
    for name in dict.fromkeys(adapters):
        idx = torch.tensor([i for i, a in enumerate(adapters) if a == name])  # (m,)
        with use_adapter(model, name) if name is not None else nullcontext():
            outs.append(score(idx))
        rows.append(idx)
    back = torch.argsort(torch.cat(rows))  # (n,) where each original row sits in the concatenation
    return tuple(None if parts[0] is None else torch.cat(parts)[back.to(parts[0].device)] for parts in zip(*outs))
