"""What every rollout engine returns, and the protocol engines implement."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, Sequence

import torch


@dataclass(frozen=True)
class SamplingParams:
    """Sampling settings. ``temperature=0`` is greedy. Behaviour log-probs are those of the
    temperature-scaled distribution *before* top-k/top-p truncation, the distribution the trainer
    re-scores, so that the importance ratio is 1 on-policy."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 = off
    max_new_tokens: int = 64
    stop: tuple[str, ...] = ()  # generation of a row ends once its text contains one of these
    seed: int | None = None

    def __post_init__(self):
        if self.temperature < 0 or not 0 < self.top_p <= 1 or self.top_k < 0 or self.max_new_tokens < 1:
            raise ValueError(f"invalid sampling settings: {self}")


@dataclass
class Rollouts:
    """``R = len(prompts) * n`` completions; row ``r`` answers prompt ``r // n``.

    Token tensors are right-padded (completions) or left-padded (prompts) with masks; the EOS
    token, when sampled, is part of the completion and of its mask (the model must learn to stop).
    """

    prompts: list[str]  # (R,) the prompt text of each row
    texts: list[str]  # (R,) decoded completions, specials and any stop string removed
    prompt_ids: torch.Tensor  # (R, P) left-padded
    prompt_mask: torch.Tensor  # (R, P) 1 = real token
    completion_ids: torch.Tensor  # (R, T) right-padded
    completion_mask: torch.Tensor  # (R, T) 1 = generated token (EOS included)
    logprobs: torch.Tensor  # (R, T) behaviour policy log-prob of each generated token, 0 on padding
    finish_reasons: list[str]  # (R,) "eos" | "stop" | "length"
    n: int = 1
    entropies: torch.Tensor | None = None  # (R, T) entropy of the sampling distribution per token, 0 on padding
    extras: dict = field(default_factory=dict)

    @property
    def lengths(self) -> torch.Tensor:  # (R,)
        return self.completion_mask.sum(-1)

    @property
    def truncated(self) -> torch.Tensor:  # (R,) bool
        return torch.tensor([r == "length" for r in self.finish_reasons])


class Generator(Protocol):
    def generate(self, prompts: Sequence[str], n: int, sampling: SamplingParams) -> Rollouts: ...
