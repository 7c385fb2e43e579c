"""VPD (Variational Policy Distillation, arXiv 2605.15113) as one recipe part: teacher and student are
two LoRA adapters on one backbone, trained together by variational EM.

Spec: shared/specs/distill-and-data.md section 4; the maths is in :mod:`reasonrl.losses.vpd`. Each step:

1. The first round is the student's (the ``default`` adapter): G rollouts per prompt, GRPO as usual
   (its weight ``alpha``, the spec's additive RLVR term).
2. ``extend`` (a second round): per prompt one of the student's attempts
   becomes feedback ``f`` (a pluggable function, :mod:`reasonrl.parts.feedback`); the ``teacher``
   adapter samples G rollouts under the prompt + attempt + feedback, the verifier rewards them, and
   the adaptive trust-region controller reads the KL of the teacher from the student on them.
   These groups join the batch with a zero training mask: the trainer's own policy loss (the
   student's) never sees them.
3. ``loss_term``, per micro-batch: the **E-step** ``L_GRPO(q_phi) + beta mean_t KL(q_phi(.|x, f) ||
   sg pi_theta(.|x))`` on the teacher's rows (teacher adapter with grad, student without), and the
   **M-step** ``mean_t KL(pi_theta(.|x) || sg q_phi(.|x, f))`` on the student's rows (student with grad,
   teacher without). Teacher row (i, j) is handled in the micro-batch of student row (i, j), so each is
   counted once and the terms, normalised by the minibatch's student-row count (= its teacher-row
   count), add up across micro-batches exactly.

The two adapters' parameters are disjoint, so one optimiser step is an E-step for the teacher and
an M-step for the student at once (both read the other as it was at the step's start) [inferred:
the spec alternates k_E = k_M = 1]. The controller's beta is the part's checkpointed state; the
adapters are saved by peft, the teacher in ``teacher/``. The teacher's groups are the ones of this
part's round kind, so VPD shares a recipe with any other round.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from ..distill import score_under_context
from .feedback import FEEDBACK, feedback_fn, teacher_prompt  # noqa: F401 - the round's prompt builder, re-exported
from ..errors import UserError
from ..losses.policy import policy_loss
from ..losses.vpd import (
    E_KL_ESTIMATORS,
    M_DIVERGENCES,
    adapt_beta,
    exact_token_kl,
    k3_token_kl,
    m_step_token_loss,
    row_token_mean,
    sampled_kl,
)
from ..models.lora import add_adapter, is_lora, use_adapter
from ..models.scoring import trim_padding
from ..config.rules import Rule, above, at_least, one_of
from ..seeds import stable_seed
from ..tasks.protocols import WithCritiques
from .protocol import BatchContext, LossContext, ModelSetup, RoundContext, register_part
from .strategy import Groups
from .vpd_warm import warm_teacher

TEACHER = "teacher"  # the teacher adapter's name; the student is peft's "default"
ATTEMPTS = ("first_wrong", "first")
# [inferred] the attempt and its feedback, then the prompt again so the text ends as the task's prompt
DEFAULT_TEMPLATE = "{prompt}Previous attempt:\n{attempt}\nFeedback: {feedback}\n{prompt}"


def pick_attempts(correct: Tensor, rule: str) -> Tensor:
    """(B, G) 0/1 -> (B,) the row of each group whose attempt the feedback is about: ``first_wrong``
    = the lowest-index wrong rollout (the first one when all are right), ``first`` = row 0."""
    if rule not in ATTEMPTS:
        raise ValueError(f"unknown attempt rule {rule!r}; valid: {', '.join(ATTEMPTS)}")
    if rule == "first":
        return torch.zeros(len(correct), dtype=torch.long)
    wrong = correct == 0  # (B, G)
    return torch.where(wrong.any(-1), wrong.float().argmax(-1), torch.zeros(len(correct), dtype=torch.long))  # (B,)


def pair_rows(kinds: Tensor, rows: Tensor, G: int, kind: int) -> tuple[Tensor, Tensor]:
    """Student rows among ``rows`` (first-round groups, kind 0) and their teacher partners: teacher group
    i (the i-th group of ``kind``, VPD's round) answers first-round group i, row j with row j.
    (B,), (n,) -> (m,), (m,)."""
    first, teach = (kinds == 0).nonzero().squeeze(-1), (kinds == kind).nonzero().squeeze(-1)  # (B0,), (B0,)
    if len(first) != len(teach):
        raise ValueError(
            f"vpd: {len(first)} student groups but {len(teach)} teacher groups (kind {kind}); VPD "
            "pairs one teacher group with each student group"
        )
    pos = torch.full((len(kinds),), -1, dtype=torch.long)  # (B,) index among the first-round groups
    pos[first] = torch.arange(len(first))
    rows = rows.cpu()
    g, j = rows // G, rows % G  # (n,)
    keep = pos[g] >= 0  # (n,)
    return rows[keep], teach[pos[g[keep]]] * G + j[keep]


@register_part("vpd")
@dataclass(frozen=True)
class VPD:
    """VPD's teacher round and E/M loss terms. Every field is [inferred] with the spec's default
    where it has one (section 4 (b)); see the recipe (:mod:`reasonrl.recipes.vpd`) for the list."""

    feedback: str = "critique"  # a name in parts.feedback.FEEDBACK (register_feedback adds one)
    template: str = DEFAULT_TEMPLATE  # the teacher's prompt: {prompt}, {attempt}, {feedback}
    attempt: str = "first_wrong"  # which student attempt of the step the feedback is about
    beta: float = 0.1  # initial KL coefficient of the E-step (spec: 0.1)
    target_kl: float = 0.05  # delta, nats per token (spec: 0.05)
    factor: float = 2.0  # the controller multiplies / divides beta by this (spec: 2)
    band: float = 1.5  # ... when the KL leaves [delta / band, band * delta] (spec: 1.5)
    beta_min: float = 1e-3  # [inferred] bounds of beta (the spec's rule has none)
    beta_max: float = 10.0
    e_kl: str = "exact"  # exact (full vocabulary) | k3 (sampled tokens)
    e_coef: float = 1.0  # weight of the E-step term
    clip: float = 0.2  # the E-step's PPO clip (GRPO's)
    m_divergence: str = "reverse_kl"  # reverse_kl (spec) | forward_kl | sampled
    m_coef: float = 1.0  # weight of the M-step term
    alpha: float = 1.0  # weight of the student's own GRPO term (spec: 1)
    # [inferred here] SFT steps of the teacher adapter alone on (feedback prompt -> demonstration) before
    # training (parts/vpd_warm.py; 0: none, the spec's), with their batch, lr and share of wrong attempts
    warm_steps: int = 0
    warm_batch: int = 32
    warm_lr: float = 1e-3
    warm_wrong_rate: float = 0.8

    @property
    def task_needs(self) -> tuple[type, ...]:
        return (WithCritiques,) if self.feedback == "critique" else ()  # the critique feedback is the task's

    RULES: ClassVar[dict[str, Rule]] = {
        "feedback": Rule(
            lambda v, _: v in FEEDBACK, lambda _: f"one of {sorted(FEEDBACK)} (register_feedback adds one)"
        ),
        "template": Rule(
            lambda v, _: all(s in v for s in ("{prompt}", "{attempt}", "{feedback}")),
            "text with the slots {prompt}, {attempt} and {feedback} (end it with {prompt})",
        ),
        "attempt": one_of(ATTEMPTS),
        "beta": above(0),
        "target_kl": above(0),
        "factor": Rule(lambda v, _: v >= 1, ">= 1 (1: a fixed beta)"),
        "band": Rule(lambda v, _: v >= 1, ">= 1"),
        "beta_min": above(0),
        "beta_max": Rule(lambda v, c: v >= c.get("beta_min", v), lambda c: f">= vpd.beta_min = {c.get('beta_min')}"),
        "e_kl": one_of(E_KL_ESTIMATORS),
        "e_coef": at_least(0),
        "clip": above(0),
        "m_divergence": one_of(M_DIVERGENCES),
        "m_coef": at_least(0),
        "alpha": at_least(0),
        "warm_steps": at_least(0),
        "warm_batch": at_least(1),
        "warm_lr": above(0),
        "warm_wrong_rate": Rule(lambda v, _: 0 <= v <= 1, "in [0, 1]"),
    }
    # two adapters on one backbone, switched on the trainer's own model
    needs: ClassVar[frozenset[str]] = frozenset({"lora", "in_process", "policy_in_loss", "own_engine"})

    # ---------------------------------------------------------------- the model: a second adapter
    def setup_model(self, ctx: ModelSetup) -> tuple[nn.Module, dict[str, float]]:
        """Add the teacher adapter (same LoRA settings, its own init) before the optimiser is built."""
        model = ctx.model
        if not is_lora(model):
            raise UserError(
                "recipe part 'vpd' needs LoRA: the teacher and the student are two adapters on one "
                "backbone. Set lora.r > 0 (e.g. lora.r=8)."
            )
        if TEACHER in model.peft_config:  # a resumed trainer given the wrapped model
            return model, {}
        model = add_adapter(model, TEACHER, stable_seed(ctx.seed, "vpd-teacher"))
        metrics: dict[str, float] = {}
        if self.warm_steps:  # a resumed run redoes it, then loads the checkpoint's adapters over it
            if ctx.task is None or ctx.tokenizer is None:
                raise RuntimeError("vpd.warm_steps > 0 needs the run's task and tokenizer in ModelSetup")
            metrics = warm_teacher(
                model,
                ctx.tokenizer,
                ctx.task,
                TEACHER,
                template=self.template,
                feedback=self.feedback,
                steps=self.warm_steps,
                batch_size=self.warm_batch,
                lr=self.warm_lr,
                wrong_rate=self.warm_wrong_rate,
                seed=stable_seed(ctx.seed, "vpd-warm"),
            )
        return model, metrics  # the warm-up's first and last loss

    # ---------------------------------------------------------------- the teacher's round
    def extend(self, ctx: RoundContext) -> tuple[Groups, dict[str, float]]:
        """One teacher group per first-round group, sampled by the teacher adapter under the feedback prompt."""
        if not ctx.in_process:
            raise UserError(
                "recipe part 'vpd' switches adapters on the trainer's own model: use the in-process "
                "engine (rollout.workers=0)"
            )
        batch = ctx.batch
        G = batch.rewards.shape[1]
        first = (batch.group_kinds() == 0).nonzero().squeeze(-1)  # (B0,)
        st = ctx.state
        st.setdefault("beta", self.beta)
        items = [batch.items[int(g)] for g in first]
        pick = pick_attempts(batch.correct[first], self.attempt)  # (B0,)
        rows = [int(g) * G + int(k) for g, k in zip(first, pick)]
        attempts = [batch.ro.texts[r] for r in rows]
        verdicts = [bool(batch.correct.view(-1)[r]) for r in rows]
        fn = feedback_fn(self.feedback)
        notes = [fn(ctx.task, it, a, ok) for it, a, ok in zip(items, attempts, verdicts)]
        prompts = [
            ctx.formatter.follow_up(it.prompt, self.template, a, feedback=f) for it, a, f in zip(items, attempts, notes)
        ]
        with use_adapter(ctx.policy, TEACHER):
            ro = ctx.sample(items, prompts, tag="vpd", first=ctx.position - len(items))
        ro.train_mask = torch.zeros_like(ro.completion_mask)  # the student's policy loss never sees these rows
        rewards, ok, _ = ctx.reward(items, ro)  # (B0, G) each
        # the controller's measurement: k1 KL of the teacher (its sampling log-probs) from the student
        # (default adapter, the plain prompt) on the teacher's own tokens
        student = ctx.score_under([it.prompt for it in items for _ in range(G)], ro, torch.arange(len(ro.texts)))
        kl = sampled_kl(ro.logprobs, student.logprobs.to(ro.logprobs), ro.completion_mask)
        beta_next = min(
            max(adapt_beta(st["beta"], kl, self.target_kl, self.factor, self.band), self.beta_min), self.beta_max
        )
        metrics = {
            "vpd/beta": st["beta"],
            "vpd/beta_next": beta_next,
            "vpd/kl_measured": kl,
            "vpd/teacher_accuracy": float(ok.mean()),
            "vpd/feedback_count": float(len(items)),
            "vpd/feedback_on_wrong": float(sum(not v for v in verdicts)),
            "vpd/feedback_chars": sum(len(n) for n in notes) / max(len(notes), 1),
        }
        beta, st["beta"] = st["beta"], beta_next  # the next step's E-step uses beta_next (PPO: the KL after an update)
        return Groups(items=items, ro=ro, rewards=rewards, correct=ok, data={"beta": beta}), metrics

    def shape_advantages(self, adv: Tensor, ctx: BatchContext) -> tuple[Tensor, dict[str, float]]:
        """The student's GRPO advantages times ``alpha`` (the teacher groups' stay the E-step's own)."""
        if self.alpha == 1.0:
            return adv, {}
        scale = torch.where(ctx.kinds == 0, self.alpha, 1.0).to(adv.dtype)  # (B,)
        return adv * scale.view(-1, *([1] * (adv.dim() - 1))), {}

    # ---------------------------------------------------------------- the E- and M-step terms
    def loss_term(self, ctx: LossContext) -> tuple[Tensor, dict[str, float]]:
        batch, model, temperature = ctx.batch, ctx.model, ctx.temperature
        s_rows, t_rows = pair_rows(batch.group_kinds(), ctx.rows, batch.rewards.shape[1], ctx.kind)
        zero = torch.zeros((), device=ctx.logp.device)
        if not len(s_rows):
            return zero, {}
        beta = ctx.data.values["beta"]  # the coefficient this step's E-step uses (set by extend)
        n = max(ctx.n_seqs, 1)  # student rows in the minibatch = their teacher partners
        e, me = self.e_step(batch, s_rows, t_rows, model, temperature, beta, n)
        m, mm = self.m_step(batch, s_rows, t_rows, model, temperature, n)
        loss = self.e_coef * e.to(zero.device) + self.m_coef * m.to(zero.device)
        return loss, {**me, **mm, "vpd/e_loss_term": float(e.detach()), "vpd/m_loss_term": float(m.detach())}

    def e_step(
        self, batch: Any, s_rows: Tensor, t_rows: Tensor, model, temperature: float, beta: float, n: int
    ) -> tuple[Tensor, dict[str, float]]:
        """GRPO on the teacher's rows plus ``beta`` times their token-mean KL to the student, / n."""
        ro = batch.ro
        T = int(ro.completion_mask[t_rows].sum(-1).max())
        comp, cmask = ro.completion_ids[t_rows, :T], ro.completion_mask[t_rows, :T]  # (m, T)
        exact = self.e_kl == "exact"
        with use_adapter(model, TEACHER):
            q = score_under_context(
                model,
                *trim_padding(ro.prompt_ids[t_rows], ro.prompt_mask[t_rows]),
                comp,
                cmask,
                temperature=temperature,
                grad=True,
                full=exact,
                chunk_rows=len(t_rows),
            )
        pi = score_under_context(
            model,
            *trim_padding(ro.prompt_ids[s_rows], ro.prompt_mask[s_rows]),
            comp,
            cmask,
            temperature=temperature,
            grad=False,
            full=exact,
            chunk_rows=len(s_rows),
        )
        dev = q.logprobs.device
        mask = cmask.to(dev, q.logprobs.dtype)  # (m, T)
        adv = batch.advantages[t_rows] if batch.advantages.dim() == 1 else batch.advantages[t_rows, :T]
        pg, pm = policy_loss(
            q.logprobs,
            ro.logprobs[t_rows, :T].to(dev),
            adv.to(dev),
            mask,
            clip_low=self.clip,
            clip_high=self.clip,
            agg="seq-mean-token-mean",
            n_seqs=n,
        )
        kl_tok = exact_token_kl(q.logits, pi.logits, temperature) if exact else k3_token_kl(q.logprobs, pi.logprobs)
        kl = row_token_mean(kl_tok, mask).sum() / n  # ()
        metrics = {
            "vpd/e_pg_term": float(pg.detach()),
            "vpd/e_kl_term": float(kl.detach()),
            "vpd/e_clip_frac": pm["loss/clip_frac_low"] + pm["loss/clip_frac_high"],
            "vpd/e_ratio_max": pm["loss/ratio_max"],
        }
        return pg + beta * kl, metrics

    def m_step(
        self, batch: Any, s_rows: Tensor, t_rows: Tensor, model, temperature: float, n: int
    ) -> tuple[Tensor, dict[str, float]]:
        """The student's token-mean divergence from the teacher on its own rows, / n."""
        ro = batch.ro
        T = int(ro.completion_mask[s_rows].sum(-1).max())
        comp, cmask = ro.completion_ids[s_rows, :T], ro.completion_mask[s_rows, :T]  # (m, T)
        full = self.m_divergence != "sampled"
        student = score_under_context(
            model,
            *trim_padding(ro.prompt_ids[s_rows], ro.prompt_mask[s_rows]),
            comp,
            cmask,
            temperature=temperature,
            grad=True,
            full=full,
            chunk_rows=len(s_rows),
        )
        with use_adapter(model, TEACHER):  # the teacher's prompt: its group's feedback prompt
            teacher = score_under_context(
                model,
                *trim_padding(ro.prompt_ids[t_rows], ro.prompt_mask[t_rows]),
                comp,
                cmask,
                temperature=temperature,
                grad=False,
                full=full,
                chunk_rows=len(t_rows),
            )
        tok = m_step_token_loss(
            self.m_divergence,
            student_logits=student.logits,
            teacher_logits=teacher.logits,
            student_logp=student.logprobs,
            teacher_logp=teacher.logprobs,
            temperature=temperature,
        )  # (m, T)
        mask = batch.loss_mask[s_rows, :T].to(tok.device, tok.dtype)  # (m, T)
        loss = row_token_mean(tok, mask).sum() / n  # ()
        gap = (
            row_token_mean((student.logprobs - teacher.logprobs).detach(), mask).sum() / n
        )  # k1 on the student's tokens
        return loss, {"vpd/m_k1_term": float(gap)}
