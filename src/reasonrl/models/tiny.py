"""The embedded tiny reasoner: a standard HF Llama architecture over the character tokenizer.

Using a stock architecture (not a custom module) means the model directory is an ordinary HF
checkpoint and every code path (generation, scoring, LoRA, vLLM later) is the one real models use.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from .tokenizer import build_char_tokenizer


@dataclass(frozen=True)
class TinySize:
    hidden: int
    layers: int
    heads: int
    intermediate: int


# Parameter counts with the 100-symbol vocabulary and tied embeddings:
# tiny  = 2 x (4*128^2 attn + 3*128*384 mlp + norms) + 100*128 emb  ~= 0.44M
# small = 4 x (4*256^2 attn + 3*256*768 mlp + norms) + 100*256 emb  ~= 3.43M
SIZES: dict[str, TinySize] = {
    "tiny": TinySize(hidden=128, layers=2, heads=4, intermediate=384),
    "small": TinySize(hidden=256, layers=4, heads=4, intermediate=768),
}


def tiny_config(size: str = "small", max_positions: int = 512) -> LlamaConfig:
    if size not in SIZES:
        raise ValueError(f"unknown tiny-model size {size!r}; valid sizes: {sorted(SIZES)}")
    s, tok = SIZES[size], build_char_tokenizer()
    return LlamaConfig(
        vocab_size=len(tok),
        hidden_size=s.hidden,
        num_hidden_layers=s.layers,
        num_attention_heads=s.heads,
        num_key_value_heads=s.heads,
        intermediate_size=s.intermediate,
        max_position_embeddings=max_positions,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        bos_token_id=None,
    )


def build_tiny(size: str = "small", seed: int = 0):
    """A freshly initialised tiny reasoner and its tokenizer (float32, eval mode off)."""
    torch.manual_seed(seed)
    model = LlamaForCausalLM(tiny_config(size))
    return model, build_char_tokenizer()


def n_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
