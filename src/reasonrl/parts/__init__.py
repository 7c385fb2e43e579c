"""The parts a recipe is made of: small frozen dataclasses that name a pure function and its knobs.

A :class:`Recipe` is data: the GRPO skeleton every method shares (advantage estimator and shapers,
policy loss, KL, sampling, optimiser, dynamic sampling, stages, a selector, extra rewards) as
fields, plus the method's own parts by key (``Recipe(correction=Correction())``; the key is the
config section, ``correction.p_max=0.5``). The batch maker and the trainer call the parts' hooks
(:mod:`.protocol`) and never look at a recipe's name.

Every module of this package is imported (:mod:`.registry`): a part is registered by its
``@register_part`` alone, and the order its hooks run in is the one its class declares (``PHASE``,
``AFTER``), not the order of the imports below (those only keep the package's public names).
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Iterator, NamedTuple

import torch

from ..advantages import group_relative
from ..data.lze import LZE
from ..data.selector import Selector
from ..rewards.options import reward_options
from ..config.rules import Rule
from .protocol import HOOKS, PART_TYPES, Parts, TaskSetup, hook_result, part_needs, register_part
from .registry import import_all, order_parts

# the public names (the hook order is declared by the parts: .registry)
from .generation import BeamSampling, GroupFilter, Optim, Sampling, Stages, Steering
from .episodes import Episodes  # multi-turn agent episodes: a rollout strategy
from .critic import Critic
from .nudge import HintSampling
from .correction import Correction
from .redirect import Redirect
from .selfteach import EGRSD, SSOPD
from .d2evo import D2Evo
from .teacher import KDRL, RKLOPD, TGPO, Teacher
from .fest import FEST
from .drafts import Drafts
from .vpd import VPD
from .su01 import RefineReplay
from .azr import AZR
from .evoenv import EvoEnv
from .populora import PopuLoRA
from .prompt_policy import PromptPolicy
from .balance import TrajectoryBalance
from .diffusion import Diffusion
from .objective import (
    EDAS,
    KL,
    Advantage,
    CorrBonus,
    PolicyLoss,
    StepCredit,
    Veto,
    entropy_term,
    kl_term,
    loss_agg,
    policy_term,
)
from .strategy import GenRequest, Groups, PlainSampling, Round, RolloutStrategy, one_strategy

__all__ = [
    "Critic",
    "D2Evo",
    "Diffusion",
    "EDAS",
    "EGRSD",
    "FEST",
    "SSOPD",
    "KL",
    "Advantage",
    "BeamSampling",
    "CorrBonus",
    "Correction",
    "Drafts",
    "Episodes",
    "GenRequest",
    "GroupFilter",
    "Groups",
    "HintSampling",
    "Optim",
    "PART_TYPES",
    "Parts",
    "PlainSampling",
    "Smoke",
    "PolicyLoss",
    "Recipe",
    "Redirect",
    "RefineReplay",
    "RolloutStrategy",
    "Round",
    "Sampling",
    "Stages",
    "Steering",
    "StepCredit",
    "TrajectoryBalance",
    "VPD",
    "Veto",
    "entropy_term",
    "kl_term",
    "loss_agg",
    "policy_term",
    "register_part",
    "KDRL",
    "RKLOPD",
    "TGPO",
    "Teacher",
    "AZR",
    "EvoEnv",
    "PopuLoRA",
    "PromptPolicy",
]

import_all(sys.modules[__name__])  # every part module, so each @register_part has run
order_parts(PART_TYPES)  # the hook order the parts declare (a bad AFTER or a cycle fails here, at import)

# what names and documents a recipe and what its tests need; no part, no option
IDENTITY = ("name", "paper", "inferred", "summary", "details", "doc", "smoke")
NOT_HOOKED = IDENTITY + ("extra_rewards", "run_defaults")  # fields that hold no part with hooks
POLICY_METRICS = ("loss/policy", "loss/clip_frac_low", "loss/clip_frac_high")


class Smoke(NamedTuple):
    """What the recipe's two-step smoke test runs on (tests/test_every_recipe.py): the task and its
    options, the metric keys the recipe's own parts log at every step, and the dotted keys (as on the
    command line: ``hints.per_hint``, ``data.pool``) that make its parts small enough for two CPU steps."""

    task: str = "arithmetic"
    task_options: tuple[tuple[str, Any], ...] = ()
    metrics: tuple[str, ...] = POLICY_METRICS
    changes: tuple[tuple[str, Any], ...] = ()


def _min_group(values) -> int:
    return 2 if group_relative(values.get("advantage.estimator", "")) else 1


def _group_text(values) -> str:
    if _min_group(values) == 2:
        return (
            f">= 2 (estimator {values.get('advantage.estimator')!r} compares the samples of a prompt; a group "
            "of 1 learns nothing)"
        )
    return ">= 1"


@dataclass(frozen=True)
class Recipe:
    name: str
    paper: str = ""
    inferred: tuple[str, ...] = ()  # every choice not fixed by the paper, stated
    # its documentation (the docs' generated tables), not the method: two recipes that differ only here are equal
    summary: str = field(default="", compare=False)  # the method in one line (the README's recipe table)
    details: str = field(default="", compare=False)  # what it changes, with its numbers (docs/recipes.md; "": summary)
    doc: str = field(default="", compare=False)  # its page in docs/ ("selfteach.md"; empty: recipes.md)
    advantage: Advantage = Advantage()
    shapers: tuple[Callable[..., torch.Tensor], ...] = ()  # (adv, BatchContext) -> adv, after the estimator, in order
    loss: PolicyLoss | None = PolicyLoss()  # None: no policy loss (trajectory balance's loss term is the objective)
    kl: KL = KL()
    entropy_coef: float = 0.0
    group_size: int = 8
    sampling: Sampling = Sampling()
    optim: Optim = Optim()
    extra_rewards: tuple[tuple[Callable[..., Any], float], ...] = ()  # (reward fn, weight) added to the task's
    # weight of the task's own verifier in the total reward: 0 when a method's reward replaces it (SSPO, TEMPO,
    # CodeThinker); raw correctness (filters, accuracy, EDAS) always comes from the verifier
    task_reward_weight: float = 1.0
    group_filter: GroupFilter | None = None  # dynamic sampling; None keeps every group
    mask_truncated: bool = False  # overlong filtering: truncated completions leave the loss entirely
    stages: Stages | None = None  # generate-then-train-many (Mu-GRPO); None: generate every step
    # which prompts get rollouts and which groups reach the update (data.selector); config: LZE's options
    selector: Selector | None = field(default=None, metadata={"part": LZE})
    aux_losses: tuple[Callable[..., Any], ...] = ()  # (LossContext) -> (loss, metrics), beside the policy loss
    parts: Parts = Parts()  # the method's own parts by key (a registered part name: its config section)
    # run settings the recipe needs to run as `reasonrl train --recipe NAME` alone (dotted keys: data.pool for a
    # selector with per-prompt state, lora.r for adapter parts); the command line applies them unless given
    run_defaults: tuple[tuple[str, Any], ...] = ()
    smoke: Smoke = field(default=Smoke(), compare=False)  # the smoke test's settings: no part of the method

    RULES: ClassVar[dict[str, Rule]] = {
        "group_size": Rule(lambda v, c: v >= _min_group(c), _group_text),
    }

    def __post_init__(self):
        if not isinstance(self.parts, Parts):
            object.__setattr__(self, "parts", Parts(self.parts))
        one_strategy([p for _, p in self.hooked()])  # two parts that both generate: an error when the recipe is made
        if self.loss is None and not self.calls("loss_term") and self.kl.coef == 0 and not self.entropy_coef:
            raise ValueError(f"recipe {self.name!r} has no policy loss (loss=None) and no other term: nothing to train")
        _ = self.data_selector  # two selectors: likewise

    def __getattr__(self, name: str) -> Any:
        """A registered part by its key (None when the recipe has none): ``recipe.correction``."""
        if name in PART_TYPES:
            return self.parts.get(name)
        raise AttributeError(f"{type(self).__name__!r} has no field or part {name!r}")

    # ------------------------------------------------------------------ the parts and their hooks
    def hooked(self, hook: str | None = None) -> list[tuple[str, Any]]:
        """(key, part) of every object that may implement hooks, in the order they run: the skeleton's
        fields, the shapers (``shapers.i``), the method parts, the auxiliary losses (``aux_losses.i``);
        with ``hook``, only those that implement it (a plain shaper / aux loss is itself its hook)."""
        out: list[tuple[str, Any]] = []
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name in NOT_HOOKED:
                continue
            if f.name == "parts":
                out += list(value.items())
            elif isinstance(value, tuple):
                out += [(f"{f.name}.{i}", v) for i, v in enumerate(value)]
            elif value is not None:
                out.append((f.name, value))
        if hook is None:
            return out
        if hook not in HOOKS:
            raise ValueError(f"unknown hook {hook!r}; the protocol's hooks: {', '.join(HOOKS)}")
        plain = {"shape_advantages": "shapers.", "loss_term": "aux_losses."}.get(hook)
        return [(k, p) for k, p in out if hasattr(p, hook) or (plain and k.startswith(plain))]

    def calls(self, hook: str) -> list[tuple[str, Callable[..., Any]]]:
        """(key, callable) of every implementation of ``hook``, in order."""
        return [(k, getattr(p, hook, p)) for k, p in self.hooked(hook)]

    @property
    def strategy(self) -> RolloutStrategy:
        return one_strategy([p for _, p in self.hooked()])

    @property
    def rounds(self) -> list[tuple[str, Any]]:
        """(key, part) of the second rounds; the k-th (from 1) gives its groups kind k."""
        return self.hooked("extend")

    @property
    def data_selector(self) -> tuple[str, Selector] | None:
        """(key, part) of the one part that selects data: the ``selector`` field, or a part that is
        also a selector (D2Evo); two of them are an error."""
        found = [(k, p) for k, p in self.hooked() if isinstance(p, Selector)]
        if len(found) > 1:
            raise ValueError(f"a recipe can use one selector, got {', '.join(type(p).__name__ for _, p in found)}")
        return found[0] if found else None

    @property
    def needs(self) -> frozenset[str]:
        """What the recipe's parts need of the run (``protocol.NEEDS``); a KL term needs the reference."""
        out = frozenset().union(*(part_needs(p) for _, p in self.hooked()))
        return out | {"reference"} if self.kl.coef > 0 else out

    def wrap_task(self, task: Any, tokenizer: Any = None, seed: int = 0) -> tuple[Any, dict[str, float]]:
        """The run's task as the recipe's parts present it (each ``wrap_task`` part, in order), and their
        metrics (setup metrics: the run logs them with its first step, as the trainer's ``setup_metrics``)."""
        metrics: dict[str, float] = {}
        for key, part in self.hooked("wrap_task"):
            task, m = hook_result(
                key, "wrap_task", part.wrap_task(TaskSetup(task=task, tokenizer=tokenizer, seed=seed))
            )
            metrics.update(m)
        return task, metrics

    def describe(self) -> dict[str, Any]:
        """Every option of the recipe as plain data (``reasonrl recipes``, the run's config)."""
        out: dict[str, Any] = {
            "name": self.name,
            "paper": self.paper,
            "summary": self.summary,
            "doc": self.doc,
            "inferred": list(self.inferred),
        }
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name in IDENTITY:
                continue
            if f.name == "parts":
                out.update({k: _asdict(value.get(k)) for k in PART_TYPES})
                out.update({k: _asdict(p) for k, p in value.items() if k not in PART_TYPES})
            elif f.name == "run_defaults":
                out[f.name] = dict(value)
            elif f.name == "selector":
                out[f.name] = None if value is None else repr(value)
            elif f.name == "extra_rewards":
                out[f.name] = [f"{w} x {_describe(fn)}" for fn, w in value]
            elif isinstance(value, tuple):
                out[f.name] = [_describe(v) for v in value]
            else:
                out[f.name] = _asdict(value)
        return out


def _asdict(value: Any) -> Any:
    return dataclasses.asdict(value) if dataclasses.is_dataclass(value) and not isinstance(value, type) else value


_generated_init = Recipe.__init__


def _init(self, *args: Any, parts: Any = (), **kwargs: Any) -> None:
    """``Recipe(name, ..., correction=Correction())``: a registered part may be given by its key, as
    a keyword (``dataclasses.replace`` works the same way; ``key=None`` turns a part off)."""
    names = {f.name for f in dataclasses.fields(Recipe)}
    named = {k: kwargs.pop(k) for k in list(kwargs) if k not in names}
    unknown = [k for k in named if k not in PART_TYPES]
    if unknown:
        raise TypeError(
            f"Recipe got unknown keyword {unknown[0]!r}: neither a field ({', '.join(sorted(names))}) nor "
            f"a registered part ({', '.join(PART_TYPES)})"
        )
    _generated_init(self, *args, parts=Parts(parts).merged(named) if named else Parts(parts), **kwargs)


Recipe.__init__ = _init  # type: ignore[method-assign]


def _describe(part: Any) -> str:
    if dataclasses.is_dataclass(part):
        return repr(part)
    options = reward_options(part)  # what rewards.<name>.<option> can set
    if options is not None:
        return f"{type(part).__name__}({', '.join(f'{k}={v!r}' for k, v in options.items() if v is not None)})"
    return getattr(part, "__name__", None) or getattr(part, "name", None) or type(part).__name__


def iter_parts() -> Iterator[tuple[str, type]]:
    """Every registered part: (key, class), in the order their hooks run (declared: :mod:`.registry`)."""
    return iter(PART_TYPES.items())
