"""Self-teacher parts: the policy, shown privileged context, teaches itself (same weights, no grad).

* :class:`SSOPD` (Self-Supervised On-Policy Distillation, arXiv 2605.17497) is a ``loss_term``: in
  each mixed first-round group the shortest correct completion becomes the teacher's context, and
  the teacher's next-token distributions are distilled into the student along the longest wrong
  completion, weighted by the group's frontier weight.
* :class:`EGRSD` (Entropy-Guided Reinforced Self-Distillation, arXiv 2605.13255; ``lookahead > 0``
  is CL-EGRSD) is a ``shape_advantages``: token advantages ``A_i * m_t * g_t`` from a teacher pass
  under the reference solution.

The maths is in :mod:`reasonrl.losses.selfteach` and :mod:`reasonrl.losses.divergence`; these parts
only choose rows, build the teacher's prompt and run the forward passes. Only the selection rule
(SSOPD), the three-factor structure, floor and lookahead (EGRSD) come from the abstracts; every
other choice is a field with the spec's default (shared/specs/distill-and-data.md sections 1-2).
"""

from __future__ import annotations

from dataclasses import dataclass
from contextlib import contextmanager
from typing import Any, ClassVar, Iterator

import torch
from torch import Tensor

from ..distill import encode_contexts, score_under_context
from ..distill.ema import WithWeights, ema_update, trainable_snapshot
from ..losses.divergence import DIVERGENCES, token_divergence
from ..models.chat import PLAIN, PromptFormatter
from ..rollout.base import policy_tokens
from ..losses.selfteach import (
    DIRECTIONS,
    FRONTIER_FORMS,
    MAGNITUDE_FORMS,
    egrsd_token_weights,
    frontier_weight,
    ssopd_pairs,
)
from ..config.rules import Rule, above, at_least, one_of, within
from ..tasks.guidance import reference_solution
from ..tasks.protocols import WithSolutions
from .protocol import BatchContext, LossContext, RoundContext, UpdateContext, register_part

__all__ = ["EGRSD", "SSOPD", "TEACHERS", "W_STAR_RULES", "last_token_eos", "template_problem"]


def template_problem(template: str) -> str | None:
    """Why a teacher-context template is unusable (None: it is fine). It must name ``{prompt}`` (the
    teacher must see the problem) and ``{solution}`` (the privileged text), and nothing else."""
    if "{prompt}" not in template or "{solution}" not in template:
        return "must contain {prompt} and {solution}"
    try:
        template.format(prompt="", solution="")
    except (KeyError, IndexError, ValueError) as err:
        return (
            f"is not a valid format string with only {{prompt}} and {{solution}} ({err!r}); "
            "write literal braces as {{ }}"
        )
    return None


TEMPLATE = Rule(
    lambda v, _: template_problem(v) is None, "a format string with {prompt} and {solution} and no other field"
)


TEACHERS = ("live", "initial", "ema")
W_STAR_RULES = ("eos", "any")


@register_part("ssopd")
@dataclass(frozen=True)
class SSOPD:
    """SSOPD's distillation term ``lambda (1/N_x) sum_x w(x) (1/|y_w*|) sum_t D_t`` (arXiv 2605.17497).

    ``N_x`` = first-round prompts in the batch; the term is computed for the w* rows of each
    micro-batch and normalised by ``N_x`` times the minibatch's share of the batch's rows
    (:meth:`LossContext.minibatch_share`), so micro-batches add up to the minibatch's value and its
    weight against the per-minibatch policy loss does not depend on ``optim.minibatches``. Student:
    the policy on the plain prompt with grad, full logits at w*'s tokens (the tokens its loss mask
    shows). Teacher, no grad, under ``template``: the policy itself (``live``), the run's initial
    model (``initial``) or an EMA of the policy's trainable weights (``ema``, decay ``ema_decay``,
    kept in the part's checkpointed state). Defaults and the runs that chose them: docs/selfteach.md."""

    coef: float = 1.0  # lambda [inferred: unknown in the paper]
    # [inferred] the OPSD convention "x + 'A correct solution: ' c* ' Now solve it yourself:'"; the
    # prompt is repeated after it so w*'s tokens follow the problem as they do under the plain prompt
    template: str = "{prompt}A correct solution: {solution} Now solve it yourself:\n{prompt}"
    divergence: str = "forward_kl"  # [inferred] forward_kl | reverse_kl | jsd
    beta: float = 0.5  # the JSD mixture weight (divergence="jsd" only)
    top_k: int | None = None  # [inferred option] both distributions on the teacher's top-k; None: full vocabulary
    # [inferred; issue #26] D_t <- min(D_t, clip): a token where the templated teacher and the student
    # disagree by more than 1 nat gives no gradient. Unclipped (None, the spec's), SSOPD collapsed the
    # shipped base to pass@1 0.000 in 60 steps (docs/selfteach.md, "SSOPD's collapse")
    clip: float | None = 1.0
    frontier: str = "4p(1-p)"  # [inferred form] or "mixed" = 1[0 < p < 1]
    max_prefix_tokens: int | None = None  # [inferred option] distil only w*'s first K tokens; None: all
    # [inferred] "any": the abstract's longest wrong rollout; "eos": the longest wrong one that ended by
    # EOS (or a stop string), so a truncated runaway is never distilled along (issue #26)
    w_star: str = "eos"
    teacher: str = "live"  # [inferred; spec: current weights, "option: pi_old or EMA"] live | initial | ema
    ema_decay: float = 0.99  # [inferred] teacher=ema: e <- decay e + (1 - decay) theta after each step

    RULES: ClassVar[dict[str, Rule]] = {
        "coef": at_least(0),
        "template": TEMPLATE,
        "divergence": one_of(DIVERGENCES),
        "beta": within(0, 1),
        "top_k": Rule(lambda v, _: v >= 1, ">= 1, or null for the full vocabulary"),
        "clip": Rule(lambda v, _: v > 0, "> 0, or null for no clip"),
        "frontier": one_of(FRONTIER_FORMS),
        "max_prefix_tokens": Rule(lambda v, _: v >= 1, ">= 1, or null to distil every token"),
        "w_star": one_of(W_STAR_RULES),
        "teacher": one_of(TEACHERS),
        "ema_decay": within(0, 1),
    }

    @property
    def needs(self) -> frozenset[str]:
        """Teacher and student passes in the loss term (policy_in_loss); ``teacher=initial`` scores under
        the run's initial model: the trainer keeps it."""
        return frozenset({"policy_in_loss", "reference"} if self.teacher == "initial" else {"policy_in_loss"})

    def before_step(self, ctx: RoundContext) -> tuple[None, dict[str, float]]:
        """``teacher=ema``: the average starts at the initial weights (a resumed run has it in its state)."""
        if self.teacher == "ema" and "ema" not in ctx.state:
            ctx.state["ema"] = trainable_snapshot(ctx.policy)
        return None, {}

    def after_step(self, ctx: UpdateContext) -> tuple[None, dict[str, float]]:
        if self.teacher != "ema":
            return None, {}
        if "ema" not in ctx.state:
            raise RuntimeError("ssopd.teacher=ema: no EMA weights in the part's state (before_step did not run)")
        return None, {"distill/ema_gap": ema_update(ctx.state["ema"], ctx.model, self.ema_decay)}

    def pairs(self, batch: Any) -> dict[str, Tensor]:
        """The batch's SSOPD pairs: first-round groups ``groups`` (B0,), their frontier weights ``w``
        (B0,), for the mixed ones the rows of c* and w* (``c_rows``, ``w_rows``), ``w`` there and
        whether each w* was truncated (``w_truncated``), and ``wrong_truncated``: the share of the
        first-round wrong rows that were truncated (the runaway's size, whatever w* is)."""
        G = batch.rewards.shape[1]
        first = (batch.group_kinds() == 0).nonzero().squeeze(-1)  # (B0,) first-round groups only
        correct = batch.correct[first]  # (B0, G)
        lengths = batch.ro.lengths.view(-1, G)[first]  # (B0, G) completion tokens
        truncated = batch.ro.truncated.view(-1, G)[first]  # (B0, G)
        eligible = ~truncated if self.w_star == "eos" else None
        c_star, w_star = ssopd_pairs(correct, lengths, eligible)  # (B0,), (B0,); -1 where no pair
        weight = frontier_weight(correct, self.frontier)  # (B0,)
        mixed = w_star >= 0  # (B0,)
        wrong = correct == 0  # (B0, G)
        return {
            "groups": first,
            "weight": weight,
            "c_rows": first[mixed] * G + c_star[mixed],
            "w_rows": first[mixed] * G + w_star[mixed],
            "pair_weight": weight[mixed],
            "w_truncated": truncated[mixed, w_star[mixed]],
            "wrong_truncated": (truncated & wrong).sum() / wrong.sum().clamp(min=1),
        }

    @contextmanager
    def teacher_model(self, ctx: LossContext) -> Iterator[Any]:
        """The model the teacher pass runs on (no grad), as ``teacher`` says."""
        if self.teacher == "live":
            yield ctx.model
        elif self.teacher == "ema":
            if "ema" not in ctx.state:
                raise RuntimeError("ssopd.teacher=ema: no EMA weights in the part's state (before_step did not run)")
            yield WithWeights(ctx.model, ctx.state["ema"])
        else:
            if ctx.reference is None:
                raise RuntimeError(
                    "ssopd.teacher=initial needs the run's reference model (the part's needs "
                    "include 'reference', so the trainer keeps one)"
                )
            with ctx.reference() as ref:
                yield ref

    def teacher_student(
        self,
        batch: Any,
        c_rows: Tensor,
        w_rows: Tensor,
        model,
        tok,
        temperature: float,
        teacher_model: Any = None,
        formatter: PromptFormatter = PLAIN,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Logits at w*'s completion positions: teacher (N, T, V) without grad (context: the template
        with c*'s text; on ``teacher_model``, default ``model``), student (N, T, V) with grad (the plain
        prompt's own tokens), and the (N, T) mask of the distilled tokens (the loss mask, capped at
        ``max_prefix_tokens``)."""
        ro = batch.ro
        mask = batch.loss_mask[w_rows]  # (N, T_all) tokens the loss sees
        T = int(ro.completion_mask[w_rows].sum(-1).max())
        if self.max_prefix_tokens is not None:
            T = min(T, self.max_prefix_tokens)
        comp, cmask = ro.completion_ids[w_rows, :T], ro.completion_mask[w_rows, :T]  # (N, T)
        texts = [
            formatter.rewrite(ro.prompts[int(w)], lambda p: self.template.format(prompt=p, solution=ro.texts[int(c)]))  # noqa: B023 - rewrite() calls the edit at once, in this iteration
            for c, w in zip(c_rows, w_rows)
        ]
        ctx_ids, ctx_mask = encode_contexts(tok, texts)  # (N, P') left-padded
        teacher = score_under_context(
            model if teacher_model is None else teacher_model,
            ctx_ids,
            ctx_mask,
            comp,
            cmask,
            temperature=temperature,
            grad=False,
            full=True,
            chunk_rows=len(texts),
        ).logits  # (N, T, V) no grad
        student = score_under_context(
            model,
            ro.prompt_ids[w_rows],
            ro.prompt_mask[w_rows],
            comp,
            cmask,
            temperature=temperature,
            grad=True,
            full=True,
            chunk_rows=len(texts),
        ).logits  # (N, T, V) with grad
        return teacher, student, mask[:, :T].to(student.device, student.dtype)

    def loss_term(self, ctx: LossContext) -> tuple[Tensor, dict[str, float]]:
        logp, batch, rows, temperature = ctx.logp, ctx.batch, ctx.rows, ctx.temperature
        p = self.pairs(batch)
        # N_x: first-round prompts of the batch, times this minibatch's share of it (see the class)
        n_x = max(len(p["groups"]), 1) * ctx.minibatch_share()
        n_pairs = len(p["w_rows"])
        here = torch.isin(p["w_rows"], rows.to(p["w_rows"].device))  # (n_pairs,) w* rows in this micro-batch
        metrics = {
            "distill/pairs": float(n_pairs),
            "distill/frontier_weight": float(p["weight"].mean()) if len(p["weight"]) else 0.0,
            "distill/w_star_truncated_frac": float(p["w_truncated"].float().mean()) if n_pairs else 0.0,
            "distill/wrong_truncated_frac": float(p["wrong_truncated"]),
        }
        loss = torch.zeros((), device=logp.device)
        sums = {"div": 0.0, "tokens": 0.0, "eos_t": 0.0, "eos_s": 0.0}
        if bool(here.any()):
            with self.teacher_model(ctx) as teacher_model:
                teacher, student, mask = self.teacher_student(
                    batch,
                    p["c_rows"][here],
                    p["w_rows"][here],
                    ctx.model,
                    ctx.tok,
                    temperature,
                    teacher_model,
                    ctx.formatter,
                )
            for i, w in enumerate(p["pair_weight"][here].tolist()):  # one token-mean per pair: 1/|y_w*| is per pair
                d, m = token_divergence(
                    student[i : i + 1],
                    teacher[i : i + 1],
                    mask[i : i + 1],
                    kind=self.divergence,
                    beta=self.beta,
                    temperature=temperature,
                    top_k=self.top_k,
                    clip=self.clip,
                )
                loss = loss + (self.coef * w / n_x) * d.to(loss.device)
                sums["div"], sums["tokens"] = (
                    sums["div"] + m["distill/divergence"],
                    sums["tokens"] + m["distill/tokens"],
                )
            eos_t, eos_s = last_token_eos(teacher, student, mask, ctx.tok.eos_token_id, temperature)
            sums["eos_t"], sums["eos_s"] = float(eos_t.sum()), float(eos_s.sum())
        metrics.update(
            {
                "distill/ssopd_term": float(loss.detach()),
                "distill/tokens_term": sums["tokens"],
                # means over the batch's pairs (micro-batches add up): each pair's token-mean
                # divergence, and the teacher's and student's p(EOS) at w*'s last distilled token
                "distill/divergence_term": sums["div"] / max(n_pairs, 1),
                "distill/p_eos_teacher_term": sums["eos_t"] / max(n_pairs, 1),
                "distill/p_eos_student_term": sums["eos_s"] / max(n_pairs, 1),
            }
        )
        return loss, metrics


def last_token_eos(
    teacher: Tensor, student: Tensor, mask: Tensor, eos: int, temperature: float
) -> tuple[Tensor, Tensor]:
    """(N, T, V) teacher and student logits, (N, T) mask -> (N,), (N,): each side's probability of EOS
    at the row's last masked position (where w* stopped, or was cut off), tempered as the divergence
    is; 0 for a row without a masked token. A teacher that gives EOS less mass there than the student
    teaches it, through the divergence, to go on: the runaway of issue #26."""
    n = len(mask)
    last = (mask.shape[1] - 1 - mask.flip(-1).argmax(-1)).long()  # (N,) last masked position
    has = mask.sum(-1) > 0  # (N,)
    idx = torch.arange(n, device=mask.device)

    def p_eos(logits: Tensor) -> Tensor:
        probs = (logits.detach()[idx, last].float() / temperature).softmax(-1)[:, eos]  # (N,)
        return torch.where(has, probs, torch.zeros_like(probs))

    return p_eos(teacher), p_eos(student)


@register_part("egrsd")
@dataclass(frozen=True)
class EGRSD:
    """EGRSD / CL-EGRSD token advantages ``a_{i,t} = A_i m_t g_t`` (+ ``alpha A_i``), arXiv 2605.13255.

    Teacher: the policy (same weights, no grad) under ``template`` with the task's reference solution
    (:func:`reasonrl.tasks.guidance.reference_solution`), giving q_t and the entropy H_t. Student: s_t =
    the behaviour log-probs of the rollout (detached, as the spec's ``sg s_t``: the weights are
    constants of the PPO-clip loss). Rows whose sequence advantage is 0 get weight 0 whatever the
    teacher says (unless none do), so the teacher scores only the others."""

    # [inferred] the privileged context: the reference solution, then the problem again
    template: str = "{prompt}Reference solution: {solution} Now solve it yourself:\n{prompt}"
    direction: str = "advantage"  # [inferred] A_i, or "sign" = sign(A_i)
    # [inferred] "ratio" = clip(exp(q - s), 1/cap, cap), or "abs" = min(|q - s|, cap) (the default before issue #26:
    # |q - s| averaged 0.11 on the tiny reasoner (ratio: 0.995), so the update was ~1/9 of GRPO's; 3 seeds x 60 from the
    # context-mix warm start: ratio 0.651 +- 0.050 vs abs 0.536 +- 0.023 and grpo 0.633 +- 0.053,
    # benchmarks/results/recipe_health/egrsd_ctx.json)
    magnitude: str = "ratio"
    cap: float = 5.0  # [inferred] M
    g_min: float = 0.1  # [inferred value; the floor itself is the paper's]
    tau: float = 1.0  # [inferred] gate temperature (nats)
    lookahead: int = 0  # CL-EGRSD window K (spec default 8); 0: plain EGRSD
    alpha: float = 0.0  # [inferred option] weight of an additive plain-GRPO advantage

    task_needs: ClassVar[tuple[type, ...]] = (WithSolutions,)  # the teacher sees the reference solution
    RULES: ClassVar[dict[str, Rule]] = {
        "template": TEMPLATE,
        "direction": one_of(DIRECTIONS),
        "magnitude": one_of(MAGNITUDE_FORMS),
        "cap": Rule(
            lambda v, c: v >= 1 if c.get("magnitude") == "ratio" else v > 0,
            lambda c: ">= 1 (magnitude 'ratio' clips to [1/cap, cap])" if c.get("magnitude") == "ratio" else "> 0",
        ),
        "g_min": within(0, 1, open_lo=True),
        "tau": above(0),
        "lookahead": Rule(lambda v, _: v >= 0, ">= 0 (0: plain EGRSD, K >= 1: CL-EGRSD's window)"),
        "alpha": at_least(0),
    }

    def shape_advantages(self, adv: Tensor, ctx: BatchContext) -> tuple[Tensor, dict[str, float]]:
        if adv.dim() != 2:
            raise ValueError(
                f"egrsd needs (B, G) sequence advantages, got {tuple(adv.shape)}: another part already "
                "made token-level advantages; use one token-level shaper per recipe"
            )
        ro, items, task = ctx.rollouts, ctx.items, ctx.task
        B, G = adv.shape
        flat = adv.reshape(-1)  # (R,)
        rows = (flat != 0).nonzero().squeeze(-1)  # (n,) rows a token weight can move
        cmask = policy_tokens(ro)  # (R, T) the sampled tokens (an episode's observations get no weight)
        out = torch.zeros(cmask.shape, dtype=flat.dtype)  # (R, T)
        metrics = {"egrsd/rows": float(len(rows))}
        if len(rows):
            texts = [
                ctx.formatter.rewrite(
                    items[int(r) // G].prompt,
                    lambda p: self.template.format(prompt=p, solution=reference_solution(task, items[int(r) // G])),  # noqa: B023 - rewrite() calls the edit at once, in this iteration
                )
                for r in rows
            ]
            sc = ctx.score_under(texts, ro, rows, entropy=True)  # teacher, no grad: q (n, T), H (n, T)
            weights, m = egrsd_token_weights(
                flat[rows],
                sc.logprobs.cpu(),
                ro.logprobs[rows].detach(),
                sc.entropy.cpu(),
                cmask[rows],
                direction=self.direction,
                magnitude=self.magnitude,
                cap=self.cap,
                g_min=self.g_min,
                tau=self.tau,
                lookahead=self.lookahead,
            )  # (n, T)
            out[rows] = weights.to(out.dtype)
            metrics.update(m)
        out = out + self.alpha * flat[:, None] * cmask.to(out.dtype)  # (R, T) optional plain GRPO share
        return out.view(B, G, -1), metrics
