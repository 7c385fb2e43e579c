"""Recipe parts of the objective: the advantage estimator and its shapers, the policy loss (with the
veto), the KL anchor (SAGE guides included) and reward-side terms that need token statistics
(CorR-PO). Each is a small frozen dataclass naming a pure function of :mod:`reasonrl.advantages` /
:mod:`reasonrl.losses` and its knobs.
"""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from ..advantages import ESTIMATORS, SCALES, VETO_TRIGGERS, edas, get_estimator, negative_veto_mask
from ..advantages.steps import char_spans_to_token_steps, step_advantages, token_step_advantages
from ..losses import corr_po_bonus, entropy_bonus, kl_loss, logit_grad_norm, policy_loss, sage_kl_loss
from ..losses.aggregate import AGG_MODES
from ..losses.anchors import SAGE_GUIDES, SURPRISAL_NORMS, guide_draws
from ..losses.kl import KL_ESTIMATORS
from ..losses.policy import RATIO_LEVELS, TRUST_REGIONS
from ..rewards.base import Reward, RewardResult
from ..config.rules import Rule, at_least, one_of, within
from ..tasks.protocols import WithStepRewards, require
from .protocol import BatchContext


@dataclass(frozen=True)
class Advantage:
    """(B, G) rewards -> (B, G) advantages by a named estimator (``reasonrl.advantages``)."""

    estimator: str = "grpo"
    scale: str = "group"  # grpo only: group | batch | none
    eps: float = 1e-6
    unbiased: bool = True

    RULES: ClassVar[dict[str, Rule]] = {"estimator": one_of(ESTIMATORS), "scale": one_of(SCALES), "eps": at_least(0)}

    def __call__(self, rewards: torch.Tensor) -> torch.Tensor:
        fn = get_estimator(self.estimator)
        accepted = inspect.signature(fn).parameters
        knobs = {k: v for k, v in dataclasses.asdict(self).items() if k in accepted and k != "rewards"}
        return fn(rewards, **knobs)


@dataclass(frozen=True)
class EDAS:
    """Shaper: rescale wrong rollouts' negative advantages by how often their wrong answer recurs
    in the group (EDAS, arXiv 2605.17333; the functional form is inferred, see the spec)."""

    gamma: float = 1.0
    none_policy: str = "cluster"  # unparsed answers: one cluster | each a singleton
    lambda_min: float | None = None
    lambda_max: float | None = None

    def __call__(self, adv: torch.Tensor, ctx: BatchContext) -> tuple[torch.Tensor, dict[str, float]]:
        return edas(
            adv,
            ctx.answers,
            ctx.correct,
            gamma=self.gamma,
            none_policy=self.none_policy,
            lambda_min=self.lambda_min,
            lambda_max=self.lambda_max,
        )


@dataclass(frozen=True)
class StepCredit:
    """SAPO (arXiv 2605.17648): replace the sequence advantage by one group-relative advantage per
    reasoning step, given only to that step's tokens (its thinking block and its SID token).

    The task segments a completion and scores each step: ``task.step_rewards(completion, meta,
    mode) -> (spans, rewards)`` with one ``(start, end)`` character span (or None) and one reward per
    step. Tokens outside every step get 0 (``outside="zero"``, the spec's default) or the sequence
    advantage from the estimator (``"outcome"``). Step rewards: ``position_match`` (the default;
    inferred) or ``prefix_match``.
    """

    mode: str = "position_match"
    outside: str = "zero"
    eps: float = 1e-6
    unbiased: bool = True

    task_needs: ClassVar[tuple[type, ...]] = (WithStepRewards,)  # the task segments and rewards the steps
    needs: ClassVar[frozenset[str]] = frozenset({"char_offsets"})  # step spans are characters; advantages are tokens

    def __call__(self, adv: torch.Tensor, ctx: BatchContext) -> tuple[torch.Tensor, dict[str, float]]:
        task, ro, G = ctx.task, ctx.rollouts, adv.shape[1]
        require(task, WithStepRewards, "StepCredit (SAPO)", "try --task recommend")
        metas = [it.meta for it in ctx.items for _ in range(G)]
        segs = [task.step_rewards(text, meta, self.mode) for text, meta in zip(ro.texts, metas)]
        rewards = torch.tensor([r for _, r in segs], dtype=torch.float32)  # (R, K)
        step_adv = step_advantages(rewards.view(adv.shape[0], G, -1), eps=self.eps, unbiased=self.unbiased)  # (B, G, K)
        T = ro.completion_ids.shape[1]
        offsets = [ctx.char_offsets(r) for r in range(len(ro.texts))]  # per row: each token's (start, end) characters
        token_step = char_spans_to_token_steps([s for s, _ in segs], offsets, T)  # (R, T)
        outcome = adv.reshape(-1) if self.outside == "outcome" else None  # (R,)
        out = token_step_advantages(step_adv.flatten(0, 1), token_step, self.outside, outcome)  # (R, T)
        inside = (token_step >= 0).float() * ro.completion_mask  # (R, T)
        metrics = {f"steps/reward_level{k}": float(v) for k, v in enumerate(rewards.mean(0))}
        metrics["steps/token_coverage"] = float(inside.sum() / ro.completion_mask.sum().clamp(min=1))
        return out.view(adv.shape[0], G, T), metrics


@dataclass(frozen=True)
class Veto:
    """Mu-GRPO's negative-advantage veto (arXiv 2605.17570; trigger rule inferred): in a response
    with A < 0, drop the loss from the first trigger token on.

    The ``out_of_band`` trigger fires when the ratio leaves the relaxed trust region, so its band
    is the policy loss's own by default: ``clip_low``/``clip_high`` = None take the loss's
    ``clip_low``/``clip_high`` (``loss.clip_high=1.5`` moves both); a number overrides it here only.
    """

    trigger: str = "out_of_band"  # out_of_band | ratio_high | ratio_low | prefix_logratio
    clip_low: float | None = None  # None: the policy loss's clip_low
    clip_high: float | None = None  # None: the policy loss's clip_high
    tau_lo: float | None = None
    tau_hi: float | None = None
    tau_cum: float | None = None
    include_trigger: bool = True

    RULES: ClassVar[dict[str, Rule]] = {
        "trigger": one_of(VETO_TRIGGERS),
        "clip_low": at_least(0),
        "clip_high": at_least(0),
    }

    def band(self, loss_clip_low: float, loss_clip_high: float) -> tuple[float, float]:
        """(clip_low, clip_high) the trigger uses: this part's own where set, else the loss's."""
        return (
            loss_clip_low if self.clip_low is None else self.clip_low,
            loss_clip_high if self.clip_high is None else self.clip_high,
        )

    def mask(
        self, logp, old_logp, adv, mask, *, loss_clip_low: float, loss_clip_high: float
    ) -> tuple[torch.Tensor, dict[str, float]]:
        ratio = torch.exp((logp.detach() - old_logp) * mask)  # (N, T), 1 on padding
        clip_low, clip_high = self.band(loss_clip_low, loss_clip_high)
        return negative_veto_mask(
            ratio,
            adv,
            mask,
            trigger=self.trigger,
            clip_low=clip_low,
            clip_high=clip_high,
            tau_lo=self.tau_lo,
            tau_hi=self.tau_hi,
            tau_cum=self.tau_cum,
            include_trigger=self.include_trigger,
        )


@dataclass(frozen=True)
class PolicyLoss:
    """The three knobs of the policy loss: ratio level, trust region, aggregation (plus the
    optional negative-advantage veto, whose band defaults to this loss's clip band)."""

    ratio: str = "token"  # token | sequence (GSPO) | sequence-token (GSPO-token)
    clip_low: float = 0.2
    clip_high: float = 0.2
    dual_clip: float | None = None
    trust_region: str = "clip"  # clip (PPO) | cispo (clipped, detached IS weight)
    agg: str = "seq-mean-token-mean"
    norm_len: int | None = None  # seq-mean-token-sum-norm: None = the generation budget
    veto: Veto | None = None

    RULES: ClassVar[dict[str, Rule]] = {
        "ratio": one_of(RATIO_LEVELS),
        "trust_region": one_of(TRUST_REGIONS),
        "agg": one_of(AGG_MODES),
        "clip_low": at_least(0),
        "clip_high": at_least(0),
        "dual_clip": Rule(lambda v, _: v > 1, "> 1 (Ye et al. 2020 use 3), or null for none"),
        "norm_len": Rule(lambda v, _: v >= 1, ">= 1, or null for the generation budget"),
    }

    def __call__(self, logp, old_logp, adv, mask, *, n_tokens, n_seqs, norm_len):
        token_mask, veto_metrics = (
            (None, {})
            if self.veto is None
            else self.veto.mask(logp, old_logp, adv, mask, loss_clip_low=self.clip_low, loss_clip_high=self.clip_high)
        )
        loss, metrics = policy_loss(
            logp,
            old_logp,
            adv,
            mask,
            ratio=self.ratio,
            clip_low=self.clip_low,
            clip_high=self.clip_high,
            dual_clip=self.dual_clip,
            agg=self.agg,
            norm_len=self.norm_len or norm_len,
            n_tokens=n_tokens,
            n_seqs=n_seqs,
            trust_region=self.trust_region,
            token_mask=token_mask,
        )
        return loss, {**metrics, **veto_metrics}


@dataclass(frozen=True)
class KL:
    """KL to a frozen reference model; the reference is only loaded when ``coef`` > 0.

    A ``guide`` reshapes the anchor per token as SAGE (arXiv 2605.18864, official code defaults):
    the reference becomes q * pi_ref, so the policy may rise above it by up to q. ``"branch"``:
    q = clamp(1 + ratio * relu(H - threshold), q_min, q_max) from the policy's token entropy H;
    ``"token"``: q = clamp(1 + alpha w + sigma w N(0,1), ...), w the ``norm``-alised surprisal of the
    policy's (``source="new"``) or reference's log-probs; ``"random"``: q = 1 + sigma N(0,1) with
    probability eps, else 1 (the control). (alpha|eps, sigma) follow a cyclic cosine from
    ``schedule_upper`` to ``schedule_lower`` (None: the official values) whose ``n_cycles`` starts
    decay by ``decay``, over step = optimiser steps so far and max_steps = the run's optimiser steps
    (the official scheduler advances per loss call = per optimiser step in its config; counting
    micro-batches would tie q to the memory knob micro_batch_size). The trainer draws the noise
    once per optimiser step (:meth:`draws`) from its checkpointed generator: resume is bit-exact.
    """

    coef: float = 0.0
    estimator: str = "k3"
    guide: str | None = None  # None | branch | token | random
    ratio: float = 0.3  # branch
    threshold: float = 1.2  # branch
    q_min: float = 0.6
    q_max: float = 1.4
    n_cycles: int = 8  # token, random: cycles of the cosine schedule
    decay: float = 0.9  # token, random: each cycle starts at upper * decay^cycle
    schedule_upper: tuple[float, float] | None = None  # None: token (0.3, 0.25), random (0.1, 0.15)
    schedule_lower: tuple[float, float] | None = None  # None: token (0.1, 0.1), random (0.0, 0.05)
    norm: str = "minmax"  # token: minmax | rank | zscore
    source: str = "new"  # token: surprisal of the policy (new) or of the reference (ref)

    RULES: ClassVar[dict[str, Rule]] = {
        "coef": Rule(lambda v, _: v >= 0, ">= 0 (0: no KL term, no reference model)"),
        "estimator": one_of(KL_ESTIMATORS),
        # SAGE's anchor is defined with the k3 estimator
        "guide": Rule(
            lambda v, c: v in SAGE_GUIDES and c.get("estimator") == "k3",
            f"one of {', '.join(sorted(SAGE_GUIDES))} with kl.estimator=k3 (SAGE's anchor is defined with k3)",
        ),
        "ratio": at_least(0),
        "q_min": at_least(0),
        "q_max": Rule(lambda v, c: v >= c.get("q_min", 0), lambda c: f">= kl.q_min = {c.get('q_min')}"),
        "n_cycles": at_least(1),
        "decay": within(0, 1, open_lo=True),
        "norm": one_of(SURPRISAL_NORMS),
        "source": one_of(("new", "ref")),
        "schedule_upper": Rule(
            lambda v, _: len(v) == 2, "a pair (alpha or eps, sigma), or null for the official values"
        ),
        "schedule_lower": Rule(
            lambda v, _: len(v) == 2, "a pair (alpha or eps, sigma), or null for the official values"
        ),
    }

    def __post_init__(self):
        for n in ("schedule_upper", "schedule_lower"):  # YAML gives lists; a frozen part holds tuples
            if getattr(self, n) is not None:
                object.__setattr__(self, n, tuple(float(x) for x in getattr(self, n)))

    def draws(self, shape: tuple[int, int], generator: torch.Generator) -> dict[str, torch.Tensor]:
        """The random numbers of one optimiser step's (R, T) batch: ``{}`` unless the guide is stochastic."""
        if self.coef == 0 or self.guide is None:
            return {}
        return guide_draws(self.guide, shape, generator)


@dataclass(frozen=True)
class CorrBonus(Reward):
    """CorR-PO (arXiv 2605.17770; every formula inferred, see the spec) as a reward term: the
    per-response Pearson/Spearman correlation c between the sampling policy's token entropy and a
    gradient norm, as the bonus -coef * c (``sign="inversion"``) or +coef * c (``"alignment"``; the
    spec flags the sign as uncertain), in ``Recipe.extra_rewards``. It reads the ``rollouts``
    column (token statistics recorded at sampling). ``grad_norm="logit"``: ||e_y - p|| from p_y and
    sum p^2; ``"hidden"``: ||W_U^T (e_y - p)||, which needs W_U and the whole distribution, so the
    engine records it while sampling when asked (:attr:`sampling_needs`; one (rows, V) x (V, d)
    product per decoding step). ``correct_only``: only verifier-correct rollouts get the bonus."""

    coef: float = 0.1
    sign: str = "inversion"
    method: str = "pearson"
    min_tokens: int = 3
    grad_norm: str = "logit"  # logit | hidden
    correct_only: bool = False
    name: str = "corr_po"
    engine_stats: ClassVar[tuple[str, ...]] = ("entropies", "sum_p2")  # recorded while sampling (not by vLLM)

    def __post_init__(self):
        if self.grad_norm not in ("logit", "hidden"):
            raise ValueError(f"CorrBonus.grad_norm must be 'logit' or 'hidden', got {self.grad_norm!r}")

    @property
    def sampling_needs(self) -> dict[str, Any]:
        """SamplingParams fields the rollouts must be generated with (the batch maker applies them)."""
        return {"hidden_grad_norm": True} if self.grad_norm == "hidden" else {}

    def score(self, prompts, completions, **columns) -> RewardResult:
        ro = columns.get("rollouts")
        if ro is None or ro.entropies is None or ro.sum_p2 is None:
            raise ValueError(
                "CorrBonus needs the 'rollouts' column with entropies and sum_p2 (the HF engine records them)"
            )
        mask, correct = ro.completion_mask.float(), columns.get("correct")
        if self.grad_norm == "hidden" and ro.hidden_grad_norm is None:
            raise ValueError(
                "CorrBonus(grad_norm='hidden') needs rollouts sampled with SamplingParams("
                "hidden_grad_norm=True) (the batch maker asks for it from sampling_needs)"
            )
        if self.correct_only and correct is None:
            raise ValueError(
                "CorrBonus(correct_only=True) needs the 'correct' column (each rollout's task correctness)"
            )
        p_y = torch.where(mask > 0, ro.logprobs.exp(), torch.zeros_like(mask))  # padding: p_y = sum p^2 = 0
        grad = (ro.hidden_grad_norm if self.grad_norm == "hidden" else logit_grad_norm(p_y, ro.sum_p2)) * mask  # (R, T)
        _, bonus, metrics = corr_po_bonus(
            ro.entropies,
            grad,
            mask,
            coef=self.coef,
            sign=self.sign,
            method=self.method,
            min_tokens=self.min_tokens,
            correct_only=self.correct_only,
            correct=None if correct is None else torch.tensor([bool(c) for c in correct]),
        )
        return RewardResult([float(b) for b in bonus], metrics)


def kl_term(
    logp,
    ref_logp,
    mask,
    kl: KL,
    entropy=None,
    *,
    step: int = 0,
    max_steps: int | None = None,
    draws: dict[str, torch.Tensor] | None = None,
    **agg,
):
    """The KL part's loss and metrics. ``step`` / ``max_steps``: optimiser steps taken so far / in the
    run; ``draws``: this micro-batch's slice of :meth:`KL.draws` (all three for the stochastic guides)."""
    if kl.guide is None:
        return kl_loss(logp, ref_logp, mask, coef=kl.coef, estimator=kl.estimator, **agg)
    stochastic = (
        {}
        if kl.guide == "branch"
        else dict(
            step=step,
            max_steps=max_steps,
            n_cycles=kl.n_cycles,
            decay=kl.decay,
            upper=kl.schedule_upper,
            lower=kl.schedule_lower,
            norm=kl.norm,
            surprisal_source=kl.source,
            draws=draws,
        )
    )
    return sage_kl_loss(
        logp,
        ref_logp,
        entropy,
        mask,
        coef=kl.coef,
        guide=kl.guide,
        ratio=kl.ratio,
        threshold=kl.threshold,
        q_min=kl.q_min,
        q_max=kl.q_max,
        **stochastic,
        **agg,
    )


def policy_term(loss: PolicyLoss | None, logp, old_logp, adv, mask, **norm):
    """The recipe's policy loss and its metrics; with ``loss=None`` (a distribution-matching recipe, whose
    trajectory-balance part is the objective) a zero on the log-probs' device and no metrics."""
    if loss is None:
        return torch.zeros((), device=logp.device), {}
    return loss(logp, old_logp, adv, mask, **norm)


def loss_agg(loss: PolicyLoss | None, budget: int) -> dict[str, Any]:
    """The aggregation the KL, entropy and auxiliary terms share: the policy loss's, else GRPO's default."""
    if loss is None:
        return {"agg": PolicyLoss.agg, "norm_len": budget}
    return {"agg": loss.agg, "norm_len": loss.norm_len or budget}


def entropy_term(entropy, mask, coef: float, **norm):
    return entropy_bonus(entropy, mask, coef=coef, **norm)
