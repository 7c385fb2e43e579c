"""Score (prompt, completion) batches: per-token log-probs and entropies under a model.

Used for the policy's log-probs in the loss (with gradients), for reference / teacher scoring
(without), and by methods that need token entropies (CorR-PO, SAGE, EGRSD). Rows are processed
in chunks so the (rows, T, V) logits of a large-vocabulary model never exist all at once.
"""
from __future__ import annotations

import torch


def _positions(mask: torch.Tensor) -> torch.Tensor:
    return (mask.long().cumsum(-1) - 1).clamp(min=0)


def logprobs_and_entropy(logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0):
    """(R, T, V) logits, (R, T) targets -> (R, T) log p(target), (R, T) entropy of the distribution."""
    logp_all = (logits.float() / (temperature or 1.0)).log_softmax(-1)  # (R, T, V)
    logp = logp_all.gather(-1, targets[..., None]).squeeze(-1)  # (R, T)
    entropy = -(logp_all.exp() * logp_all).sum(-1)  # (R, T)
    return logp, entropy


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
        lp, ent = logprobs_and_entropy(logits, ids[:, -T:], temperature)
        cm = mask[:, -T:].to(lp.dtype)
        out_lp.append(lp * cm)
        out_ent.append(ent * cm if entropies else None)
    lp = torch.cat(out_lp)
    return lp, (torch.cat(out_ent) if entropies else None)
