"""Multi-turn episodes as token ids: segments with a trainable flag, and their rows of a :class:`Rollouts`.

An episode is the prompt's ids followed by segments: the policy's turns (the ids it sampled, with their
behaviour log-probs: ``trainable``) and what the harness appended between them (observations and turn
markers, tokenised once when appended: not trainable). Nothing is ever decoded and re-encoded, so the
ids a loss trains on are the ids the model sampled (verl #6719 drifted by re-tokenising text), and the
mask is built from the ids, never from text (TRL #5144's mask outgrew its ids).

A batch of episodes becomes ordinary rollout rows: ``completion_ids`` are the concatenated segments,
``completion_mask`` is 1 on all of them (the scoring pass attends to the observations), ``logprobs``
are the behaviour log-probs on the policy's tokens and 0 elsewhere, and ``trainable`` is the per-token
flag that :func:`~reasonrl.rollout.base.trained_tokens` multiplies into every loss mask.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch

from .base import Rollouts

FINISH = ("answer", "done", "turns", "context")  # env answered | env ended without one | turn cap | context cap


@dataclass
class Segment:
    """``role``: "assistant" (sampled by the policy) or "observation" (the environment's reply, with any
    turn markers); ``logprobs``: the behaviour log-prob of each sampled id (trainable segments only)."""

    role: str
    ids: list[int]
    trainable: bool
    logprobs: list[float] | None = None

    def __post_init__(self):
        if self.trainable and (self.logprobs is None or len(self.logprobs) != len(self.ids)):
            raise ValueError(
                f"a trainable segment needs one behaviour log-prob per id: {len(self.ids)} ids, "
                f"{None if self.logprobs is None else len(self.logprobs)} log-probs"
            )


@dataclass
class Episode:
    """One episode: its prompt ids, its segments in order, and how it ended (:data:`FINISH`)."""

    prompt_ids: list[int]
    segments: list[Segment] = field(default_factory=list)
    finish_reason: str = ""
    answer: str | None = None
    turns: int = 0  # policy turns taken

    @property
    def ids(self) -> list[int]:  # the completion: every segment's ids, in order
        return [i for s in self.segments for i in s.ids]

    @property
    def context_ids(self) -> list[int]:  # what the policy sees before its next turn
        return self.prompt_ids + self.ids

    @property
    def loss_mask(self) -> list[int]:  # 1 on the ids the policy sampled, 0 on what was appended
        return [int(s.trainable) for s in self.segments for _ in s.ids]

    @property
    def logprobs(self) -> list[float]:  # behaviour log-probs on sampled ids, 0 elsewhere
        return [lp for s in self.segments for lp in (s.logprobs if s.trainable else [0.0] * len(s.ids))]

    @property
    def done(self) -> bool:
        return bool(self.finish_reason)


def middle_truncate(ids: Sequence[int], cap: int, marker: Sequence[int]) -> list[int]:
    """``ids`` if at most ``cap`` long, else its head and tail around ``marker``, ``cap`` ids in all (the
    start of an error and its last line both matter). ``cap`` must leave room for the marker."""
    ids, marker = list(ids), list(marker)
    if len(ids) <= cap:
        return ids
    keep = cap - len(marker)
    if keep < 2:
        raise ValueError(f"observation cap {cap} leaves no room around the truncation marker ({len(marker)} tokens)")
    head = (keep + 1) // 2
    return ids[:head] + marker + ids[len(ids) - (keep - head) :]


def fixed_rewards(episodes: Sequence[Episode], rewards: dict[str, float]) -> torch.Tensor:  # -> (R,)
    """The reward each episode's finish reason fixes (``rewards``: reason -> value), NaN where the task decides."""
    return torch.tensor([rewards.get(e.finish_reason, float("nan")) for e in episodes], dtype=torch.float32)


def episodes_to_rollouts(
    episodes: Sequence[Episode],
    prompts: Sequence[str],
    n: int,
    pad_id: int,
    texts: Sequence[str],
    fixed: torch.Tensor | None = None,
) -> Rollouts:
    """Rollout rows of ``episodes`` (group-major, ``n`` per prompt). ``prompts``: each row's rendered
    prompt; ``texts``: what each row answered (what the task's verifier reads)."""
    R = len(episodes)
    if not (len(prompts) == len(texts) == R) or R % max(n, 1):
        raise ValueError(f"episodes_to_rollouts: {R} episodes, {len(prompts)} prompts, {len(texts)} texts, n={n}")
    P = max((len(e.prompt_ids) for e in episodes), default=0)
    T = max((len(e.ids) for e in episodes), default=0)
    prompt_ids = torch.full((R, P), pad_id, dtype=torch.long)  # (R, P) left-padded
    prompt_mask = torch.zeros(R, P, dtype=torch.long)
    comp = torch.full((R, T), pad_id, dtype=torch.long)  # (R, T) right-padded
    comp_mask, trainable = torch.zeros(R, T, dtype=torch.long), torch.zeros(R, T, dtype=torch.long)
    logp = torch.zeros(R, T)  # (R, T)
    for r, e in enumerate(episodes):
        p, c = len(e.prompt_ids), len(e.ids)
        prompt_ids[r, P - p :], prompt_mask[r, P - p :] = torch.tensor(e.prompt_ids, dtype=torch.long), 1
        if c:
            comp[r, :c], comp_mask[r, :c] = torch.tensor(e.ids, dtype=torch.long), 1
            trainable[r, :c] = torch.tensor(e.loss_mask, dtype=torch.long)
            logp[r, :c] = torch.tensor(e.logprobs)
    return Rollouts(
        prompts=list(prompts),
        texts=list(texts),
        prompt_ids=prompt_ids,
        prompt_mask=prompt_mask,
        completion_ids=comp,
        completion_mask=comp_mask,
        logprobs=logp,
        finish_reasons=[e.finish_reason for e in episodes],
        n=n,
        trainable=trainable,
        fixed_reward=fixed,
        extras={"episodes": list(episodes)},
    )
