"""Reward models as rewards: the protocol a learned scorer meets, and GRLO's style control.

* :class:`RewardModel` -- anything with ``score(prompts, completions) -> list[float]`` (one scalar
  per (prompt, completion) pair): a Bradley-Terry model trained from preferences, a model-backed
  judge. :func:`as_reward` makes one a reward of the TRL contract, so it joins ``extra_rewards``
  like any verifier (the HF-backed one is :class:`reasonrl.models.reward_model.RMReward`).
* :func:`style_mix` -- GRLO's unreleased ``style_mix`` reward manager as the spec infers it
  (envs-selfplay-eval section 8 (c), [inferred], behind a flag): ``r = rm - coef * max(0, L - L0) / L0``,
  a length control that keeps the reward model's taste for longer answers from running away.

Pure Python (no torch): the scorer is whatever object is passed in.
"""

from __future__ import annotations

from typing import Any, Protocol, Sequence, runtime_checkable

from .base import Reward, RewardResult

__all__ = ["RewardModel", "as_reward", "style_mix"]


@runtime_checkable
class RewardModel(Protocol):
    def score(self, prompts: Sequence[str], completions: Sequence[str]) -> list[float]:
        """One scalar per (prompt, completion) pair: higher is preferred."""


def style_mix(scores: Sequence[float], lengths: Sequence[int], coef: float, target: int) -> list[float]:
    """``score - coef * max(0, L - target) / target`` per row (no penalty up to ``target`` tokens, then
    ``coef`` per ``target`` tokens of excess); ``coef = 0`` returns the scores unchanged."""
    if len(scores) != len(lengths):
        raise ValueError(f"style_mix got {len(scores)} scores for {len(lengths)} lengths")
    if coef < 0 or (coef > 0 and target < 1):
        raise ValueError(f"style_mix needs coef >= 0 and, when coef > 0, a target length >= 1; got {coef}, {target}")
    if coef == 0:
        return [float(s) for s in scores]
    return [float(s) - coef * max(0, int(n) - target) / target for s, n in zip(scores, lengths)]


class _ModelReward(Reward):
    def __init__(self, model: RewardModel, name: str):
        self.model, self.name = model, name

    def score(self, prompts: Sequence[str], completions: Sequence[str], **columns: Any) -> RewardResult:
        values = [float(v) for v in self.model.score(list(prompts), list(completions))]
        return RewardResult(values)


def as_reward(model: RewardModel, name: str = "rm") -> Reward:
    """``model`` as a reward (``(prompts, completions, **columns) -> list[float]``); ``name`` names its
    metrics (``reward/<name>/mean``) and its config section (``rewards.<name>.weight``)."""
    if not isinstance(model, RewardModel):
        raise TypeError(f"as_reward needs an object with score(prompts, completions), got {type(model).__name__}")
    return _ModelReward(model, name)
