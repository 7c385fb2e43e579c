"""The update half of :class:`reasonrl.loop.trainer.Trainer` (which inherits it): ``mu`` passes of minibatches
over a step's batch, each an accumulation of micro-batch losses (policy term, KL, entropy, the parts' loss
terms) and one guarded optimiser step.

Apart from loop/trainer.py (set-up, state, the step loop) to keep each module under 400 lines; the methods use
the trainer's attributes (model, tok, recipe, cfg, opt, sched, params, dist, group, batches, correction,
sampler, loss_rng, budget, step, formatter, ref, optimizer_steps, total_optimizer_steps, _push_weights).
"""

from __future__ import annotations

import math
import warnings

import torch

from ..models.scoring import score_rows
from ..parts import entropy_term, kl_term, loss_agg, policy_term
from ..parts.protocol import LossContext, hook_result
from .schedule import clip_groups, split_even
from .stepdata import Batch, additive_metric, merge_metrics


class UpdateSteps:
    def _micro_loss(self, b: Batch, rows: torch.Tensor, n_tokens: float, n_seqs: int, draws=None):
        ro, r = b.ro, self.recipe
        extra = None if b.extra_labels is None else b.extra_labels[rows]  # a part's second label set (TGPO)
        hidden = "hidden" in r.needs  # a part reads the policy's last hidden states (a value head)
        logp, ent, *more = score_rows(
            self.model, ro, rows, temperature=r.sampling.temperature or 1.0, extra_labels=extra, hidden=hidden
        )  # (n, T) each, T without padding columns
        c_len = logp.shape[1]
        dev = logp.device  # rollouts live on the CPU; the loss is computed where the model is
        mask = b.loss_mask[rows, :c_len].to(dev, logp.dtype)
        adv = b.advantages[rows] if b.advantages.dim() == 1 else b.advantages[rows, :c_len]
        norm = {"n_tokens": n_tokens, "n_seqs": n_seqs, "norm_len": self.budget}
        old, adv, m_engine = self.correction.apply(b, rows, logp, ro.logprobs[rows, :c_len].to(dev), adv.to(dev), mask)
        loss, metrics = policy_term(r.loss, logp, old, adv, mask, **norm)  # old: the trainer's own with vLLM (issue 43)
        agg = {**loss_agg(r.loss, self.budget), "n_tokens": n_tokens, "n_seqs": n_seqs}
        if b.ref_logp is not None:
            mine = {k: v[rows.to(v.device), :c_len] for k, v in (draws or {}).items()}  # this micro-batch's noise
            kl, m = kl_term(
                logp,
                b.ref_logp[rows, :c_len].to(dev),
                mask,
                r.kl,
                entropy=ent.detach(),
                step=self.optimizer_steps,
                max_steps=self.total_optimizer_steps,
                draws=mine,
                **agg,
            )
            loss, metrics = loss + kl, {**metrics, **m}
        if r.entropy_coef:
            eb, m = entropy_term(ent, mask, r.entropy_coef, **agg)
            loss, metrics = loss + eb, {**metrics, **m}
        parts = self.batches.parts
        for key, term in r.calls("loss_term"):  # auxiliary terms; teacher terms score rows under other prompts
            ctx = LossContext(
                logp=logp,
                mask=mask,
                rows=rows,
                batch=b,
                model=self.model,
                tok=self.tok,
                temperature=r.sampling.temperature or 1.0,
                extra_logp=more[0] if extra is not None else None,
                train_step=self.step + 1,
                **agg,
                data=b.channel(key),  # train_step: the step being trained
                state=parts.state(key),
                kind=parts.kind_of(key),
                formatter=self.formatter,
                reference=None if self.ref is None else self.ref.scoring,
                modules=parts.modules_of(key),
                hidden=more[-1] if hidden else None,
            )
            a, m = hook_result(key, "loss_term", term(parts.grant(key, ctx)))
            loss, metrics = loss + a, {**metrics, **m}
        return loss, {**metrics, **m_engine}

    def _optimizer_step(self, b: Batch, rows: torch.Tensor) -> dict[str, float]:
        """Accumulate micro-batch gradients over ``rows`` and take one (guarded) optimiser step."""
        mask = b.loss_mask[rows]
        # global normalisers: tokens the loss sees; rows with any such token (masked rows leave both)
        n_tokens, n_seqs = float(mask.sum()), int((mask.sum(-1) > 0).sum())
        self.opt.zero_grad(set_to_none=True)
        total, parts = 0.0, []
        every = self._rows_with_gradient(b, rows)
        live = every[
            self.group.owns(every // self.recipe.group_size)
        ]  # this rank's groups (all of them in one process)
        # micro-batches of similar lengths pad less; the global normalisers keep the sum exact
        live = live[torch.argsort(b.ro.completion_mask[live].sum(-1), stable=True)]
        # a stochastic loss term's noise, drawn once for the whole batch: the micro-batch split cannot change it
        draws = self.recipe.kl.draws(tuple(b.loss_mask.shape), self.loss_rng) if b.ref_logp is not None else {}
        # FSDP adds zero-weight passes over one live row, so every rank runs the same collectives
        for micro, weight in self.dist.micro_batches(live, every[:1], self.cfg.micro_batch_size):
            loss, m = self._micro_loss(b, micro, n_tokens, n_seqs, draws)
            if not weight:
                (loss * 0.0).backward()
                continue
            loss.backward()
            total += float(loss.detach())
            parts.append((float(b.loss_mask[micro].sum()), m))
        # ranks: gradients, loss and live-row counts summed; the micro-batches' metrics gathered
        total, n_live = self.dist.reduce(self.params, [total, float(len(live))])
        parts = [part for rank_parts in self.group.gather(parts) for part in rank_parts]
        if n_live == 0:  # nothing to learn from: a zero gradient, so AdamW's step is what it would be
            for p in self.params:
                p.grad = torch.zeros_like(p)
        # one host read: the total norm, non-finite when any gradient holds a NaN/inf; clipped when finite
        norms = clip_groups(self.opt.param_groups) if math.isfinite(total) else None  # each group its own clip
        finite = norms is not None
        if not parts:  # no row to train on: the loss's own metrics for an empty batch, so every step logs them
            z = torch.zeros(0, 1)
            parts = [
                (
                    1.0,
                    policy_term(
                        self.recipe.loss,
                        z,
                        z,
                        torch.zeros(0),
                        z,
                        n_tokens=n_tokens,
                        n_seqs=n_seqs,
                        norm_len=self.budget,
                    )[1],
                )
            ]
        out = merge_metrics(parts, additive=additive_metric)
        out["loss/total"] = total
        out["update/rows_skipped_frac"] = 1.0 - n_live / max(len(rows), 1)
        if finite:
            out.update({"grad_norm" if k == "policy" else f"grad_norm/{k}": v for k, v in norms.items()})
            self.opt.step()
        else:
            self.opt.zero_grad(set_to_none=True)
        out["nonfinite"] = 0.0 if finite else 1.0
        self.sched.step()
        return out

    def _rows_with_gradient(self, b: Batch, rows: torch.Tensor) -> torch.Tensor:
        """Rows whose loss can have a gradient. With only the policy loss (no KL, entropy or
        auxiliary term) a row whose advantages are all 0 contributes exactly 0 (S = min(rho*0, ...)),
        while the normalisers stay global: skipping its forward/backward is exact, and in GRPO it
        skips every zero-variance group."""
        r = self.recipe
        rows = rows[b.loss_mask[rows].sum(-1) > 0]  # rows the loss never sees (filtered) need no pass
        if not self.cfg.skip_zero_advantage_rows or r.kl.coef or r.entropy_coef or r.calls("loss_term"):
            return rows
        adv = b.advantages[rows]
        nonzero = adv != 0 if adv.dim() == 1 else (adv != 0).any(-1)
        return rows[nonzero]

    def update(self, b: Batch, minibatches: list[torch.Tensor] | None = None) -> dict[str, float]:
        """Optimiser steps over ``b``: ``mu`` passes of ``minibatches`` random minibatches, or the given
        row sets (a stage step). A minibatch without rows takes no optimiser step but advances the LR
        schedule, so the schedule's position is the scheduled step count whatever a filter left."""
        o = self.recipe.optim
        if minibatches is None:
            minibatches = []
            for _ in range(o.mu):
                order = torch.randperm(len(b.ro.texts), generator=self.sampler, device=self.sampler.device).cpu()
                minibatches += split_even(order, o.minibatches)
        self.correction.prepare(b, self, len(minibatches))  # issue 43: vLLM rollouts' old log-probs, when needed
        self.model.train()
        results = []
        with self.dist.updating(self.model):  # FSDP: sharded for the optimiser steps, gathered again after
            for rows in minibatches:
                if len(rows):
                    results.append(self._optimizer_step(b, rows))
                else:
                    with warnings.catch_warnings():  # skipping a slot of the schedule is the point here
                        warnings.filterwarnings("ignore", message=r"Detected call of `lr_scheduler.step\(\)` before")
                        self.sched.step()
        out = merge_metrics([(1.0, r) for r in results])  # mean over optimiser steps
        out["nonfinite"] = float(sum(r["nonfinite"] for r in results))
        self._push_weights()
        return out
