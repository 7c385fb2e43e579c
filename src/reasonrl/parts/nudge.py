"""NudgeRL (arXiv 2605.15726, from the authors' trainer): hinted sub-groups, their advantages and the
distillation of hinted behaviour into the bare prompt, as one recipe part.

Per problem the group of G = M * K rollouts is spent on M strategy hints (K rollouts each); per hint
``d_j ~ Binomial(K, p_drop)`` rollouts are "dropped out" to the bare prompt. The part joins the loop
through three methods (parts/strategy.py): ``generate`` makes the sub-groups (``ro.context_ids``:
0 = bare, j = hint j), ``shape_advantages`` replaces the estimator's advantages with NudgeRL's
within-hint + lambda x between-hint ones, and ``loss_term`` adds the distillation term
``L_d = -mean_i [A_i (1/|y_i|) sum_t log pi(y_t | bare prompt, y_<t)]`` weighted by ``distill_coef``.
The policy loss itself reads each row's own (hinted) prompt, as the trainer always does.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from ..advantages.subgroups import nudge_advantages, nudge_contexts, nudge_dropout_counts
from ..distill import encode_contexts, score_under_context
from ..rollout import Rollouts
from ..config.rules import Rule, at_least, one_of, within
from ..seeds import stable_seed
from ..tasks.guidance import hints as task_hints
from ..tasks.protocols import WithHints
from .protocol import BatchContext, LossContext, register_part
from .strategy import GenRequest

# The spec's block (authors' code), placed BEFORE the problem here: the tiny reasoner answers what
# follows the problem's own last line ("...=?\n"), so a hinted prompt must end as the bare one does.
# The paper puts the block after the problem; set hints.template="{prompt}Context ...\n" for that.
HINT_TEMPLATE = (
    "Context (exploration condition): Use this hint/approach: {hint}\n"
    "Follow this approach as your primary strategy.\n{prompt}"
)
SAMPLERS = ("sequential", "random")


@register_part("hints")
@dataclass(frozen=True)
class HintSampling:
    """NudgeRL's hinted sub-groups (spec distill-and-data.md section 8; defaults from the authors' config).

    ``n_hints`` M and ``per_hint`` K (group_size must be M * K), ``p_drop`` the dropout probability,
    ``sampler`` which M of the task's hints (``sequential``: the first M, the authors'; ``random``: M
    of them drawn per item, keyed by its task position [inferred]), ``adv_lambda`` the between-hint
    weight (``adv_lbd``: config 1.1), ``distill_coef`` the distillation weight (config 0.1),
    ``template`` the hinted prompt with ``{hint}`` and ``{prompt}`` (see HINT_TEMPLATE [inferred]).
    """

    n_hints: int = 2
    per_hint: int = 4
    p_drop: float = 0.5
    sampler: str = "sequential"
    adv_lambda: float = 1.1
    distill_coef: float = 0.1
    template: str = HINT_TEMPLATE

    needs: ClassVar[frozenset[str]] = frozenset({"policy_in_loss"})  # the distillation term re-scores hinted rows
    task_needs: ClassVar[tuple[type, ...]] = (WithHints,)  # rollouts conditioned on the task's hints
    RULES: ClassVar[dict[str, Rule]] = {
        "n_hints": at_least(1),
        # a group is spent on M hints x K rollouts: G = M * K exactly
        "per_hint": Rule(
            lambda v, c: (
                v >= 1
                and (
                    c.get("n_hints", 1) < 1  # that one is reported on its own
                    or v * c.get("n_hints", 1) == c.get("group_size")
                )
            ),
            lambda c: (
                f">= 1 with hints.n_hints * hints.per_hint = group_size "
                f"({c.get('n_hints')} * per_hint = {c.get('group_size')})"
            ),
        ),
        "p_drop": within(0, 1),
        "sampler": one_of(SAMPLERS),
        "adv_lambda": at_least(0),
        "distill_coef": at_least(0),
        "template": Rule(
            lambda v, _: "{hint}" in v and "{prompt}" in v,
            "a text containing {hint} and {prompt} (the hinted prompt should end as the bare one)",
        ),
    }

    # ---------------------------------------------------------------- rollouts
    def generate(self, req: GenRequest) -> tuple[Rollouts, dict[str, float]]:
        """G = M * K rows per item, group-major; each row sampled alone (n = 1) with a seed keyed by
        (the item's task position, the row's index in its group), so its sample depends neither on the
        batch it came in nor on the other rows. ``ro.context_ids`` (R,): 0 = bare, j = hint j."""
        M, K, G = self.n_hints, self.per_hint, req.group_size
        if G != M * K:
            raise ValueError(
                f"NudgeRL needs group_size = hints.n_hints * hints.per_hint, but group_size={G} and "
                f"hints.n_hints * hints.per_hint = {M} * {K} = {M * K}: set one to match the other"
            )
        prompts, seeds, ctx = [], [], []
        for i, item in enumerate(req.items):
            pos = req.first + i  # the item's task position keys all its randomness
            chosen = self.choose_hints(task_hints(req.task, item), pos, req.seed, item)
            ids = self.contexts(pos, req.seed)  # (G,)
            prompts += [
                req.formatter.render(item.prompt)
                if c == 0
                else req.formatter.rewrite(item.prompt, lambda p: self.template.format(hint=chosen[c - 1], prompt=p))  # noqa: B023 - rewrite() calls the edit at once, in this iteration
                for c in ids
            ]
            seeds += [stable_seed(req.seed, "sample", pos, "nudge", j) for j in range(G)]
            ctx += ids
        ro = req.engine.generate(prompts, 1, req.sampling, seeds=seeds)
        ro.n, ro.context_ids = G, torch.tensor(ctx, dtype=torch.long)
        hinted = sum(c > 0 for c in ctx) / max(len(ctx), 1)
        return ro, {"nudge/hinted_frac": hinted, "nudge/dropout_frac": 1.0 - hinted}

    def contexts(self, pos: int, seed: int) -> list[int]:
        """The context id of each of an item's G rows: dropout counts drawn on a generator seeded by the
        item's task position (a resumed run draws the same), bare rows first (nudge_contexts)."""
        gen = torch.Generator().manual_seed(stable_seed(seed, "nudge_dropout", pos))
        return nudge_contexts(nudge_dropout_counts(self.n_hints, self.per_hint, self.p_drop, gen), self.per_hint)

    def choose_hints(self, hints: list[str], pos: int, seed: int, item: Any) -> list[str]:
        if len(hints) < self.n_hints:
            raise ValueError(
                f"item {getattr(item, 'key', item)!r} has {len(hints)} hints, hints.n_hints={self.n_hints} "
                "needs that many: lower hints.n_hints or give the task more hints"
            )
        if self.sampler == "sequential":  # the authors' sampler: the first M
            return list(hints[: self.n_hints])
        return random.Random(stable_seed(seed, "nudge_hints", pos)).sample(list(hints), self.n_hints)

    # ---------------------------------------------------------------- advantages
    def shape_advantages(self, adv: torch.Tensor, ctx: BatchContext) -> tuple[torch.Tensor, dict[str, float]]:
        """First-round groups (kinds == 0) get NudgeRL's advantages over their sub-groups; other groups
        keep theirs. Metrics: accuracy of hinted and bare rows (first-round groups)."""
        first = ctx.kinds == 0  # (B,)
        if adv.dim() != 2:
            raise ValueError(
                f"NudgeRL's advantages are per rollout: the estimator gave shape {tuple(adv.shape)}, "
                "expected (B, G); use a sequence-level advantage estimator"
            )
        contexts, correct = ctx.contexts[first], ctx.correct[first]  # (B', G)
        out = adv.clone()
        out[first] = nudge_advantages(ctx.rewards[first], contexts, lam=self.adv_lambda).to(adv.dtype)
        metrics = {}
        for name, rows in (("hinted", contexts > 0), ("bare", contexts == 0)):
            if rows.any():  # a step without such rows logs no value (not a NaN)
                metrics[f"nudge/{name}_accuracy"] = float(correct[rows].float().mean())
        return out, metrics

    # ---------------------------------------------------------------- distillation
    def loss_term(self, ctx: LossContext) -> tuple[torch.Tensor, dict[str, float]]:
        """``distill_coef * L_d`` over this micro-batch's first-round rows, normalised by the minibatch's
        global sequence count ``n_seqs`` (so micro-batches add up to the whole). Bare rows reuse the
        policy's log-probs (their prompt is the bare one); hinted rows are re-scored, with grad, under
        their item's bare prompt. logp, mask: (r, c_len)."""
        logp, mask, batch, rows, model = ctx.logp, ctx.mask, ctx.batch, ctx.rows, ctx.model
        G, c_len, dev = batch.rewards.shape[1], mask.shape[1], logp.device
        cids = batch.ro.context_ids
        groups = rows // G  # (r,)
        first = (batch.group_kinds()[groups] == 0).to(dev)  # (r,)
        hinted = (torch.zeros(len(rows), dtype=torch.bool) if cids is None else cids[rows] > 0).to(dev) & first
        bare_logp = logp
        if hinted.any():
            sel = rows[hinted.cpu()]
            ids, cmask = encode_contexts(
                ctx.tok, ctx.formatter.render_all([batch.items[int(r) // G].prompt for r in sel])
            )
            scored = score_under_context(
                model,
                ids,
                cmask,
                batch.ro.completion_ids[sel, :c_len],
                batch.ro.completion_mask[sel, :c_len],
                temperature=ctx.temperature,
                grad=True,
                chunk_rows=len(sel),
            ).logprobs.to(dev, logp.dtype)  # (h, c_len)
            bare_logp = logp.clone()
            bare_logp[hinted] = scored
        adv = batch.advantages[rows].to(dev, logp.dtype)
        adv = adv[:, None] if adv.dim() == 1 else adv[:, :c_len]  # (r, 1) or (r, c_len)
        term, d_metrics = distill_loss(bare_logp, adv, mask * first[:, None].to(mask.dtype), ctx.n_seqs)
        return self.distill_coef * term, {"nudge/distill_term": float(self.distill_coef * term.detach()), **d_metrics}


def distill_loss(bare_logp: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor, n_seqs: int):
    """``-sum_i A_i (1/|y_i|) sum_t log pi(y_it | x0, y_i<t) / n_seqs`` (NudgeRL's L_d, arXiv 2605.15726):
    the sum over this micro-batch's rows, divided by the global sequence count.

    bare_logp (r, T) log-probs under the bare prompt; adv (r, 1) or (r, T) advantages; mask (r, T)
    tokens of each completion (|y_i| = its row sum; a row with none adds nothing)."""
    n_tok = mask.sum(-1)  # (r,)
    per_seq = (adv * bare_logp * mask).sum(-1) / n_tok.clamp(min=1)  # (r,)
    loss = -per_seq.sum() / max(n_seqs, 1)
    live = n_tok > 0
    mean_logp = float(((bare_logp.detach() * mask).sum(-1)[live] / n_tok[live]).mean()) if live.any() else 0.0
    return loss, {"nudge/bare_logp": mean_logp}
