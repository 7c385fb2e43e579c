"""The parts a recipe is made of: small frozen dataclasses that name a pure function and its knobs.

A :class:`Recipe` is data: the trainer calls its parts (``recipe.advantage(rewards)``,
``recipe.loss(...)``) and never looks at a recipe's name. Every field can be overridden from YAML
or the command line with a dotted key (``loss.clip_high=0.28``, ``optim.lr=1e-5``). The parts live
in :mod:`.objective` (advantage, shapers, policy loss, KL, CorR-PO bonus) and :mod:`.generation`
(group filter, stages, steering, beam, sampling, optimiser).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from ..rewards.options import reward_options
from ..data.selector import Selector
from .correction import Correction
from .d2evo import D2Evo
from .drafts import Drafts
from .generation import BeamSampling, GroupFilter, Optim, Sampling, Stages, Steering
from .nudge import HintSampling
from .objective import EDAS, KL, Advantage, CorrBonus, PolicyLoss, StepCredit, Veto, entropy_term, kl_term
from .redirect import Redirect
from .fest import FEST
from .selfteach import EGRSD, SSOPD
from .teacher import KDRL, RKLOPD, TGPO, Teacher
from .su01 import RefineReplay
from .vpd import VPD
from .strategy import GenRequest, Groups, PlainSampling, Round, RolloutStrategy, one_strategy, rounds_of

__all__ = ["D2Evo", "EDAS", "EGRSD", "FEST", "SSOPD", "KL", "Advantage", "BeamSampling", "CorrBonus", "Correction", "Drafts",
           "GenRequest",
           "GroupFilter", "Groups", "HintSampling", "Optim", "PlainSampling", "PolicyLoss", "Recipe", "Redirect", "RefineReplay",
           "RolloutStrategy", "Round", "Sampling", "Stages", "Steering",
           "StepCredit", "VPD", "Veto", "entropy_term", "kl_term"]
__all__ += ["KDRL", "RKLOPD", "TGPO", "Teacher"]


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
    # weight of the task's own verifier in the total reward: 0 when a method's reward replaces it (SSPO, TEMPO,
    # CodeThinker); raw correctness (filters, accuracy, EDAS) always comes from the verifier
    task_reward_weight: float = 1.0
    group_filter: GroupFilter | None = None  # dynamic sampling; None keeps every group
    mask_truncated: bool = False  # overlong filtering: truncated completions leave the loss entirely
    stages: Stages | None = None  # generate-then-train-many (Mu-GRPO); None: generate every step
    steering: Steering | None = None  # VSPO: steered rollouts at mixed intensities
    beam: BeamSampling | None = None  # CodeThinker: branch part of each group from the best prefixes
    hints: HintSampling | None = None  # NudgeRL: hinted sub-groups, their advantages, distillation to the bare prompt
    correction: Correction | None = None  # CIPO: a second round of corrections of failed attempts
    redirect: Redirect | None = None  # STRIDE: redirect failed rollouts from the first wrong step (a round)
    aux_losses: tuple[Callable[..., Any], ...] = field(default=())
    ssopd: SSOPD | None = None  # SSOPD's self-distillation loss term (arXiv 2605.17497)
    egrsd: EGRSD | None = None  # EGRSD / CL-EGRSD token advantages (arXiv 2605.13255)
    selector: Selector | None = None  # which prompts get rollouts and which groups reach the update (data.selector)
    d2evo: D2Evo | None = None  # D2Evo: anchors as the selector, the Questioner as a round (arXiv 2605.17037)
    teacher: Teacher | None = None  # an external frozen teacher, scored on the rollouts (TGPO family)
    tgpo: TGPO | None = None  # TGPO reg / adv (arXiv 2605.13230)
    rkl_opd: RKLOPD | None = None  # reverse-KL on-policy distillation token advantages
    kdrl: KDRL | None = None  # KDRL's KL term to the teacher
    fest: FEST | None = None  # FEST: a decaying DPO (or SFT) term on a few demonstrations (arXiv 2605.15012)
    drafts: Drafts | None = None  # drafts in the train prompts, N/A at evaluation (arXiv 2605.17314)
    vpd: VPD | None = None  # VPD: a teacher adapter's feedback round, E-step and M-step terms (arXiv 2605.15113)
    refine_replay: RefineReplay | None = None  # SU-01: self-refine prompts and replayed successes (a round)

    # A part takes part in the loop through the methods it has, never through its name:
    # ``generate(req)`` makes the rollouts (one such part at most; none: plain sampling),
    # ``extend(maker, batch)`` adds a second round of groups, ``shape_advantages(adv, ctx)`` runs after
    # the recipe's shapers, ``loss_term(**kw)`` adds a term to the loss like an auxiliary loss,
    # ``score_batch(batch, ctx)`` annotates the batch before the shapers run (teacher passes).
    def __post_init__(self):
        one_strategy(self._parts())  # two parts that both generate: an error when the recipe is made
        _ = self.data_selector  # two selectors: likewise

    def _parts(self) -> list[Any]:
        return [getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("name", "paper", "inferred")]

    @property
    def strategy(self) -> RolloutStrategy:
        return one_strategy(self._parts())

    @property
    def rounds(self) -> tuple[Round, ...]:
        return rounds_of(self._parts())

    @property
    def all_shapers(self) -> tuple[Callable[..., Any], ...]:
        return self.shapers + tuple(p.shape_advantages for p in self._parts() if hasattr(p, "shape_advantages"))

    def wrap_task(self, task: Any, tokenizer: Any = None) -> Any:
        """The run's task as the recipe's parts present it (each part with ``wrap_task``, in order)."""
        for part in self._parts():
            if hasattr(part, "wrap_task"):
                task = part.wrap_task(task, tokenizer)
        return task

    @property
    def data_selector(self) -> Selector | None:
        """The one part that builds selector state: the ``selector`` field, or a part that is also a
        selector (D2Evo); two of them are an error."""
        found = [p for p in self._parts() if isinstance(p, Selector)]
        if len(found) > 1:
            raise ValueError(f"a recipe can use one selector, got {', '.join(type(p).__name__ for p in found)}")
        return found[0] if found else None

    @property
    def step_hooks(self) -> tuple[Callable[..., Any], ...]:
        """``before_step(maker)`` of the parts that prepare a step's data (D2Evo's pass-rate estimation)."""
        return tuple(p.before_step for p in self._parts() if hasattr(p, "before_step"))

    @property
    def scorers(self) -> tuple[Callable[..., Any], ...]:
        return tuple(p.score_batch for p in self._parts() if hasattr(p, "score_batch"))

    @property
    def needs_reference(self) -> bool:
        """Whether a part scores against the initial model (the trainer then keeps a reference)."""
        return any(getattr(p, "needs_reference", False) for p in self._parts())

    @property
    def model_setups(self) -> tuple[Callable[..., Any], ...]:
        """``setup_model(model, lora, seed) -> model`` of the parts that add trainable modules (VPD's
        teacher adapter): the trainer calls them before it builds the optimiser."""
        return tuple(p.setup_model for p in self._parts() if hasattr(p, "setup_model"))

    @property
    def all_aux_losses(self) -> tuple[Callable[..., Any], ...]:
        return self.aux_losses + tuple(p.loss_term for p in self._parts() if hasattr(p, "loss_term"))

    def describe(self) -> dict[str, Any]:
        out = {"name": self.name, "paper": self.paper, "inferred": list(self.inferred)}
        for f in ("advantage", "loss", "kl", "sampling", "optim"):
            out[f] = dataclasses.asdict(getattr(self, f))
        out.update(entropy_coef=self.entropy_coef, group_size=self.group_size, mask_truncated=self.mask_truncated,
                   task_reward_weight=self.task_reward_weight,
                   group_filter=None if self.group_filter is None else dataclasses.asdict(self.group_filter),
                   stages=None if self.stages is None else dataclasses.asdict(self.stages),
                   steering=None if self.steering is None else dataclasses.asdict(self.steering),
                   beam=None if self.beam is None else dataclasses.asdict(self.beam),
                   ssopd=None if self.ssopd is None else dataclasses.asdict(self.ssopd),
                   egrsd=None if self.egrsd is None else dataclasses.asdict(self.egrsd),
                   fest=None if self.fest is None else dataclasses.asdict(self.fest),
                   hints=None if self.hints is None else dataclasses.asdict(self.hints),
                   correction=None if self.correction is None else dataclasses.asdict(self.correction),
                   redirect=None if self.redirect is None else dataclasses.asdict(self.redirect),
                   selector=None if self.selector is None else repr(self.selector),
                   d2evo=None if self.d2evo is None else dataclasses.asdict(self.d2evo),
                   **{k: None if getattr(self, k) is None else dataclasses.asdict(getattr(self, k))
                      for k in ("teacher", "tgpo", "rkl_opd", "kdrl")},
                   drafts=None if self.drafts is None else dataclasses.asdict(self.drafts),
                   vpd=None if self.vpd is None else dataclasses.asdict(self.vpd),
                   refine_replay=None if self.refine_replay is None else dataclasses.asdict(self.refine_replay),
                   shapers=[_describe(s) for s in self.shapers],
                   extra_rewards=[f"{w} x {_describe(fn)}" for fn, w in self.extra_rewards],
                   aux_losses=[_describe(a) for a in self.aux_losses])
        return out


def _describe(part: Any) -> str:
    if dataclasses.is_dataclass(part):
        return repr(part)
    options = reward_options(part)  # what rewards.<name>.<option> can set
    if options is not None:
        return f"{type(part).__name__}({', '.join(f'{k}={v!r}' for k, v in options.items() if v is not None)})"
    return getattr(part, "__name__", None) or getattr(part, "name", None) or type(part).__name__

