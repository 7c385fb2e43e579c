"""The ``hf:DIR`` backend of the judge reward (:mod:`reasonrl.rewards.judge`): a local HF causal LM that
reads the judge's prompt and writes a short verdict greedily (``max_tokens`` new tokens). The model is
loaded once per process and directory (``hf:tiny:small`` builds a fresh tiny model: plumbing tests).
It lives here, not in ``rewards/``, because rewards need no torch; importing :mod:`reasonrl.models`
registers it."""
from __future__ import annotations

from typing import Any

import torch

from ..rewards.judge import JudgeReward, register_backend
from .loading import load_model

_MODELS: dict[str, tuple[Any, Any]] = {}


@torch.no_grad()
def greedy_replies(model, tok, prompts: list[str], max_new_tokens: int, batch_size: int = 8) -> list[str]:
    """The greedy continuation of each prompt (left-padded batches), decoded without special tokens."""
    out: list[str] = []
    tok.padding_side = "left"
    for start in range(0, len(prompts), batch_size):
        enc = tok(prompts[start:start + batch_size], return_tensors="pt", padding=True)
        enc = {k: v.to(model.device) for k, v in enc.items() if k in ("input_ids", "attention_mask")}
        gen = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False,
                             pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
        out += tok.batch_decode(gen[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    return out


def hf_backend(reward: JudgeReward):
    path = reward.backend.split(":", 1)[1]
    if path not in _MODELS:
        model, tok = load_model(path)
        _MODELS[path] = (model.eval(), tok)
    model, tok = _MODELS[path]

    def judge(prompts: list[str], rows: list[dict[str, str]]) -> list[Any]:
        return greedy_replies(model, tok, prompts, reward.max_tokens)
    return judge


register_backend("hf", hf_backend)
