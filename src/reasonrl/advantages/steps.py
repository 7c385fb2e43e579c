"""SAPO step advantages: one group-relative advantage per reasoning step (arXiv 2605.17648).

SAPO (Step-Aligned Policy Optimization) scores each of the K steps of a rollout separately (step k
= thinking block k + SID token k) and normalises each step across the group at the same step
index, so a rollout that got levels 1-2 right and level 3 wrong is pushed up on steps 1-2 and
down on step 3 instead of down everywhere as outcome GRPO would do [paper].

Pipeline (all pure functions):

1. :func:`step_advantages` -- (B, G, K) step rewards -> (B, G, K) advantages
   ``A_{i,k} = (r_{i,k} - mean_j r_{j,k}) / (std_j r_{j,k} + eps)``; a step whose rewards are
   equal across the group gets exactly 0.
2. :func:`char_spans_to_token_steps` -- each token's step index from the steps' character spans
   (:func:`reasonrl.rewards.steps.parse_steps`) and the tokenizer's character offsets.
3. :func:`token_step_advantages` -- (R, K) advantages gathered onto (R, T) tokens; tokens outside
   every step get 0 (default) or the sequence-level outcome advantage (``outside="outcome"``).
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

__all__ = ["OUTSIDE_MODES", "step_advantages", "token_step_advantages", "char_spans_to_token_steps"]

OUTSIDE_MODES = ("zero", "outcome")


def step_advantages(step_rewards: Tensor, eps: float = 1e-6, unbiased: bool = True) -> Tensor:
    """Group-relative advantage per step index: (B, G, K) -> (B, G, K).

    Args:
        step_rewards: (B, G, K) rewards, B prompts x G rollouts x K steps.
        eps: added to the std (spec default ``eps_std = 1e-6``).
        unbiased: N-1 std like ``torch.std`` in verl/TRL (spec default), else N.

    A step whose G rewards are all equal carries no signal and gets exactly 0 (not 0/eps residue);
    with G = 1 and the N-1 std every step is such a step.
    """
    if not isinstance(step_rewards, Tensor) or step_rewards.dim() != 3:
        got = tuple(step_rewards.shape) if isinstance(step_rewards, Tensor) else type(step_rewards).__name__
        raise ValueError(f"step_rewards must be a (B, G, K) tensor, got {got}")
    r = step_rewards if step_rewards.is_floating_point() else step_rewards.to(torch.get_default_dtype())  # (B,G,K)
    constant = r.amax(dim=1, keepdim=True) == r.amin(dim=1, keepdim=True)  # (B,1,K) bool
    centred = (r - r.mean(dim=1, keepdim=True)).masked_fill(constant, 0.0)  # (B,G,K)
    correction = 1 if unbiased else 0
    if r.shape[1] <= correction:
        return centred  # (B,G,K), all zero: G = 1 groups are constant
    std = r.std(dim=1, keepdim=True, correction=correction)  # (B,1,K)
    # masked again after the division: with eps = 0 a constant step is 0 / 0 = NaN, not the promised 0
    return (centred / (std + eps)).masked_fill(constant, 0.0)  # (B,G,K)


def token_step_advantages(
    step_adv: Tensor, token_step: Tensor, outside: str = "zero", outcome_adv: Tensor | None = None
) -> Tensor:
    """Per-token advantages: token t of row r gets ``step_adv[r, token_step[r, t]]``: (R, T).

    Args:
        step_adv: (R, K) step advantages of R = B*G rollouts (``step_advantages(...).flatten(0, 1)``).
        token_step: (R, T) long, the step index of each completion token, -1 outside every step.
        outside: what tokens outside every step get: ``"zero"`` (spec default) or ``"outcome"``
            (the rollout's sequence-level exact-match GRPO advantage, spec option).
        outcome_adv: (R,) outcome advantages; required with ``"outcome"``, refused with ``"zero"``.
    """
    if outside not in OUTSIDE_MODES:
        raise ValueError(f"unknown outside {outside!r}; valid: {list(OUTSIDE_MODES)}")
    if step_adv.dim() != 2 or token_step.dim() != 2 or token_step.shape[0] != step_adv.shape[0]:
        raise ValueError(
            f"need step_adv (R, K) and token_step (R, T), got {tuple(step_adv.shape)} and {tuple(token_step.shape)}"
        )
    if token_step.dtype != torch.long:
        raise ValueError(f"token_step must be a long tensor, got {token_step.dtype}")
    K = step_adv.shape[1]
    if token_step.numel() and (token_step.min() < -1 or token_step.max() >= K):
        raise ValueError(
            f"token_step values must lie in [-1, {K - 1}], got [{int(token_step.min())}, {int(token_step.max())}]"
        )
    inside = token_step >= 0  # (R,T) bool
    gathered = step_adv.gather(1, token_step.clamp(min=0))  # (R,T)
    if outside == "zero":
        if outcome_adv is not None:
            raise ValueError("outcome_adv was given but outside='zero' ignores it; pass outside='outcome'")
        return torch.where(inside, gathered, torch.zeros_like(gathered))  # (R,T)
    if outcome_adv is None or outcome_adv.shape != (step_adv.shape[0],):
        got = None if outcome_adv is None else tuple(outcome_adv.shape)
        raise ValueError(f"outside='outcome' needs outcome_adv of shape ({step_adv.shape[0]},), got {got}")
    fill = outcome_adv.to(gathered.dtype).unsqueeze(1).expand_as(gathered)  # (R,T)
    return torch.where(inside, gathered, fill)  # (R,T)


def _check_spans(row: int, spans: Sequence) -> list[tuple[int, int, int]]:
    """(start, end, step) of the present spans of one row, checked to be ordered and disjoint."""
    out = []
    for k, span in enumerate(spans):
        if span is None:  # a missing step owns no characters
            continue
        start, end = span
        if not 0 <= start <= end:
            raise ValueError(f"row {row}: step {k} span {span} is not a valid (start, end) with 0 <= start <= end")
        if out and start < out[-1][1]:
            raise ValueError(
                f"row {row}: step {k} span {span} overlaps or precedes step {out[-1][2]}'s "
                f"span {out[-1][:2]}; spans must be ordered and disjoint"
            )
        out.append((start, end, k))
    return out


def char_spans_to_token_steps(
    spans: Sequence[Sequence], token_char_offsets: Sequence[Sequence[tuple[int, int]]], T: int
) -> Tensor:
    """Step index of every completion token from character spans: -> (R, T) long, -1 = outside.

    Args:
        spans: per row, the K steps' ``(start, end)`` character spans in the completion text (end
            exclusive), in step order; ``None`` for a missing step (as
            :attr:`reasonrl.rewards.steps.Step.span` gives).
        token_char_offsets: per row, each completion token's ``(start, end)`` characters in the same
            text (a tokenizer's ``return_offsets_mapping``); at most T tokens.
        T: the output width (padded token positions get -1).

    Rule: a token belongs to the **earliest step whose span it overlaps** (``tok_start < span_end``
    and ``tok_end > span_start``). Spans are disjoint, so a token straddling two steps goes to the
    step holding its first character, and a token that starts outside every step (e.g. ``"\\nb"``)
    but reaches into a step goes to that step. Zero-width tokens (EOS/special tokens, offsets
    ``(0, 0)``) overlap nothing and are outside.
    """
    if len(spans) != len(token_char_offsets):
        raise ValueError(f"got spans for {len(spans)} rows but token offsets for {len(token_char_offsets)}")
    out = torch.full((len(spans), T), -1, dtype=torch.long)  # (R,T)
    for r, (row_spans, offsets) in enumerate(zip(spans, token_char_offsets)):
        if len(offsets) > T:
            raise ValueError(f"row {r}: {len(offsets)} token offsets do not fit T={T}")
        present = _check_spans(r, row_spans)
        for t, (ts, te) in enumerate(offsets):
            for start, end, k in present:
                if ts < end and te > start:
                    out[r, t] = k
                    break
    return out
