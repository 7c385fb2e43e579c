"""The ``hf:DIR`` backend of the judge reward (:mod:`reasonrl.rewards.judge`): a local HF causal LM that
reads the judge's prompt and writes a short verdict greedily (``max_tokens`` new tokens). The model is
loaded once per process and directory (``hf:tiny:small`` builds a fresh tiny model: plumbing tests).

When the tokenizer has a chat template the prompt is one user turn rendered through it (with the
generation prompt), and generation stops at the model's end ids and the template's end-of-turn token, as
the judge was trained to be asked (issue 41: it used to read the raw prompt and run past its turn's end);
without a template the prompt is plain text. It lives here, not in ``rewards/``, because rewards need no
torch; importing :mod:`reasonrl.models` registers it."""

from __future__ import annotations

from typing import Any

import torch

from ..rewards.judge import JudgeReward, register_backend
from .chat import PromptFormatter, stop_ids, turn_end_id
from .loading import load_model

_MODELS: dict[str, tuple[Any, Any]] = {}


def judge_formatter(model, tok) -> PromptFormatter:
    """The chat template when the tokenizer has one (a judge is asked as a chat model), else plain prompts."""
    return PromptFormatter.build(tok, model, format="chat" if getattr(tok, "chat_template", None) else "plain")


def end_ids(model, tok, formatter: PromptFormatter) -> list[int]:
    """The ids a verdict ends at: the model's end ids and, with the chat template, its end-of-turn token."""
    end = turn_end_id(tok) if formatter.chat else None
    return sorted({*stop_ids(model, tok), *([end] if end is not None else [])})


@torch.no_grad()
def greedy_replies(
    model, tok, prompts: list[str], max_new_tokens: int, batch_size: int = 8, formatter: PromptFormatter | None = None
) -> list[str]:
    """The greedy continuation of each prompt (rendered by ``formatter``, default :func:`judge_formatter`;
    left-padded batches), stopped at :func:`end_ids` and decoded without special tokens."""
    formatter = formatter or judge_formatter(model, tok)
    texts, stops = formatter.render_all(prompts), end_ids(model, tok, formatter)
    out: list[str] = []
    tok.padding_side = "left"
    for start in range(0, len(texts), batch_size):
        enc = tok(list(texts[start : start + batch_size]), return_tensors="pt", padding=True)  # as the engine encodes
        enc = {k: v.to(model.device) for k, v in enc.items() if k in ("input_ids", "attention_mask")}
        gen = model.generate(
            **enc, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=tok.pad_token_id, eos_token_id=stops
        )
        out += tok.batch_decode(gen[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    return out


def hf_backend(reward: JudgeReward):
    path = reward.backend.split(":", 1)[1]
    if path not in _MODELS:
        model, tok = load_model(path)
        _MODELS[path] = (model.eval(), tok)
    model, tok = _MODELS[path]
    formatter = judge_formatter(model, tok)

    def judge(prompts: list[str], rows: list[dict[str, str]]) -> list[Any]:
        return greedy_replies(model, tok, prompts, reward.max_tokens, formatter=formatter)

    return judge


register_backend("hf", hf_backend)
