"""Scoring the same completion tokens under another context: the teacher side of self-distillation.

SSOPD shows the model its own shortest correct answer, EGRSD the reference solution, NudgeRL a
hint, STRIDE a critique (specs: shared/specs/distill-and-data.md, "cross-cutting requirements" 1):
each then reads the completion the policy sampled under the *plain* prompt, token by token, and
the method compares the two next-token distributions. :func:`score_under_context` runs that forward
for (context, completion) pairs and reduces the vocabulary inside it, chunk by chunk, to what the
method needs (the completion tokens' log-probs, entropies, argmax ids, top-k), so the (rows, T, V)
logits of a large vocabulary exist for one chunk at a time; ``full=True`` keeps them (small models,
or few rows, e.g. one per group).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
from torch import Tensor


@dataclass
class ContextScores:
    """Per completion token (N, T), zero on padding; optional fields are None unless asked for."""

    logprobs: Tensor  # (N, T) log p(completion token | context, completion prefix), tempered
    entropy: Tensor | None = None  # (N, T) entropy of the tempered next-token distribution
    argmax: Tensor | None = None  # (N, T) the most likely token id (TGPO's teacher direction)
    topk_ids: Tensor | None = None  # (N, T, k)
    topk_logprobs: Tensor | None = None  # (N, T, k) tempered log-probs of those ids
    logits: Tensor | None = None  # (N, T, V) raw logits, only with full=True


def encode_contexts(tokenizer, texts: Sequence[str]) -> tuple[Tensor, Tensor]:
    """Context strings -> (N, P) left-padded ids and mask (the layout generation uses)."""
    if tokenizer.padding_side != "left":
        raise ValueError("score_under_context needs a left-padding tokenizer (tokenizer.padding_side = 'left')")
    enc = tokenizer(list(texts), return_tensors="pt", padding=True)
    return enc["input_ids"], enc["attention_mask"]


def score_under_context(
    model,
    context_ids: Tensor,
    context_mask: Tensor,
    completion_ids: Tensor,
    completion_mask: Tensor,
    *,
    temperature: float = 1.0,
    grad: bool = False,
    entropy: bool = False,
    argmax: bool = False,
    top_k: int = 0,
    full: bool = False,
    chunk_rows: int = 64,
) -> ContextScores:
    """(N, P) left-padded contexts + (N, T) right-padded completions -> :class:`ContextScores`.

    ``grad=False`` (a teacher) runs without autograd, so nothing it returns carries a gradient;
    ``grad=True`` (a student under another context) keeps the graph."""
    if len(context_ids) != len(completion_ids):
        raise ValueError(f"score_under_context: {len(context_ids)} contexts for {len(completion_ids)} completions")
    T, device = completion_ids.shape[1], next(model.parameters()).device
    parts: list[ContextScores] = []
    with torch.set_grad_enabled(grad and torch.is_grad_enabled()):
        for s in range(0, len(context_ids), chunk_rows):
            ids = torch.cat([context_ids[s : s + chunk_rows], completion_ids[s : s + chunk_rows]], 1).to(device)
            mask = torch.cat([context_mask[s : s + chunk_rows], completion_mask[s : s + chunk_rows]], 1).to(device)
            pos = (mask.long().cumsum(-1) - 1).clamp(min=0)
            logits = model(
                input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False, logits_to_keep=T + 1
            ).logits[:, :-1]  # (r, T, V): position p predicts token p + 1
            parts.append(_reduce(logits, ids[:, -T:], mask[:, -T:], temperature, entropy, argmax, top_k, full))
    return _join(parts) if parts else ContextScores(logprobs=torch.zeros(0, T, device=device))


def _reduce(
    logits: Tensor,
    targets: Tensor,
    cmask: Tensor,
    temperature: float,
    entropy: bool,
    argmax: bool,
    top_k: int,
    full: bool,
) -> ContextScores:
    logp_all = (logits.float() / (temperature or 1.0)).log_softmax(-1)  # (r, T, V)
    m = cmask.to(logp_all.dtype)  # (r, T)
    out = ContextScores(logprobs=logp_all.gather(-1, targets[..., None]).squeeze(-1) * m)
    if entropy:
        out.entropy = -(logp_all.exp() * logp_all).sum(-1) * m
    if argmax:
        out.argmax = logits.argmax(-1) * cmask.long()
    if top_k:
        vals, idx = logp_all.topk(top_k, dim=-1)  # (r, T, k)
        out.topk_ids, out.topk_logprobs = idx * cmask.long()[..., None], vals * m[..., None]
    if full:
        out.logits = logits * m[..., None].to(logits.dtype)
    return out


def _join(parts: list[ContextScores]) -> ContextScores:
    def cat(name: str) -> Tensor | None:
        xs = [getattr(p, name) for p in parts]
        return None if xs[0] is None else torch.cat(xs)

    return ContextScores(
        logprobs=cat("logprobs"),
        entropy=cat("entropy"),
        argmax=cat("argmax"),
        topk_ids=cat("topk_ids"),
        topk_logprobs=cat("topk_logprobs"),
        logits=cat("logits"),
    )
