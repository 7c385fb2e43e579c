"""Pure next-token sampling maths: (R, V) logits in, (R,) tokens and log-probs out."""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from ..losses.corr import hidden_grad_norm_from_probs


def filter_top_k_top_p(logits: torch.Tensor, top_k: int = 0, top_p: float = 1.0, min_p: float = 0.0) -> torch.Tensor:
    """Set logits outside the top-k, outside the smallest nucleus of mass ``top_p``, and of tokens
    whose probability is below ``min_p`` times the most likely token's, to -inf.

    (R, V) -> (R, V). The most likely token always survives, so no row is left empty. Min-p
    (Nguyen et al., arXiv 2407.01082) is a ratio to the top probability, so it is a cut on the
    logits (``l < l_max + log min_p``), the same before or after renormalising; it is applied last,
    as transformers' MinPLogitsWarper is (vLLM applies it before top-p: the two differ only when
    both are on).
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
    if min_p > 0.0:
        floor = out.max(-1, keepdim=True).values + math.log(min_p)  # (R, 1) log of min_p * p_max, unnormalised
        out = out.masked_fill(out < floor, float("-inf"))
    return out


class Sampled(NamedTuple):
    token: torch.Tensor  # (R,)
    logprob: torch.Tensor  # (R,) log-prob of the token under the tempered, untruncated distribution
    entropy: torch.Tensor  # (R,) entropy of that distribution
    sum_p2: torch.Tensor  # (R,) sum of its squared probabilities (CorR-PO's logit-gradient norm needs it)


def inverse_cdf(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:  # (R, V), (R,) in [0, 1) -> (R,)
    """The token whose cumulative-probability interval holds ``u`` (scaled to the row's mass).

    One uniform per row, drawn from that row's own stream, decides its token, so a row's sample
    does not depend on which other rows share the batch (data-parallel ranks and Ray workers
    reproduce a single process's rollouts). The first token with cdf > u * mass is taken, so a
    token of probability 0 is never chosen."""
    cdf = probs.cumsum(-1)  # (R, V)
    mass = cdf[:, -1:]  # (R, 1), 1 up to rounding
    x = torch.minimum(u[:, None].to(cdf) * mass, mass.nextafter(torch.zeros_like(mass)))  # strictly below the mass
    return torch.searchsorted(cdf, x, right=True).squeeze(-1).clamp(max=probs.shape[-1] - 1)


def sample_next(
    logits: torch.Tensor,
    temperature: float,
    top_k: int = 0,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
    *,
    min_p: float = 0.0,
    uniform: torch.Tensor | None = None,
) -> Sampled:
    """Sample one token per row from (R, V) logits (greedy at temperature 0, whose statistics are
    those of temperature 1). ``uniform`` (R,): each row's own draw in [0, 1) (:func:`inverse_cdf`);
    without it, ``torch.multinomial`` with ``generator``."""
    logits = logits.float()
    if temperature == 0:
        token = logits.argmax(-1)  # (R,)
        logp = logits.log_softmax(-1)
    else:
        scaled = logits if temperature == 1 else logits / temperature  # x / 1 is x: no (R, V) pass for nothing
        logp = scaled.log_softmax(-1)  # (R, V)
        probs = filter_top_k_top_p(scaled, top_k, top_p, min_p).softmax(-1)
        token = (
            inverse_cdf(probs, uniform)
            if uniform is not None
            else torch.multinomial(probs, 1, generator=generator).squeeze(-1)
        )  # (R,)
    probs_full = logp.exp()  # (R, V)
    entropy = -(probs_full * logp).sum(-1)  # (R,)
    return Sampled(token, logp.gather(-1, token[:, None]).squeeze(-1), entropy, (probs_full * probs_full).sum(-1))


def next_hidden_grad_norm(
    logits: torch.Tensor, token: torch.Tensor, temperature: float, unembed: torch.Tensor
) -> torch.Tensor:  # (R, V), (R,), (V, d) -> (R,)
    """``||W_U^T (e_y - p)||`` of the sampled tokens (CorR-PO's "hidden" gradient norm), under the
    distribution :func:`sample_next`'s statistics describe: tempered, untruncated (T=1 when greedy).
    ``unembed`` is the output embedding (V, d)."""
    probs = (logits.float() / (temperature or 1.0)).softmax(-1)  # (R, V)
    return hidden_grad_norm_from_probs(probs, token.to(probs.device), unembed)
