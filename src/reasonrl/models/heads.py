"""FlowRL's log-partition head and the prompt features it reads. A part returns it from
``setup_modules`` as a :class:`reasonrl.parts.protocol.PartModule` (its own AdamW group, clip and
checkpoint file, never in the policy's module tree, so rollout engines, Ray weight pushes, the
reference copy and ``final/`` see the policy alone)."""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn


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
    out = model(
        input_ids=prompt_ids,
        attention_mask=prompt_mask,
        position_ids=positions,
        use_cache=False,
        output_hidden_states=True,
    )
    hidden = out.hidden_states[-1]  # (n, P, H)
    m = prompt_mask.to(hidden.dtype)[..., None]  # (n, P, 1)
    return (hidden * m).sum(1) / m.sum(1).clamp(min=1)  # (n, H)
