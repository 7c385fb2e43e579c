"""External-teacher parts: TGPO (reg / adv) and the baselines RKL-OPD and KDRL (arXiv 2605.13230).

* :class:`Teacher` (section ``teacher``) runs the frozen teacher once per batch over every rollout
  (``score_batch``, before the shapers): the teacher's log-prob of each sampled token and its greedy
  id at each student prefix go to its channel on the batch (``batch.parts["teacher"].rows``:
  ``logprobs``, ``argmax``, both (R, T)), which the parts below read.
* :class:`TGPO` (section ``tgpo``): ``variant="reg"`` asks the trainer for the student's log-probs at
  the teacher's ids from the policy's own forward (``ctx.set_extra_labels``) and adds
  ``lambda_k * agg(-l^T)`` (``loss_term``); ``variant="adv"`` adds ``lambda_k exp(l^T_old)`` to the
  sequence advantage (``shape_advantages``), l^T_old from a no-grad pass of the policy before the update.
* :class:`RKLOPD` (section ``rkl_opd``): token advantages ``log pi_T(y_t) - log pi_old(y_t)``
  (+ ``grpo_weight`` A_i); :class:`KDRL` (section ``kdrl``): ``+beta * agg(k2)`` toward the teacher.

The maths and its sign conventions are in :mod:`reasonrl.losses.teacher`. ``lambda_k`` follows the
released code's trainer: the *training* step k (1-based, verl's ``global_steps``: one per batch,
whatever the number of optimiser steps in it), ``max(lambda_0 - (k - 1) delta, lambda_min)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Mapping

import torch
from torch import Tensor

from ..distill.teacher import BUILTIN, get_teacher, teacher_problem
from ..errors import UserError
from ..losses.kl import KL_ESTIMATORS
from ..losses.teacher import (
    kdrl_loss,
    rkl_opd_advantages,
    teacher_agreement,
    teacher_coef,
    tgpo_adv_advantages,
    tgpo_reg_loss,
)
from ..models.scoring import score_completions
from ..rollout.base import policy_tokens
from ..config.rules import Rule, at_least, one_of
from .protocol import BatchContext, Channel, LossContext, register_part

__all__ = ["KDRL", "RKLOPD", "TGPO", "TGPO_VARIANTS", "Teacher"]

TGPO_VARIANTS = ("reg", "adv")
_VARIANT_DEFAULTS = {"reg": (0.002, 1e-5), "adv": (0.02, 1e-4)}  # (lambda_0, delta): train_tipo_{reg,adv}_7b.sh


@register_part("teacher")
@dataclass(frozen=True)
class Teacher:
    """The frozen external teacher (``teacher.model=PATH``): loaded once per run on the student's
    device, or kept on the CPU between uses (``teacher.offload=true``)."""

    model: str = BUILTIN  # a local HF directory with the student's vocabulary; builtin:teacher for arithmetic
    offload: bool = False  # [inferred option] park on the CPU, move to the device for each forward
    dtype: str = "float32"  # float32 | bfloat16 | float16: the teacher's weights
    chunk_rows: int = 64  # rows per teacher forward (memory only)

    RULES: ClassVar[dict[str, Rule]] = {
        "model": Rule(
            lambda v, _: teacher_problem(v) is None,
            lambda c: (
                f"a local HF model directory, tiny:<size> or builtin:teacher ({teacher_problem(c['teacher.model'])})"
            ),
        ),
        "dtype": one_of(("float32", "bfloat16", "float16")),
        "chunk_rows": at_least(1),
    }

    def score_batch(self, ctx: BatchContext) -> tuple[None, dict[str, float]]:
        ro = ctx.rollouts
        device = str(next(ctx.policy.parameters()).device)
        handle = get_teacher(self.model, device=device, offload=self.offload, dtype=self.dtype)
        handle.check_student(ctx.tok)
        sc = handle.score(
            ro.prompt_ids,
            ro.prompt_mask,
            ro.completion_ids,
            ro.completion_mask,
            temperature=ctx.temperature,
            argmax=True,
            chunk_rows=self.chunk_rows,
        )
        ctx.data.rows.update(logprobs=sc.logprobs.cpu(), argmax=sc.argmax.cpu())  # (R, T) each, 0 on padding
        mask, rows = policy_tokens(ro), ctx.data.rows  # (R, T) the student's own tokens (no observations)
        return None, {
            "teacher/agree": teacher_agreement(rows["argmax"], ro.completion_ids, mask),
            "teacher/logp": float((rows["logprobs"] * mask).sum() / mask.sum().clamp(min=1)),
        }


def _scores(channels: Mapping[str, Channel], owner: str) -> dict[str, Tensor]:
    """The teacher part's (R, T) scores of this batch's rows."""
    found = channels.get("teacher")
    if found is None or "argmax" not in found.rows:
        raise UserError(f"{owner} needs the teacher part: set teacher.model=PATH (or train recipe {owner})")
    return found.rows


def _needs_teacher(text: str) -> Rule:
    """A rule for an option of a part that reads the teacher's scores: ``text`` and the teacher part on."""
    return Rule(
        lambda v, c: v >= 0 and c.get("teacher.model") is not None,
        f"{text}, with the teacher part on (teacher.model=PATH)",
    )


@register_part("tgpo")
@dataclass(frozen=True)
class TGPO:
    """TGPO's teacher-guided term; ``coef`` / ``decay`` None: the variant's defaults (reg 0.002 / 1e-5,
    adv 0.02 / 1e-4, the released 7B scripts), so ``tgpo.variant=adv`` alone gives the adv numbers."""

    AFTER = ("teacher",)  # reads the teacher's channel (its greedy tokens)

    variant: str = "reg"  # reg (the default; spec: which one the paper's headline uses is unsure) | adv
    coef: float | None = None  # lambda_0
    decay: float | None = None  # delta per training step
    min_coef: float = 0.0  # lambda_min

    RULES: ClassVar[dict[str, Rule]] = {
        "variant": Rule(
            lambda v, c: v in TGPO_VARIANTS and c.get("teacher.model") is not None,
            f"one of {', '.join(TGPO_VARIANTS)}, with the teacher part on (teacher.model=PATH)",
        ),
        "coef": at_least(0),
        "decay": at_least(0),
        "min_coef": at_least(0),
    }

    @property
    def needs(self) -> frozenset[str]:
        """reg: the student's log-probs at the teacher's ids, from the policy's own training forward."""
        return frozenset({"extra_labels"} if self.variant == "reg" else ())

    def coef_at(self, step: int) -> float:
        """lambda_k at the 1-based training step k."""
        coef0, decay = _VARIANT_DEFAULTS[self.variant]
        return teacher_coef(
            step, coef0 if self.coef is None else self.coef, decay if self.decay is None else self.decay, self.min_coef
        )

    def score_batch(self, ctx: BatchContext) -> tuple[None, dict[str, float]]:
        ids = _scores(ctx.channels, "tgpo")["argmax"]  # (R, T)
        if self.variant == "reg":  # the trainer scores the student at these ids in the policy's forward
            ctx.set_extra_labels(ids)
            return None, {}
        ro = ctx.rollouts  # adv: l^T_old, the policy before this update, no grad
        with torch.no_grad():
            *_, old = score_completions(
                ctx.policy,
                ro.prompt_ids,
                ro.prompt_mask,
                ro.completion_ids,
                ro.completion_mask,
                temperature=ctx.temperature,
                chunk_rows=ctx.micro,
                entropies=False,
                extra_labels=ids,
            )
        ctx.data.rows["old_logp_at_argmax"] = old.cpu()  # (R, T)
        return None, {}

    def shape_advantages(self, adv: Tensor, ctx: BatchContext) -> tuple[Tensor, dict[str, float]]:
        if self.variant == "reg":
            return adv, {}
        if adv.dim() != 2:
            raise ValueError(
                f"tgpo (adv) needs (B, G) sequence advantages, got {tuple(adv.shape)}: another part "
                "already made token-level advantages; use one token-level shaper per recipe"
            )
        B, G = adv.shape
        old, mask = ctx.data.rows["old_logp_at_argmax"], policy_tokens(ctx.rollouts)  # (R, T) each
        lam = self.coef_at(ctx.step + 1)
        out = tgpo_adv_advantages(adv.reshape(-1), old, mask, lam)  # (R, T)
        m = mask.float()
        return out.view(B, G, -1), {
            "teacher/tgpo_coef": lam,
            "teacher/tgpo_prob": float((old.exp() * m).sum() / m.sum().clamp(min=1)),
        }

    def loss_term(self, ctx: LossContext) -> tuple[Tensor, dict[str, float]]:
        if self.variant == "adv":  # the teacher acts through the advantages
            return torch.zeros((), device=ctx.logp.device), {}
        if ctx.extra_logp is None:
            raise RuntimeError(
                "tgpo (reg): the trainer gave no log-probs at the teacher's ids (batch.extra_labels unset)"
            )
        lam = self.coef_at(ctx.train_step)
        loss, m = tgpo_reg_loss(ctx.extra_logp, ctx.mask, coef=lam, **ctx.agg_kwargs())
        return loss, {**m, "teacher/tgpo_coef": lam}


@register_part("rkl_opd")
@dataclass(frozen=True)
class RKLOPD:
    """Reverse-KL on-policy distillation as token advantages ``coef (log pi_T - log pi_old)``
    (+ ``grpo_weight`` x the GRPO advantage). log pi_old = the rollout's behaviour log-probs."""

    AFTER = ("teacher",)  # reads the teacher's channel

    coef: float = 1.0
    grpo_weight: float = 0.0  # [option] 1 with coef 0.002: the released grpo_merge_rkl variant

    RULES: ClassVar[dict[str, Rule]] = {"coef": _needs_teacher(">= 0")}

    def shape_advantages(self, adv: Tensor, ctx: BatchContext) -> tuple[Tensor, dict[str, float]]:
        if adv.dim() != 2:
            raise ValueError(f"rkl_opd needs (B, G) sequence advantages, got {tuple(adv.shape)}")
        B, G = adv.shape
        teacher, ro = _scores(ctx.channels, "rkl_opd"), ctx.rollouts
        mask = policy_tokens(ro)  # (R, T) the student's own tokens (an episode's observations are not)
        out = rkl_opd_advantages(
            teacher["logprobs"],
            ro.logprobs,
            mask,
            coef=self.coef,
            seq_adv=adv.reshape(-1),
            grpo_weight=self.grpo_weight,
        )  # (R, T)
        m = mask.float()
        gap = ((teacher["logprobs"] - ro.logprobs) * m).sum() / m.sum().clamp(min=1)
        return out.view(B, G, -1), {"teacher/rkl": -float(gap)}  # token mean of log pi_old - log pi_T


@register_part("kdrl")
@dataclass(frozen=True)
class KDRL:
    """KDRL's KL term to the teacher on the sampled tokens, ``+coef * agg(k(log pi_theta - log pi_T))``."""

    AFTER = ("teacher",)  # reads the teacher's channel

    coef: float = 0.002  # beta (released script)
    estimator: str = "k2"  # the released code's 0.5 (log pi_T - log pi_theta)^2; k1 | k3 as options

    RULES: ClassVar[dict[str, Rule]] = {"coef": _needs_teacher(">= 0"), "estimator": one_of(KL_ESTIMATORS)}

    def score_batch(self, ctx: BatchContext) -> tuple[None, dict[str, float]]:
        """The teacher's (R, T) log-probs into this part's own channel (cut with the rows, as every channel)."""
        ctx.data.rows["teacher_logp"] = _scores(ctx.channels, "kdrl")["logprobs"]
        return None, {}

    def loss_term(self, ctx: LossContext) -> tuple[Tensor, dict[str, float]]:
        logp = ctx.logp
        teacher = ctx.data.rows["teacher_logp"][ctx.rows, : logp.shape[1]].to(logp.device)  # (n, T)
        return kdrl_loss(logp, teacher, ctx.mask, coef=self.coef, estimator=self.estimator, **ctx.agg_kwargs())
