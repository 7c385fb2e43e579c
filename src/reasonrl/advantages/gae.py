"""Generalised advantage estimation (GAE, Schulman et al. 2016, arXiv 1506.02438) for token-level PPO.

A completion is an episode whose steps are its trainable tokens: ``V(s_t)`` is the critic's value
before token t, ``r_t`` the reward after it (a sequence-level score sits on the last trainable
token: :func:`last_token_rewards`). With ``delta_t = r_t + gamma V(s_{t+1}) - V(s_t)``,

    A_t = delta_t + gamma lam A_{t+1},        returns R_t = A_t + V(s_t)   (the critic's target).

**Masks.** ``mask`` is any (B, T) 0/1 tensor, not only a right-padding mask: a multi-turn episode
has 0 on the tool-observation tokens inside its completion. Masked positions are not steps of the
episode: the recursion *skips* them, carrying the next step's value and the running advantage
across (verl's observation-aware GAE, ``compute_gae_advantage_return``), so a policy token just
before an observation bootstraps from the first policy token after it. A reward placed on a masked
position is ignored (it belongs to no step); advantages and returns are 0 there.

With gamma = lam = 1 (verl's defaults, GRLO's setting) and a single terminal reward r, the sum
telescopes: ``A_t = r - V(s_t)`` and ``R_t = r`` at every trainable token.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["gae", "last_token_rewards", "masked_whiten"]


def _check(rewards: Tensor, values: Tensor, mask: Tensor, gamma: float, lam: float) -> None:
    if rewards.dim() != 2 or values.shape != rewards.shape or mask.shape != rewards.shape:
        raise ValueError(
            f"gae needs rewards, values and mask of one (B, T) shape; got {tuple(rewards.shape)}, "
            f"{tuple(values.shape)}, {tuple(mask.shape)}"
        )
    if not (0.0 <= gamma <= 1.0 and 0.0 <= lam <= 1.0):
        raise ValueError(f"gae needs gamma and lam in [0, 1], got gamma={gamma}, lam={lam}")


@torch.no_grad()
def gae(rewards: Tensor, values: Tensor, mask: Tensor, gamma: float = 1.0, lam: float = 1.0) -> tuple[Tensor, Tensor]:
    """(B, T) token rewards, (B, T) values V(s_t), (B, T) 0/1 mask -> (B, T) advantages, (B, T) returns.

    The recursion runs backwards over every position; at a masked one it keeps the carried next
    value and running advantage unchanged (see the module notes). No whitening here
    (:func:`masked_whiten` is the separate option). Both outputs are 0 where ``mask`` is 0."""
    _check(rewards, values, mask, gamma, lam)
    m = mask.to(values.dtype)  # (B, T)
    r, v = rewards.to(values.dtype), values
    next_value = torch.zeros_like(v[:, 0])  # (B,) V(s_{t+1}) of the next *trainable* step; 0 after the last
    running = torch.zeros_like(v[:, 0])  # (B,) A_{t+1}
    out = torch.zeros_like(v)  # (B, T)
    for t in range(v.shape[1] - 1, -1, -1):
        delta = r[:, t] + gamma * next_value - v[:, t]  # (B,)
        step = delta + gamma * lam * running  # (B,) A_t if t is a step
        on = m[:, t]
        running = on * step + (1 - on) * running  # masked: carried unchanged
        next_value = on * v[:, t] + (1 - on) * next_value
        out[:, t] = running
    adv = out * m
    return adv, (adv + v) * m


def last_token_rewards(scores: Tensor, mask: Tensor) -> Tensor:
    """(B,) sequence scores, (B, T) 0/1 mask -> (B, T) token rewards: each score on its row's last
    trainable token (the reward-model convention of RLHF, spec envs-selfplay-eval section 8 (b)); a
    row without a trainable token gets none."""
    if scores.dim() != 1 or mask.dim() != 2 or len(scores) != len(mask):
        raise ValueError(
            f"last_token_rewards needs (B,) scores and a (B, T) mask; got {tuple(scores.shape)} and {tuple(mask.shape)}"
        )
    on = mask != 0  # (B, T)
    T = mask.shape[1]
    # index of the last 1 in each row: the largest position t with on[t]; rows without one get -1
    last = torch.where(on, torch.arange(T).expand_as(on), torch.full_like(on, -1, dtype=torch.long)).amax(-1)  # (B,)
    out = torch.zeros(mask.shape, dtype=scores.dtype)
    rows = (last >= 0).nonzero().squeeze(-1)
    out[rows, last[rows]] = scores[rows]
    return out


def masked_whiten(x: Tensor, mask: Tensor, eps: float = 1e-8) -> Tensor:
    """(B, T) -> (B, T): ``(x - mean) / sqrt(var + eps)`` over the masked-in entries (var with
    Bessel's correction, as verl's ``masked_whiten``), 0 where ``mask`` is 0. Fewer than two
    entries: centred only (a variance of one value is undefined)."""
    m = mask.to(x.dtype)
    n = m.sum()
    if float(n) == 0:
        return torch.zeros_like(x)
    mean = (x * m).sum() / n
    centred = (x - mean) * m
    if float(n) < 2:
        return centred
    var = (centred**2).sum() / (n - 1)
    return centred * torch.rsqrt(var + eps)
