"""Trainable modules a part adds beside the policy: FlowRL's log Z head, a critic's value head.

A part's ``setup_model`` calls :func:`add_side_module` (``docs/parts.md``). The module lives on the
model object but outside its module tree, so ``model.parameters()``, ``named_parameters()`` and
``state_dict()`` never list it: the rollout engines, the Ray workers' weight pushes, the reference
model and the saved HF model directory see the policy alone. The trainer gathers the side modules
itself: each gets its own AdamW parameter group (its own learning rate and weight decay, or the
recipe's), its parameters join the gradient clipping and the data-parallel gradient sum, and its
weights are saved in and restored from the checkpoint (``trainer_state.pt``, bit-exact).

Also here: FlowRL's log-partition head and the prompt features it reads.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

ATTR = "_reasonrl_side_modules"  # the model's attribute holding {name: SideModule}


@dataclass
class SideModule:
    module: nn.Module
    lr: float | None = None  # None: the recipe's optim.lr
    weight_decay: float | None = None  # None: the recipe's optim.weight_decay


def add_side_module(model: Any, name: str, module: nn.Module, lr: float | None = None,
                    weight_decay: float | None = None) -> nn.Module:
    """Attach ``module`` to ``model`` as the side module ``name`` (trained in its own parameter group
    with ``lr``); returns it. A second module of the same name is an error."""
    found = side_modules(model)
    if name in found:
        raise ValueError(f"the model already has a side module named {name!r}")
    mods = dict(found)
    mods[name] = SideModule(module, lr, weight_decay)
    object.__setattr__(model, ATTR, mods)  # a plain attribute: never a submodule of the policy
    return module


def side_modules(model: Any) -> dict[str, SideModule]:
    """Every side module of ``model`` by name (empty when it has none)."""
    return dict(getattr(model, ATTR, None) or {})


def side_module(model: Any, name: str) -> nn.Module:
    found = side_modules(model)
    if name not in found:
        raise KeyError(f"the model has no side module {name!r} (it has {sorted(found) or 'none'}): the part that "
                       "adds it in setup_model must be in the recipe")
    return found[name].module


def side_parameters(model: Any) -> list[nn.Parameter]:
    """The trainable parameters of every side module, in name order (the order of their groups)."""
    return [p for _, s in sorted(side_modules(model).items()) for p in s.module.parameters() if p.requires_grad]


def param_groups(model: Any, lr: float, weight_decay: float) -> list[dict[str, Any]]:
    """AdamW groups: the policy's trainable parameters first, then one group per side module (name
    order), each with its own ``lr`` / ``weight_decay`` where it set one. A group's ``name`` says whose."""
    groups = [{"params": [p for p in model.parameters() if p.requires_grad], "lr": lr, "weight_decay": weight_decay,
               "name": "policy"}]
    for name, s in sorted(side_modules(model).items()):
        groups.append({"params": [p for p in s.module.parameters() if p.requires_grad], "name": name,
                       "lr": lr if s.lr is None else s.lr,
                       "weight_decay": weight_decay if s.weight_decay is None else s.weight_decay})
    return groups


def side_state(model: Any) -> dict[str, dict[str, Tensor]]:
    """Every side module's weights (detached CPU copies), by name: what a checkpoint keeps."""
    return {name: {k: v.detach().cpu().clone() for k, v in s.module.state_dict().items()}
            for name, s in sorted(side_modules(model).items())}


def load_side_state(model: Any, saved: dict[str, dict[str, Tensor]]) -> None:
    """Restore the side modules' weights in place; the saved names must be the model's."""
    have = side_modules(model)
    if set(saved) != set(have):
        raise RuntimeError(f"the checkpoint's side modules {sorted(saved)} are not the model's {sorted(have)}: "
                           "resume with the run's recipe")
    for name, weights in saved.items():
        have[name].module.load_state_dict(weights, strict=True)


class LogZHead(nn.Module):
    """FlowRL's log-partition head (verl recipe/flowrl ``ProjZModule``): ``layers - 1`` blocks of
    Linear -> GELU -> LayerNorm -> Dropout, then Linear -> 1, on a prompt's mean-pooled hidden state."""

    def __init__(self, hidden: int, layers: int = 3, dropout: float = 0.1):
        super().__init__()
        blocks: list[nn.Module] = []
        for _ in range(layers - 1):
            blocks += [nn.Linear(hidden, hidden), nn.GELU(), nn.LayerNorm(hidden), nn.Dropout(dropout)]
        self.net = nn.Sequential(*blocks, nn.Linear(hidden, 1))

    def forward(self, pooled: Tensor) -> Tensor:  # (n, hidden) -> (n,)
        return self.net(pooled.to(self.net[-1].weight.dtype)).squeeze(-1)


def pooled_prompt_hidden(model: Any, prompt_ids: Tensor, prompt_mask: Tensor) -> Tensor:
    """(n, P) left-padded prompts -> (n, hidden) the mean over real prompt tokens of the last layer's
    hidden state (grad as the caller's mode). A causal LM's prompt states do not depend on the
    completion, so a forward of the prompts alone gives FlowRL's values; a model that pools its own
    prompt (a masked-diffusion LM: the prompt beside a fully masked canvas) provides ``pooled_prompt``."""
    own = getattr(model, "pooled_prompt", None)
    if own is not None:
        return own(prompt_ids, prompt_mask)
    positions = (prompt_mask.long().cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=prompt_ids, attention_mask=prompt_mask, position_ids=positions, use_cache=False,
                output_hidden_states=True)
    hidden = out.hidden_states[-1]  # (n, P, H)
    m = prompt_mask.to(hidden.dtype)[..., None]  # (n, P, 1)
    return (hidden * m).sum(1) / m.sum(1).clamp(min=1)  # (n, H)
