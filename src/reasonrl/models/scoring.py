"""Score (prompt, completion) batches: per-token log-probs and entropies under a model.

Used for the policy's log-probs in the loss (with gradients), for reference / teacher scoring
(without), and by methods that need token entropies (CorR-PO, SAGE, EGRSD). Rows are processed
in chunks so the (rows, T, V) logits of a large-vocabulary model never exist all at once, and
within a chunk the float32 log-softmax runs over slices of at most :data:`LOGIT_CHUNK_ELEMENTS`
logits, each recomputed in the backward pass (activation checkpointing) instead of kept: the
float32 copies of the whole (rows, T, V) block never exist at once, and the gradient is exact.
"""
from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint

LOGIT_CHUNK_ELEMENTS = 2**26  # logits per float32 log-softmax slice: 256 MB a float32 copy


def _positions(mask: torch.Tensor) -> torch.Tensor:
    return (mask.long().cumsum(-1) - 1).clamp(min=0)


def logprobs_and_entropy(logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0):
    """(R, T, V) logits, (R, T) targets -> (R, T) log p(target), (R, T) entropy of the distribution."""
    logp_all = (logits.float() / (temperature or 1.0)).log_softmax(-1)  # (R, T, V)
    logp = logp_all.gather(-1, targets[..., None]).squeeze(-1)  # (R, T)
    entropy = -(logp_all.exp() * logp_all).sum(-1)  # (R, T)
    return logp, entropy


def chunked_logprobs_and_entropy(logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0,
                                 max_elements: int | None = None):
    """:func:`logprobs_and_entropy` over time slices of at most ``max_elements`` logits (default
    :data:`LOGIT_CHUNK_ELEMENTS`; one time step at least). With gradients each slice is
    checkpointed: its float32 log-softmax, exp and product are recomputed in the backward instead
    of kept, so the memory they need is one slice's, while the values and the gradient are those of
    the unsliced computation. A block that fits in one slice is computed as it is."""
    R, T, V = logits.shape
    step = max(1, (max_elements or LOGIT_CHUNK_ELEMENTS) // max(1, R * V))  # time steps per slice
    if step >= T:
        return logprobs_and_entropy(logits, targets, temperature)
    no_grad = not (torch.is_grad_enabled() and logits.requires_grad)  # nothing to keep for a backward
    parts = [logprobs_and_entropy(lg, tg, temperature) if no_grad
             else checkpoint(logprobs_and_entropy, lg, tg, temperature, use_reentrant=False)
             for lg, tg in zip(logits.split(step, 1), targets.split(step, 1))]  # (R, <=step, V) each
    return torch.cat([p[0] for p in parts], 1), torch.cat([p[1] for p in parts], 1)  # (R, T) twice


def score_completions(model, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, completion_ids: torch.Tensor,
                      completion_mask: torch.Tensor, *, temperature: float = 1.0, chunk_rows: int = 64,
                      entropies: bool = True):
    """(R, P) left-padded prompts + (R, T) right-padded completions -> (R, T) log-probs and (R, T)
    entropies (None if not asked), zero on padding. Gradients flow if grad mode is on."""
    T = completion_ids.shape[1]
    device = next(model.parameters()).device
    out_lp, out_ent = [], []
    for s in range(0, len(prompt_ids), chunk_rows):
        ids = torch.cat([prompt_ids[s:s + chunk_rows], completion_ids[s:s + chunk_rows]], 1).to(device)
        mask = torch.cat([prompt_mask[s:s + chunk_rows], completion_mask[s:s + chunk_rows]], 1).to(device)
        logits = model(input_ids=ids, attention_mask=mask, position_ids=_positions(mask), use_cache=False,
                       logits_to_keep=T + 1).logits[:, :-1]  # (r, T, V): position p predicts token p+1
        lp, ent = chunked_logprobs_and_entropy(logits, ids[:, -T:], temperature)
        cm = mask[:, -T:].to(lp.dtype)
        out_lp.append(lp * cm)
        out_ent.append(ent * cm if entropies else None)
    lp = torch.cat(out_lp)
    return lp, (torch.cat(out_ent) if entropies else None)
