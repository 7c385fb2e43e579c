"""CorR-PO: the entropy / logit-gradient correlation of a response as a reward regulariser
(Yang et al., "Entropy-Gradient Inversion", arXiv 2605.17770).

The paper reports that in strong reasoning models, across the tokens of a response, token entropy
and the "logit gradient" are negatively correlated, and adds the strength of this inversion to
the reward so the group advantage favours rollouts that show it. Only the abstract is available:
every formula below is the spec's reconstruction [inferred] (``specs/objectives.md`` section 5).

Per valid token, from the (tempered) next-token distribution p of the scoring pass:

* entropy ``H = -sum_v p_v log p_v``;
* logit-gradient norm ``g = ||e_y - p||_2 = sqrt(1 - 2 p_y + sum_v p_v^2)`` -- the gradient of
  ``log p_y`` with respect to the logits is ``e_y - p``, so no backward pass is needed. The spec
  flags this definition as uncertain (the paper may use a hidden-state or parameter gradient):
  :func:`hidden_grad_norm` gives ``||W_U^T (e_y - p)||``, and any other (N, T) norm can be passed
  to :func:`corr_po_bonus` directly (a per-token parameter-gradient norm needs its own backward
  passes and is left to the caller).

The per-response score is ``c_i = Pearson_t(H, g)`` (Spearman optional), 0 when the response has
fewer than ``min_tokens`` tokens or either series is constant; the reward becomes
``r'_i = r_i + bonus_i`` with ``bonus_i = -coef * c_i`` by default. No gradient flows through c.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "CORR_METHODS",
    "CORR_SIGNS",
    "token_stats",
    "logit_grad_norm",
    "hidden_grad_norm",
    "hidden_grad_norm_from_probs",
    "defined_rows",
    "pearson_per_row",
    "spearman_per_row",
    "inversion_score",
    "corr_po_bonus",
]

CORR_METHODS = ("pearson", "spearman")
CORR_SIGNS = ("inversion", "alignment")


def _at_least_f32(x: Tensor) -> Tensor:
    """bf16/fp16 logits are upcast (entropies of a 150k vocabulary need it); float64 stays float64."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


@torch.no_grad()
def token_stats(logits: Tensor, tokens: Tensor, temperature: float = 1.0) -> tuple[Tensor, Tensor, Tensor]:
    """Entropy H, sampled-token probability p_y and ``sum_v p_v^2``: (N, T, V), (N, T) -> 3 x (N, T).

    ``logits`` are the raw logits of the position that predicts each token; ``temperature`` is the
    sampling temperature (the spec scores the distribution the tokens were sampled from).
    These two extra floats per token are all the correlation needs; store them in the scoring pass.
    """
    if logits.dim() != 3 or tokens.shape != logits.shape[:2]:
        raise ValueError(
            f"need logits (N, T, V) and tokens (N, T); got {tuple(logits.shape)} and {tuple(tokens.shape)}"
        )
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    logq = F.log_softmax(_at_least_f32(logits) / temperature, dim=-1)  # (N, T, V)
    p = logq.exp()  # (N, T, V)
    entropy = -(p * logq).sum(dim=-1)  # (N, T)
    p_y = p.gather(-1, tokens.long().unsqueeze(-1)).squeeze(-1)  # (N, T)
    return entropy, p_y, p.square().sum(dim=-1)


def logit_grad_norm(p_y: Tensor, sum_p2: Tensor) -> Tensor:  # (N, T), (N, T) -> (N, T)
    """``||e_y - p||_2 = sqrt(1 - 2 p_y + sum_v p_v^2)``: the norm of d log p_y / d logits.

    Clamped at 0 before the root: rounding can push ``1 - 2p + sum p^2`` (exactly >= 0) below it.
    """
    if p_y.shape != sum_p2.shape:
        raise ValueError(f"p_y and sum_p2 must have one shape; got {tuple(p_y.shape)} and {tuple(sum_p2.shape)}")
    return (1.0 - 2.0 * p_y + sum_p2).clamp(min=0.0).sqrt()


@torch.no_grad()
def hidden_grad_norm(
    logits: Tensor, tokens: Tensor, unembed: Tensor, temperature: float = 1.0
) -> Tensor:  # (N, T, V), (N, T), (V, d) -> (N, T)
    """``||W_U^T (e_y - p)||_2 = ||W_U[y] - p W_U||``: the gradient norm w.r.t. the final hidden state.

    ``unembed`` is the (V, d) output embedding (``lm_head.weight``). The spec's ``"hidden"`` variant.
    """
    if unembed.dim() != 2 or unembed.shape[0] != logits.shape[-1]:
        raise ValueError(f"unembed must be (V, d) with V = {logits.shape[-1]}, got {tuple(unembed.shape)}")
    if logits.dim() != 3 or tokens.shape != logits.shape[:2]:
        raise ValueError(
            f"need logits (N, T, V) and tokens (N, T); got {tuple(logits.shape)} and {tuple(tokens.shape)}"
        )
    p = F.softmax(_at_least_f32(logits) / temperature, dim=-1)  # (N, T, V)
    return hidden_grad_norm_from_probs(p, tokens, unembed.to(p.dtype))


@torch.no_grad()
def hidden_grad_norm_from_probs(
    probs: Tensor, tokens: Tensor, unembed: Tensor
) -> Tensor:  # (..., V), (...), (V, d) -> (...)
    """``||W_U^T (e_y - p)||_2`` from the distribution ``probs`` itself (what a sampler holds).

    ``e_y - p`` is formed in ``probs``' dtype first, so nothing cancels when p_y ~ 1; the product
    runs in the unembedding's dtype (a bf16 model's (V, d) matrix is not copied to float32 at every
    decoding step; GPUs accumulate it in float32), the norm in ``probs``' dtype.
    """
    if unembed.dim() != 2 or unembed.shape[0] != probs.shape[-1] or tokens.shape != probs.shape[:-1]:
        raise ValueError(
            f"need probs (..., V), tokens (...) and unembed (V, d); got {tuple(probs.shape)}, "
            f"{tuple(tokens.shape)}, {tuple(unembed.shape)}"
        )
    diff = (-probs).scatter_add(-1, tokens.long().unsqueeze(-1), torch.ones_like(probs[..., :1]))  # (..., V) e_y - p
    return (diff.to(unembed.dtype) @ unembed).to(probs.dtype).norm(dim=-1)


def _row_constant(x: Tensor, on: Tensor) -> Tensor:  # (N, T) -> (N,) bool
    """Rows whose masked values are all equal (exact test; a float variance would be a residue)."""
    big = torch.finfo(x.dtype).max
    return torch.where(on, x, torch.full_like(x, -big)).amax(-1) == torch.where(on, x, torch.full_like(x, big)).amin(-1)


def _check_xy(x: Tensor, y: Tensor, mask: Tensor) -> None:
    if not x.shape == y.shape == mask.shape or x.dim() != 2:
        raise ValueError(
            f"x, y and mask must all be (N, T); got {tuple(x.shape)}, {tuple(y.shape)}, {tuple(mask.shape)}"
        )


def defined_rows(x: Tensor, y: Tensor, mask: Tensor, min_tokens: int = 3) -> Tensor:  # -> (N,) bool
    """Rows where a correlation is defined: >= ``min_tokens`` masked tokens, neither series constant."""
    _check_xy(x, y, mask)
    on = mask != 0
    x, y = x.detach().double(), y.detach().double()
    return (on.sum(-1) >= min_tokens) & ~_row_constant(x, on) & ~_row_constant(y, on)


def pearson_per_row(x: Tensor, y: Tensor, mask: Tensor, min_tokens: int = 3) -> Tensor:  # -> (N,)
    """Pearson correlation of x and y over each row's masked tokens: (N, T) x3 -> (N,) float64.

    0 for rows with fewer than ``min_tokens`` tokens or a constant x or y (spec section 5).
    """
    valid = defined_rows(x, y, mask, min_tokens)  # (N,)
    x, y = x.detach().double(), y.detach().double()
    on = mask != 0
    m = on.double()
    x, y = torch.where(on, x, 0.0), torch.where(on, y, 0.0)  # garbage in padding must not leak
    n = m.sum(-1)  # (N,)
    dx = (x - (x * m).sum(-1, keepdim=True) / n.clamp(min=1).unsqueeze(-1)) * m  # (N, T)
    dy = (y - (y * m).sum(-1, keepdim=True) / n.clamp(min=1).unsqueeze(-1)) * m  # (N, T)
    den = (dx.square().sum(-1) * dy.square().sum(-1)).sqrt()  # (N,)
    valid = valid & (den > 0)
    c = (dx * dy).sum(-1) / den.clamp(min=1e-300)
    return torch.where(valid, c.clamp(-1.0, 1.0), torch.zeros_like(c))


def _average_ranks(v: Tensor) -> Tensor:  # (n,) -> (n,)
    """0-based ranks, ties sharing the mean of their positions (the usual Spearman convention)."""
    _, inverse, counts = torch.unique(v, sorted=True, return_inverse=True, return_counts=True)
    start = counts.cumsum(0) - counts  # first position of each distinct value
    return (start.double() + (counts.double() - 1) / 2)[inverse]


def spearman_per_row(x: Tensor, y: Tensor, mask: Tensor, min_tokens: int = 3) -> Tensor:  # -> (N,)
    """Spearman rank correlation per row (Pearson of average ranks over the masked tokens)."""
    _check_xy(x, y, mask)
    on = mask != 0
    rx = torch.zeros(x.shape, dtype=torch.float64, device=x.device)
    ry = torch.zeros(y.shape, dtype=torch.float64, device=x.device)
    for i in range(x.shape[0]):
        if bool(on[i].any()):
            rx[i, on[i]] = _average_ranks(x[i, on[i]].detach())
            ry[i, on[i]] = _average_ranks(y[i, on[i]].detach())
    return pearson_per_row(rx, ry, mask, min_tokens)


def inversion_score(
    entropy: Tensor, grad_norm: Tensor, mask: Tensor, *, method: str = "pearson", min_tokens: int = 3
) -> Tensor:  # (N, T) x3 -> (N,)
    """``c_i = corr_t(H_{i,t}, g_{i,t})`` over the masked tokens of each response (no gradient)."""
    if method not in CORR_METHODS:
        raise ValueError(f"unknown correlation method {method!r}; valid values: {', '.join(CORR_METHODS)}")
    fn = pearson_per_row if method == "pearson" else spearman_per_row
    return fn(entropy, grad_norm, mask, min_tokens)


def corr_po_bonus(
    entropy: Tensor,
    grad_norm: Tensor,
    mask: Tensor,
    *,
    coef: float = 0.1,
    sign: str = "inversion",
    method: str = "pearson",
    correct: Tensor | None = None,
    correct_only: bool = False,
    min_tokens: int = 3,
) -> tuple[Tensor, Tensor, dict[str, float]]:
    """Per-response correlation c (N,) and reward bonus (N,): use ``r' = r + bonus``, then any estimator.

    Args:
        entropy, grad_norm, mask: (N, T) token entropies, gradient norms (e.g. :func:`logit_grad_norm`)
            and the 0/1 trainable-token mask of N responses (flatten (B, G) groups to N = B*G).
        coef: lambda, default 0.1 -- small against a 0/1 verifier reward [inferred].
        sign: ``"inversion"`` (default, ``bonus = -coef c``: a more negative correlation earns
            more, the paper's reading) or ``"alignment"`` (``bonus = +coef c``); the spec flags the
            direction as uncertain because, for sampled tokens, H and the logit-gradient norm above
            usually move together [inferred].
        method: ``"pearson"`` (default) or ``"spearman"``.
        correct, correct_only: with ``correct_only=True`` only rollouts with ``correct`` (N,)
            true get the bonus [inferred option, default off].

    Metrics: ``corr/mean`` (mean c over rows with a defined c, 0 if none), ``corr/frac_defined``
    (rows with >= min_tokens tokens and non-constant series), ``corr/frac_negative`` (rows with c < 0),
    ``corr/bonus_mean`` (mean bonus over all rows).
    """
    if sign not in CORR_SIGNS:
        raise ValueError(f"unknown sign {sign!r}; valid values: {', '.join(CORR_SIGNS)}")
    if correct_only and (correct is None or correct.shape != entropy.shape[:1]):
        raise ValueError(
            f"correct_only=True needs correct of shape (N,) = {tuple(entropy.shape[:1])}, "
            f"got {None if correct is None else tuple(correct.shape)}"
        )
    c = inversion_score(entropy, grad_norm, mask, method=method, min_tokens=min_tokens)  # (N,)
    bonus = (-coef if sign == "inversion" else coef) * c  # (N,)
    if correct_only:
        bonus = torch.where(correct.to(torch.bool).to(bonus.device), bonus, torch.zeros_like(bonus))
    defined = defined_rows(entropy, grad_norm, mask, min_tokens)  # (N,)
    n = max(c.numel(), 1)
    return (
        c,
        bonus,
        {
            "corr/mean": float(c[defined].mean()) if bool(defined.any()) else 0.0,
            "corr/frac_defined": float(defined.sum()) / n,
            "corr/frac_negative": float((c < 0).sum()) / n,
            "corr/bonus_mean": float(bonus.mean()) if c.numel() else 0.0,
        },
    )
