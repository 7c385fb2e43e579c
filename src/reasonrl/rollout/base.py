"""What every rollout engine returns, and the protocol engines implement."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, Sequence

import torch


@dataclass(frozen=True)
class SamplingParams:
    """Sampling settings. ``temperature=0`` is greedy. Behaviour log-probs are those of the
    temperature-scaled distribution *before* top-k/top-p/min-p truncation, the distribution the
    trainer re-scores, so that the importance ratio is 1 on-policy."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 = off
    min_p: float = 0.0  # drop tokens below min_p x the top token's probability; 0 = off
    max_new_tokens: int = 64
    stop: tuple[str, ...] = ()  # generation of a row ends once its text contains one of these
    seed: int | None = None
    hidden_grad_norm: bool = False  # record ||W_U^T (e_y - p)|| per token (CorR-PO's "hidden" norm)

    def __post_init__(self):
        if (
            self.temperature < 0
            or not 0 < self.top_p <= 1
            or self.top_k < 0
            or not 0 <= self.min_p <= 1
            or self.max_new_tokens < 1
        ):
            raise ValueError(f"invalid sampling settings: {self}")


@dataclass
class Rollouts:
    """``R = len(prompts) * n`` completions; row ``r`` answers prompt ``r // n``.

    Token tensors are right-padded (completions) or left-padded (prompts) with masks; the EOS
    token, when sampled, is part of the completion and of its mask (the model must learn to stop).
    """

    prompts: list[str]  # (R,) the prompt text of each row, as the model saw it (rendered: models.chat.Rendered)
    texts: list[str]  # (R,) decoded completions, specials and any stop string removed
    prompt_ids: torch.Tensor  # (R, P) left-padded
    prompt_mask: torch.Tensor  # (R, P) 1 = real token
    completion_ids: torch.Tensor  # (R, T) right-padded
    completion_mask: torch.Tensor  # (R, T) 1 = generated token (EOS included)
    logprobs: torch.Tensor  # (R, T) behaviour policy log-prob of each generated token, 0 on padding
    finish_reasons: list[str]  # (R,) "eos" | "stop" | "length"
    n: int = 1
    entropies: torch.Tensor | None = None  # (R, T) entropy of the sampling distribution per token, 0 on padding
    sum_p2: torch.Tensor | None = None  # (R, T) sum of squared sampling probabilities per token, 0 on padding
    extras: dict = field(default_factory=dict)
    hidden_grad_norm: torch.Tensor | None = None  # (R, T) ||W_U^T (e_y - p)|| when sampled with hidden_grad_norm
    # sub-groups: the context each row was generated under inside its group (NudgeRL: 0 = the bare
    # prompt, j = hint j); None: every row under its item's own prompt (context 0)
    context_ids: torch.Tensor | None = None  # (R,) long
    # the completion tokens the loss may see (STRIDE trains a redirected row on its regenerated suffix
    # only); None: the whole completion (completion_mask)
    train_mask: torch.Tensor | None = None  # (R, T)
    # the LoRA adapter each row was sampled under and is trained under (a population of adapters on one
    # backbone, PopuLoRA); None: every row under the model's active adapter
    adapters: list[str] | None = None  # (R,)
    # multi-turn episodes (rollout.episode): 1 on the tokens the policy sampled, 0 on the observations and turn
    # markers appended between its turns; multiplied into the loss mask. None: every completion token
    trainable: torch.Tensor | None = None  # (R, T)
    # a row's total reward fixed when it was made (an episode that overflowed its context or turn cap); NaN:
    # the recipe's rewards decide. None: NaN everywhere
    fixed_reward: torch.Tensor | None = None  # (R,) float
    # rows a reward could not score (a judge that failed: RewardResult.failed), set by the batch maker: left
    # out of the advantage and the loss. None: every row scored
    unscored: torch.Tensor | None = None  # (R,) bool

    @property
    def lengths(self) -> torch.Tensor:  # (R,) every completion token, an episode's observations included
        return self.completion_mask.sum(-1)

    @property
    def policy_lengths(self) -> torch.Tensor:  # (R,) the tokens the policy sampled (what length rewards count)
        return policy_tokens(self).sum(-1)

    @property
    def truncated(self) -> torch.Tensor:  # (R,) bool: cut at the token budget, or an episode at its context cap
        return torch.tensor([r in ("length", "context") for r in self.finish_reasons], dtype=torch.bool)


def policy_tokens(ro: Rollouts) -> torch.Tensor:  # -> (R, T)
    """The completion tokens the policy sampled: ``completion_mask`` times ``trainable`` (an episode's
    observations and turn markers are 0). What length rewards, length metrics, shapers and sequence scores
    read (issue 41); the scoring pass still attends to every completion token."""
    return (
        ro.completion_mask if ro.trainable is None else ro.completion_mask * ro.trainable.to(ro.completion_mask.dtype)
    )


def trained_tokens(ro: Rollouts) -> torch.Tensor:  # -> (R, T)
    """The completion tokens a loss may see before any filter: ``train_mask`` (or the whole completion)
    times ``trainable`` (an episode's policy tokens). The one place both are combined."""
    base = ro.completion_mask if ro.train_mask is None else ro.train_mask
    return base if ro.trainable is None else base * ro.trainable.to(base.dtype)


def select_rows(ro: Rollouts, rows: Sequence[int]) -> Rollouts:
    """The rollouts of ``rows`` only (e.g. the groups a filter keeps), in that order."""
    idx = torch.as_tensor(list(rows), dtype=torch.long)
    pick = lambda xs: [xs[i] for i in rows]  # noqa: E731
    return Rollouts(
        prompts=pick(ro.prompts),
        texts=pick(ro.texts),
        prompt_ids=ro.prompt_ids[idx],
        prompt_mask=ro.prompt_mask[idx],
        completion_ids=ro.completion_ids[idx],
        completion_mask=ro.completion_mask[idx],
        logprobs=ro.logprobs[idx],
        finish_reasons=pick(ro.finish_reasons),
        n=ro.n,
        entropies=None if ro.entropies is None else ro.entropies[idx],
        sum_p2=None if ro.sum_p2 is None else ro.sum_p2[idx],
        hidden_grad_norm=None if ro.hidden_grad_norm is None else ro.hidden_grad_norm[idx],
        context_ids=None if ro.context_ids is None else ro.context_ids[idx],
        train_mask=None if ro.train_mask is None else ro.train_mask[idx],
        adapters=None if ro.adapters is None else pick(ro.adapters),
        trainable=None if ro.trainable is None else ro.trainable[idx],
        fixed_reward=None if ro.fixed_reward is None else ro.fixed_reward[idx],
        unscored=None if ro.unscored is None else ro.unscored[idx],
    )


def concat_rollouts(parts: Sequence[Rollouts], pad_id: int) -> Rollouts:
    """Rows of several rollouts in order; prompts re-padded on the left, completions on the right."""
    if len(parts) == 1:
        return parts[0]
    P = max(p.prompt_ids.shape[1] for p in parts)
    T = max(p.completion_ids.shape[1] for p in parts)

    def pad(x: torch.Tensor, width: int, left: bool, value: float = 0) -> torch.Tensor:
        extra = torch.full((x.shape[0], width - x.shape[1]), value, dtype=x.dtype)
        return torch.cat([extra, x] if left else [x, extra], dim=1)

    def cat_optional(name: str) -> torch.Tensor | None:
        found = [getattr(p, name) for p in parts]
        return None if any(x is None for x in found) else torch.cat([pad(x, T, False) for x in found])

    # per-row fields that have a meaning when absent (context 0, the whole completion) are filled in
    contexts = [
        p.context_ids if p.context_ids is not None else torch.zeros(len(p.texts), dtype=torch.long) for p in parts
    ]
    train = [pad(p.train_mask if p.train_mask is not None else p.completion_mask, T, False) for p in parts]
    trainable = [pad(p.trainable if p.trainable is not None else p.completion_mask, T, False) for p in parts]
    fixed = [p.fixed_reward if p.fixed_reward is not None else torch.full((len(p.texts),), float("nan")) for p in parts]
    unscored = [p.unscored if p.unscored is not None else torch.zeros(len(p.texts), dtype=torch.bool) for p in parts]

    return Rollouts(
        prompts=sum((p.prompts for p in parts), []),
        texts=sum((p.texts for p in parts), []),
        prompt_ids=torch.cat([pad(p.prompt_ids, P, True, pad_id) for p in parts]),
        prompt_mask=torch.cat([pad(p.prompt_mask, P, True) for p in parts]),
        completion_ids=torch.cat([pad(p.completion_ids, T, False, pad_id) for p in parts]),
        completion_mask=torch.cat([pad(p.completion_mask, T, False) for p in parts]),
        logprobs=torch.cat([pad(p.logprobs, T, False) for p in parts]),
        finish_reasons=sum((p.finish_reasons for p in parts), []),
        n=parts[0].n,
        entropies=cat_optional("entropies"),
        sum_p2=cat_optional("sum_p2"),
        hidden_grad_norm=cat_optional("hidden_grad_norm"),
        context_ids=None if all(p.context_ids is None for p in parts) else torch.cat(contexts),
        train_mask=None if all(p.train_mask is None for p in parts) else torch.cat(train),
        # rows of parts without adapters keep the active one (None)
        adapters=None
        if all(p.adapters is None for p in parts)
        else sum((p.adapters if p.adapters is not None else [None] * len(p.texts) for p in parts), []),
        trainable=None if all(p.trainable is None for p in parts) else torch.cat(trainable),
        fixed_reward=None if all(p.fixed_reward is None for p in parts) else torch.cat(fixed),
        unscored=None if all(p.unscored is None for p in parts) else torch.cat(unscored),
    )


class Generator(Protocol):
    """What a rollout engine implements (docs/generator.md has the whole contract). ``seeds``: one
    per prompt; row ``(i, j)``'s randomness must depend on ``seeds[i]`` and ``j`` alone, so that a
    split of the prompts over calls, ranks or workers returns the same rollouts."""

    def generate(
        self, prompts: Sequence[str], n: int, sampling: SamplingParams, seeds: Sequence[int] | None = None
    ) -> Rollouts: ...
