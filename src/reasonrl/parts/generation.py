"""Recipe parts of data and generation: dynamic sampling (DAPO's group filter), Mu-GRPO's stages,
VSPO's steering, CodeThinker's beam, the sampling settings and the optimiser."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import ClassVar

import torch

from ..models.steering import annealed_alpha_max, generate_steered, intensity_grid, steering_vector, uniform_intensities
from ..rollout import Rollouts
from ..rollout.beam import beam_rollout
from ..config.rules import Rule, above, at_least, one_of, within
from ..seeds import stable_seed
from ..tasks.protocols import Branching
from .protocol import register_part
from .strategy import GenRequest


@dataclass(frozen=True)
class GroupFilter:
    """Dynamic sampling (DAPO, arXiv 2503.14476): keep only groups whose ``metric`` varies, and
    generate more prompts until the batch is full: at most ``max_rounds`` rounds, after which the
    batch may come out short (``dynamic/batch_short``, counted in ``dynamic/short_batches_total``);
    ``max_rounds=None`` is the paper's "over-sample until N valid groups": rounds go on until full and
    ``max_rounds_cap`` rounds without filling it raise an error naming the counts.

    ``metric="accuracy"`` (the default) is the raw task correctness, never the shaped reward: a
    length or format bonus can make a group's rewards differ while every answer is equally wrong
    (verl's filter on the shaped score is a known pain point). ``"reward"`` filters on the total.
    """

    metric: str = "accuracy"  # accuracy | reward
    max_rounds: int | None = 3  # None: refill until full (at most max_rounds_cap rounds, then an error)
    max_rounds_cap: int = 100

    RULES: ClassVar[dict[str, Rule]] = {
        "metric": one_of(("accuracy", "reward")),
        "max_rounds": Rule(lambda v, _: v >= 1, ">= 1, or null to refill until the batch is full"),
        "max_rounds_cap": at_least(1),
    }

    @property
    def round_limit(self) -> int:
        """Rounds one batch may take: ``max_rounds``, or the cap when refilling until full."""
        return self.max_rounds_cap if self.max_rounds is None else self.max_rounds

    def keep(self, rewards: torch.Tensor, correct: torch.Tensor) -> torch.Tensor:
        """(B, G) rewards and 0/1 correctness -> (B,) bool: the group's metric is not constant."""
        values = correct if self.metric == "accuracy" else rewards
        return values.max(-1).values > values.min(-1).values


@dataclass(frozen=True)
class Stages:
    """Mu-GRPO (arXiv 2605.17570): ``count`` stages; each generates all its steps' rollouts at once
    with one frozen policy (behaviour log-probs stored then), then runs ``optim.mu`` epochs over that
    buffer. Inferred mapping, so that a step stays a logged step and the prompt budget ignores mu: an
    epoch cuts a fresh permutation of the stage's S x prompts_per_step groups into S x minibatches
    minibatches; the epochs run in turn, mu x minibatches minibatch steps per logged step, so a run
    takes steps x mu x minibatches optimiser steps with or without stages. Minibatch j of a stage
    (from 0, across its epochs) is j policy versions stale."""

    count: int = 4

    RULES: ClassVar[dict[str, Rule]] = {"count": at_least(1)}

    def steps_per_stage(self, total_steps: int) -> int:
        return -(-total_steps // self.count)  # ceil: the last stage may be shorter


@register_part("steering")
@dataclass(frozen=True)
class Steering:
    """VSPO rollouts (arXiv 2605.15604; specifics inferred): each group's samples are generated at
    mixed intensities along the unit mean-activation difference between ``positive`` and ``negative``
    texts at decoder layer ``layer`` (scaled by the mean residual norm there); the update is on the
    unsteered policy, whose re-scored log-probs are the behaviour log-probs unless ``is_correction``.
    Spec options: ``alphas`` grid (0..alpha_max) or uniform (sample 0 at 0, the rest U[0, alpha_max]);
    ``anneal`` alpha_max to 0 at the last step; ``steer_prompt`` also steers prompt positions
    (functions in :mod:`reasonrl.models.steering`)."""

    PHASE = "rollout"  # the hook order (parts/registry.py)

    layer: int = 1
    alpha_max: float = 4.0
    positive: tuple[str, ...] = ()
    negative: tuple[str, ...] = ()
    is_correction: bool = False
    alphas: str = "grid"  # grid | uniform
    anneal: str = "none"  # none | linear | cosine
    steer_prompt: bool = False
    needs: ClassVar[frozenset[str]] = frozenset({"in_process", "own_engine"})  # forward hooks on the trainer's model

    RULES: ClassVar[dict[str, Rule]] = {
        "layer": at_least(0),
        "alpha_max": at_least(0),
        "alphas": one_of(("grid", "uniform")),
        "anneal": one_of(("none", "linear", "cosine")),
        "positive": Rule(lambda v, _: len(v) > 0, "at least one example text (the steering vector's positive side)"),
        "negative": Rule(lambda v, _: len(v) > 0, "at least one example text (the steering vector's negative side)"),
    }

    def generate(self, req: GenRequest) -> tuple[Rollouts, dict[str, float]]:
        """Rollouts at this step's intensities: alpha_max annealed by the training progress, a grid
        or uniform draws seeded by the task position (so a resumed run draws the same). The vector
        is computed once, from the initial model, and kept in the request's cache."""
        if "steering" not in req.cache:  # a frozen direction (VSPO)
            req.cache["steering"] = steering_vector(
                req.engine.model, req.engine.tok, self.positive, self.negative, self.layer
            )
        (unit, scale), G = req.cache["steering"], req.group_size
        amax = annealed_alpha_max(self.alpha_max, self.anneal, req.step, req.total_steps)
        alphas = (
            intensity_grid(G, amax)
            if self.alphas == "grid"
            else uniform_intensities(G, amax, stable_seed(req.seed, req.first + len(req.items), "alphas"))
        )
        ro = generate_steered(
            req.engine,
            [it.prompt for it in req.items],
            req.sampling,
            unit=unit,
            scale=scale,
            layer=self.layer,
            alphas=alphas,
            generator=req.generator(),
            is_correction=self.is_correction,
            steer_prompt=self.steer_prompt,
        )
        return ro, {"steer/alpha_max": amax, "steer/alpha_mean": sum(alphas) / len(alphas)}


@register_part("beam")
@dataclass(frozen=True)
class BeamSampling:
    """CodeThinker's dynamic beam sampling (arXiv 2605.17958; inferred minimal variant of the spec):
    of a group's G completions, ``round(G * first_frac)`` are sampled independently and the rest are
    branched from the ``k = min(k_max, rest)`` best prefixes, cut where the task says the reasoning
    first goes wrong (``task.branch_point``). The budget G is never exceeded."""

    PHASE = "rollout"

    first_frac: float = 0.5
    k_max: int = 2
    needs: ClassVar[frozenset[str]] = frozenset({"in_process"})  # branches from prefixes on the trainer's model

    task_needs: ClassVar[tuple[type, ...]] = (Branching,)  # branches where the task says a completion goes wrong
    RULES: ClassVar[dict[str, Rule]] = {"first_frac": within(0, 1, open_lo=True), "k_max": at_least(1)}

    def plan(self, group_size: int) -> tuple[int, int]:
        """(B0 independent samples, k prefixes to branch from) for a budget of ``group_size``."""
        b0 = min(group_size, max(1, round(group_size * self.first_frac)))
        return b0, min(self.k_max, group_size - b0)

    def generate(self, req: GenRequest) -> tuple[Rollouts, dict[str, float]]:
        # seeded by the task position, so a resumed run branches the same way; the branching's counts
        # travel in ro.extras["metrics"] (beam_rollout's, as an engine's do), so the part adds none
        rng = random.Random(stable_seed(req.seed, req.first + len(req.items)))
        ro = beam_rollout(
            req.engine,
            req.task,
            req.items,
            req.group_size,
            req.sampling,
            self.plan(req.group_size),
            req.generator(),
            rng,
        )
        return ro, {}


@dataclass(frozen=True)
class Sampling:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0  # drop tokens below min_p x the top token's probability (0: off; SAGE's config: 0.01)
    max_new_tokens: int | None = None  # None: the task's budget

    RULES: ClassVar[dict[str, Rule]] = {
        "temperature": Rule(lambda v, _: v >= 0, ">= 0 (0: greedy)"),
        "top_p": within(0, 1, open_lo=True),
        "top_k": Rule(lambda v, _: v >= 0, ">= 0 (0: off)"),
        "min_p": within(0, 1, open_hi=True),
        "max_new_tokens": Rule(lambda v, _: v >= 1, ">= 1, or null for the task's budget"),
    }


@dataclass(frozen=True)
class Optim:
    lr: float = 3e-5
    weight_decay: float = 0.0
    beta1: float = 0.9
    beta2: float = 0.99
    warmup_steps: int = 5
    schedule: str = "cosine"  # cosine | constant (after warmup)
    min_lr_ratio: float = 0.1
    max_grad_norm: float = 1.0
    mu: int = 1  # optimisation passes over each generated batch
    minibatches: int = 1  # optimiser steps per pass

    RULES: ClassVar[dict[str, Rule]] = {
        "lr": above(0),
        "weight_decay": at_least(0),
        "beta1": within(0, 1, open_hi=True),
        "beta2": within(0, 1, open_hi=True),
        "warmup_steps": at_least(0),
        "schedule": one_of(("cosine", "constant")),  # the trainer's lr_lambda
        "min_lr_ratio": within(0, 1),
        "max_grad_norm": above(0),
        "mu": at_least(1),
        "minibatches": at_least(1),
    }
