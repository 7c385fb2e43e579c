"""Value models for PPO's critic: a value head on hidden states, and a separate critic model.

* :class:`ValueHead` -- ``Linear(H, 1)`` on a decoder's last hidden state (after its final norm): the
  value V(s_t) of the state before token t, read at the position whose logits score token t (the
  same slice as the policy's log-probs, so value t and log-prob t describe one step).
* :class:`CriticModel` -- a decoder of its own (no LM head) plus a value head: verl's separate critic,
  initialised from a checkpoint (GRLO: the same base as the actor, spec envs-selfplay-eval 8 (b)).
  A directory that holds ``value_head.safetensors`` beside an HF causal-LM checkpoint is a *causal
  LM with a value head* (what :func:`save_critic` writes); its head is loaded too, else the head
  starts fresh.

Values are computed on (prompt, completion) rows exactly as :func:`reasonrl.models.scoring.score_completions`
lays them out: left-padded prompts, right-padded completions, positions from the attention mask.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path

import torch
from torch import nn

from ..errors import MissingPathError
from .lora import base_model, is_lora, merged_copy
from .scoring import _positions, capture_last_hidden

HEAD_FILE = "value_head.safetensors"


class ValueHead(nn.Module):
    """(..., H) hidden states -> (...) values. The weight starts at N(0, 1 / (H + 1)^2) from its own
    seeded generator (OpenRLHF's value-head init: small, so the first values sit near 0) and the bias at 0."""

    def __init__(self, hidden: int, seed: int = 0):
        super().__init__()
        self.linear = nn.Linear(hidden, 1)
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            self.linear.weight.copy_(torch.randn(self.linear.weight.shape, generator=gen) / (hidden + 1))
            self.linear.bias.zero_()

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.linear(hidden.to(self.linear.weight.dtype)).squeeze(-1)


class CriticModel(nn.Module):
    """A separate critic: a decoder (its own weights, trained) and a :class:`ValueHead`."""

    def __init__(self, decoder: nn.Module, head: ValueHead):
        super().__init__()
        self.decoder, self.head = decoder, head

    def forward(self, prompt_ids, prompt_mask, completion_ids, completion_mask) -> torch.Tensor:
        """(r, P) prompts, (r, T) completions -> (r, T) values V(s_t), 0 on padding."""
        T = completion_ids.shape[1]
        device = self.head.linear.weight.device
        ids = torch.cat([prompt_ids, completion_ids], 1).to(device)
        mask = torch.cat([prompt_mask, completion_mask], 1).to(device)
        h = self.decoder(
            input_ids=ids, attention_mask=mask, position_ids=_positions(mask), use_cache=False
        ).last_hidden_state[:, -(T + 1) : -1]  # (r, T, H): the state before token t
        return self.head(h) * completion_mask.to(device, h.dtype)


def policy_hidden(policy, prompt_ids, prompt_mask, completion_ids, completion_mask) -> torch.Tensor:
    """(r, T, H) the policy's last hidden states before each completion token (no LM head run past the
    last position: ``logits_to_keep=1``), 0 on padding; gradients flow if grad mode is on."""
    T = completion_ids.shape[1]
    device = next(policy.parameters()).device
    ids = torch.cat([prompt_ids, completion_ids], 1).to(device)
    mask = torch.cat([prompt_mask, completion_mask], 1).to(device)
    with capture_last_hidden(policy) as seen:
        policy(input_ids=ids, attention_mask=mask, position_ids=_positions(mask), use_cache=False, logits_to_keep=1)
    h = seen[0][:, -(T + 1) : -1]
    return h * completion_mask.to(device, h.dtype)[..., None]


def critic_from_policy(policy, seed: int) -> CriticModel:
    """A separate critic initialised from the policy's current weights (adapters merged in): a deep
    copy of its decoder, float32 as the policy trains, and a fresh head."""
    source = merged_copy(policy) if is_lora(policy) else policy
    decoder = copy.deepcopy(base_model(source).get_decoder())
    decoder.requires_grad_(True)
    device = next(decoder.parameters()).device
    return CriticModel(decoder, ValueHead(decoder.config.hidden_size, seed)).to(device).train()


def load_critic(path: str | os.PathLike, seed: int, device) -> CriticModel:
    """A separate critic from an HF causal-LM directory (its decoder; the LM head is not loaded) and,
    when the directory holds ``value_head.safetensors``, its value head (else a fresh one)."""
    from safetensors.torch import load_model as load_weights
    from transformers import AutoModel

    folder = Path(path)
    if not (folder / "config.json").is_file():
        raise MissingPathError(
            f"critic.model={str(path)!r} is not an HF model directory (no config.json): give "
            "'policy', 'head' or a folder written by save_pretrained"
        )
    decoder = AutoModel.from_pretrained(str(folder), dtype=torch.float32)
    head = ValueHead(decoder.config.hidden_size, seed)
    if (folder / HEAD_FILE).is_file():
        load_weights(head, str(folder / HEAD_FILE))
    return CriticModel(decoder, head).to(device).train()


def save_critic(critic: CriticModel, out: str | os.PathLike) -> Path:
    """``critic`` as a directory :func:`load_critic` reads back: the decoder by ``save_pretrained``,
    the head as ``value_head.safetensors``."""
    from safetensors.torch import save_model as save_weights

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    critic.decoder.save_pretrained(out, safe_serialization=True)
    save_weights(critic.head, str(out / HEAD_FILE))
    return out
