"""Pure next-token sampling maths: (R, V) logits in, (R,) tokens and log-probs out."""
from __future__ import annotations

from typing import NamedTuple

import torch


def filter_top_k_top_p(logits: torch.Tensor, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """Set logits outside the top-k and outside the smallest nucleus of mass ``top_p`` to -inf.

    (R, V) -> (R, V). The most likely token always survives, so no row is left empty.
    """
    out = logits
    if top_k > 0 and top_k < logits.shape[-1]:
        kth = torch.topk(out, top_k, dim=-1).values[..., -1:]  # (R, 1)
        out = out.masked_fill(out < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(out, dim=-1, descending=True)  # (R, V)
        probs = sorted_logits.softmax(-1)
        mass_before = probs.cumsum(-1) - probs  # (R, V) mass of strictly more likely tokens
        drop_sorted = mass_before >= top_p  # keeps the first token whose cumsum crosses top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        out = out.masked_fill(drop, float("-inf"))
    return out


class Sampled(NamedTuple):
    token: torch.Tensor  # (R,)
    logprob: torch.Tensor  # (R,) log-prob of the token under the tempered, untruncated distribution
    entropy: torch.Tensor  # (R,) entropy of that distribution
    sum_p2: torch.Tensor  # (R,) sum of its squared probabilities (CorR-PO's logit-gradient norm needs it)


def sample_next(logits: torch.Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0,
                generator: torch.Generator | None = None) -> Sampled:
    """Sample one token per row from (R, V) logits (greedy at temperature 0, whose statistics are
    those of temperature 1)."""
    logits = logits.float()
    if temperature == 0:
        token = logits.argmax(-1)  # (R,)
        logp = logits.log_softmax(-1)
    else:
        scaled = logits / temperature
        logp = scaled.log_softmax(-1)  # (R, V)
        probs = filter_top_k_top_p(scaled, top_k, top_p).softmax(-1)
        token = torch.multinomial(probs, 1, generator=generator).squeeze(-1)  # (R,)
    probs_full = logp.exp()  # (R, V)
    entropy = -(probs_full * logp).sum(-1)  # (R,)
    return Sampled(token, logp.gather(-1, token[:, None]).squeeze(-1), entropy, (probs_full * probs_full).sum(-1))
