"""How a step's rollouts are made: the rollout-strategy and second-round protocols (recipe parts).

The batch maker does not know plain sampling from beam branching, steering or hinted sub-groups:
it asks the recipe for its one :class:`RolloutStrategy` and calls ``generate``. After the first
round is rewarded, each :class:`Round` of the recipe (CIPO's corrections, STRIDE's redirections)
may add groups built from it. A new sampler or round is a new class with one method; the batch
maker and the trainer stay as they are (the whole hook list: :mod:`.protocol`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence, runtime_checkable

import torch

from ..models.chat import PLAIN, PromptFormatter
from ..rollout import Rollouts, SamplingParams
from ..rollout.batch import Groups
from ..seeds import stable_seed


@dataclass
class GenRequest:
    """What a strategy gets: the items (drawn at task positions ``first``, ``first + 1``, ...), the
    engine, the task, ``group_size`` rows to make per item, the sampling settings, the run's seed,
    the training progress (for schedules) and the part's own cache, which lives as long as the batch
    maker (for things computed once from the initial model, e.g. a steering vector), and the run's
    prompt ``formatter`` (a strategy renders the prompts it hands the engine with it)."""

    items: Sequence[Any]
    first: int
    engine: Any
    task: Any
    group_size: int
    sampling: SamplingParams
    seed: int
    step: int = 0
    total_steps: int = 1
    cache: dict[str, Any] = field(default_factory=dict)
    formatter: PromptFormatter = PLAIN

    def seeds(self, *tag: Any) -> list[int]:
        """One seed per item, keyed by its task position (and ``tag``): a resumed run, any split over
        ranks or workers and any batch composition leave an item's samples alone."""
        return [stable_seed(self.seed, "sample", self.first + i, *tag) for i in range(len(self.items))]

    def generator(self) -> torch.Generator:
        """A generator seeded by the first item's task position (for strategies that branch or steer)."""
        return torch.Generator(self.engine.device).manual_seed(stable_seed(self.seed, "rollout", self.first))


@runtime_checkable
class RolloutStrategy(Protocol):
    """``generate(req) -> (Rollouts, metrics)``: ``len(req.items) * req.group_size`` rows, group-major (row
    ``i * G + j`` answers item ``i``); ``context_ids`` set when rows of a group saw different prompts. The
    metrics join the step's (averaged over a group filter's rounds, as the rewards' statistics)."""

    def generate(self, req: GenRequest) -> tuple[Rollouts, dict[str, float]]: ...


@dataclass(frozen=True)
class PlainSampling:
    """G independent samples per prompt, each prompt's randomness keyed by its task position. The
    only strategy whose request an asynchronous engine can start ahead of time (``prefetchable``)."""

    prefetchable = True

    def generate(self, req: GenRequest) -> tuple[Rollouts, dict[str, float]]:
        prompts = req.formatter.render_all([it.prompt for it in req.items])
        return req.engine.generate(prompts, req.group_size, req.sampling, seeds=req.seeds()), {}


@runtime_checkable
class Round(Protocol):
    """``extend(ctx) -> (Groups | None, metrics)``: more groups made from the first round (``ctx.batch``:
    its items, rollouts, rewards, correctness) with the narrow sampling surface of a
    :class:`~reasonrl.parts.protocol.RoundContext` (``sample``, ``branch``, ``reward``,
    ``score_under``, ``advantage``), the part's own checkpointed ``state`` and the training progress.
    None: no groups this step; the metrics join the step's either way."""

    def extend(self, ctx: Any) -> tuple[Groups | None, dict[str, float]]: ...


PLAIN = PlainSampling()


def one_strategy(parts: Sequence[Any]) -> RolloutStrategy:
    """The recipe's rollout strategy: the one part that generates, or plain sampling."""
    found = [p for p in parts if isinstance(p, RolloutStrategy)]
    if len(found) > 1:
        names = ", ".join(type(p).__name__ for p in found)
        raise ValueError(f"a recipe can use one rollout strategy, got {names}: turn all but one off")
    return found[0] if found else PLAIN
