"""The parts a recipe is made of: small frozen dataclasses that name a pure function and its knobs.

A :class:`Recipe` is data: the trainer calls its parts (``recipe.advantage(rewards)``,
``recipe.loss(...)``) and never looks at a recipe's name. Every field can be overridden from YAML
or the command line with a dotted key (``loss.clip_high=0.28``, ``optim.lr=1e-5``).
"""
from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from .advantages import get_estimator
from .losses import entropy_bonus, kl_loss, policy_loss


@dataclass(frozen=True)
class Advantage:
    """(B, G) rewards -> (B, G) advantages by a named estimator (``reasonrl.advantages``)."""

    estimator: str = "grpo"
    scale: str = "group"  # grpo only: group | batch | none
    eps: float = 1e-6
    unbiased: bool = True

    def __call__(self, rewards: torch.Tensor) -> torch.Tensor:
        fn = get_estimator(self.estimator)
        accepted = inspect.signature(fn).parameters
        knobs = {k: v for k, v in dataclasses.asdict(self).items() if k in accepted and k != "rewards"}
        return fn(rewards, **knobs)


@dataclass(frozen=True)
class PolicyLoss:
    """The three knobs of the policy loss: ratio level, trust region, aggregation."""

    ratio: str = "token"  # token | sequence (GSPO)
    clip_low: float = 0.2
    clip_high: float = 0.2
    dual_clip: float | None = None
    agg: str = "seq-mean-token-mean"
    norm_len: int | None = None  # seq-mean-token-sum-norm: None = the generation budget

    def __call__(self, logp, old_logp, adv, mask, *, n_tokens, n_seqs, norm_len):
        return policy_loss(logp, old_logp, adv, mask, ratio=self.ratio, clip_low=self.clip_low,
                           clip_high=self.clip_high, dual_clip=self.dual_clip, agg=self.agg,
                           norm_len=self.norm_len or norm_len, n_tokens=n_tokens, n_seqs=n_seqs)


@dataclass(frozen=True)
class KL:
    """KL to a frozen reference model; the reference is only loaded when ``coef`` > 0."""

    coef: float = 0.0
    estimator: str = "k3"


@dataclass(frozen=True)
class Sampling:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int | None = None  # None: the task's budget


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


@dataclass(frozen=True)
class Recipe:
    name: str
    paper: str = ""
    inferred: tuple[str, ...] = ()  # every choice not fixed by the paper, stated
    advantage: Advantage = Advantage()
    shapers: tuple[Callable[..., torch.Tensor], ...] = ()  # applied in order after the estimator
    loss: PolicyLoss = PolicyLoss()
    kl: KL = KL()
    entropy_coef: float = 0.0
    group_size: int = 8
    sampling: Sampling = Sampling()
    optim: Optim = Optim()
    extra_rewards: tuple[tuple[Callable[..., Any], float], ...] = ()  # (reward fn, weight) added to the task's
    aux_losses: tuple[Callable[..., Any], ...] = field(default=())

    def describe(self) -> dict[str, Any]:
        out = {"name": self.name, "paper": self.paper, "inferred": list(self.inferred)}
        for f in ("advantage", "loss", "kl", "sampling", "optim"):
            out[f] = dataclasses.asdict(getattr(self, f))
        out.update(entropy_coef=self.entropy_coef, group_size=self.group_size,
                   shapers=[getattr(s, "__name__", type(s).__name__) for s in self.shapers])
        return out


def kl_term(logp, ref_logp, mask, kl: KL, **norm):
    return kl_loss(logp, ref_logp, mask, coef=kl.coef, estimator=kl.estimator, **norm)


def entropy_term(entropy, mask, coef: float, **norm):
    return entropy_bonus(entropy, mask, coef=coef, **norm)
