"""The scoring half of a step's batch (:class:`reasonrl.loop.batch.BatchMaker` inherits it): rewards, then
advantages (estimator, then the parts' score_batch and shape_advantages hooks), the loss mask, the reference's
log-probs, then the selector's post-advantage hook.

Apart from loop/batch.py (drawing, generation, rounds) to keep each module under 400 lines; the methods use the
maker's attributes (recipe, task, engine, reward_fn, parts, ref, micro, owns, seconds, selector, step, seed,
formatter).
"""

from __future__ import annotations

import dataclasses
import time

import torch

from ..advantages.scored import fill_unscored, scored_advantages
from ..data.selector import SelectContext, group_tokens
from ..models.scoring import score_completions
from ..parts.protocol import BatchContext, Channel, hook_result
from ..rewards.base import reward_name, score_rewards
from ..rollout import Rollouts
from ..rollout.base import trained_tokens
from ..rollout.branch import token_char_offsets
from .stepdata import Batch, keep_groups
from ..tasks import Item, is_correct, reward_columns


class BatchScoring:
    def reward(self, items: list[Item], ro: Rollouts) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
        """(B, n) total rewards, (B, n) raw correctness, reward metrics, for ``ro`` holding n rows per item
        (G for a round; DISA's offline stage samples N proposals)."""
        return self.reward_terms(items, ro)[:3]

    def reward_terms(
        self, items: list[Item], ro: Rollouts
    ) -> tuple[torch.Tensor, torch.Tensor, dict[str, float], dict[str, torch.Tensor]]:
        """:meth:`reward` and each reward's own (R,) values by name, unweighted (completions.jsonl)."""
        G = len(ro.texts) // max(len(items), 1)
        t0, rows = time.perf_counter(), [it for it in items for _ in range(G)]
        # lengths are the policy's own tokens, against an episode's whole budget (issue 41: an episode's
        # observations counted against one turn's budget gave an answered episode DAPO's -1)
        budget = int(ro.extras.get("token_budget", self.budget))
        cols = {
            **reward_columns(rows),
            "completion_lengths": ro.policy_lengths.tolist(),
            "truncated": ro.truncated.tolist(),
            "completion_ids": ro.completion_ids.tolist(),
            "max_new_tokens": [budget] * len(rows),
            "rollouts": ro,
        }  # token-level statistics for rewards that need them (CorR-PO); not per row
        res = score_rewards(self.reward_fn, ro.prompts, ro.texts, cols, task=self.task.name)
        correct = torch.tensor([float(is_correct(v)) for v in res.values])
        cols["correct"] = [bool(c) for c in correct]  # raw task correctness, for shaping terms (CorR-PO correct_only)
        total, metrics = self.recipe.task_reward_weight * torch.tensor(res.values), dict(res.metrics)
        failed = _failed(res, len(rows))  # (R,) rows a reward could not score (a judge that failed)
        terms = {reward_name(self.reward_fn): _values(res, len(rows))}  # each reward's own values, by name
        for fn, weight in self.recipe.extra_rewards:  # shaping terms; None (not applicable) adds nothing
            extra = score_rewards(fn, ro.prompts, ro.texts, cols, task=self.task.name)
            total = total + weight * torch.tensor([0.0 if v is None else v for v in extra.values])
            metrics.update(extra.metrics)
            failed = failed | _failed(extra, len(rows))
            name = reward_name(fn) if reward_name(fn) not in terms else f"{reward_name(fn)}_{len(terms) + 1}"
            terms[name] = _values(extra, len(rows))
        if ro.fixed_reward is not None:  # rows whose reward was fixed when they were made (an overflowed episode)
            fixed = ro.fixed_reward.to(total.dtype)
            total = torch.where(fixed.isnan(), total, fixed)
            correct = torch.where(fixed.isnan(), correct, torch.zeros_like(correct))
            failed = failed & fixed.isnan()  # a fixed reward needs no verdict
        total = fill_unscored(total.view(-1, G), ~failed.view(-1, G))  # unscored: neutral for filters and stats
        ro.unscored = failed if bool(failed.any()) else None  # left out of the advantage and the loss (prepare)
        metrics["reward/unscored_frac"] = float(failed.float().mean()) if len(failed) else 0.0
        self.seconds["score"] += time.perf_counter() - t0
        return total, correct.view(-1, G), metrics, terms

    def batch_context(self, b: Batch, excluded: list[torch.Tensor]) -> BatchContext:
        """What ``score_batch`` and ``shape_advantages`` see of ``b`` (``data``/``state``/``modules`` set per part);
        rows a part excludes (``exclude_rows``) are collected in ``excluded``, for the loss mask."""
        G = self.recipe.group_size
        answers = [[self.task.extract_answer(t) for t in b.ro.texts[i * G : (i + 1) * G]] for i in range(len(b.items))]
        contexts = (
            torch.zeros(b.rewards.shape, dtype=torch.long)
            if b.ro.context_ids is None
            else b.ro.context_ids.view(b.rewards.shape)
        )  # (B, G) sub-group of each row

        def set_extra_labels(ids: torch.Tensor) -> None:
            if b.extra_labels is not None:
                raise RuntimeError("two parts set the batch's extra label ids; the policy's forward scores one set")
            b.extra_labels = ids

        return BatchContext(
            rewards=b.rewards,
            correct=b.correct,
            answers=answers,
            rollouts=b.ro,
            items=b.items,
            task=self.task,
            contexts=contexts,
            kinds=b.group_kinds(),
            step=self.step,
            temperature=self.recipe.sampling.temperature or 1.0,
            policy=getattr(self.engine, "model", None),
            tok=getattr(self.engine, "tok", None),
            micro=self.micro,
            score_under=self.score_under,
            set_extra_labels=set_extra_labels,
            channels=b.parts,
            exclude_rows=excluded.append,
            char_offsets=lambda r: token_char_offsets(self.engine.tok, b.ro.completion_ids[r, : int(b.ro.lengths[r])]),
            data=Channel(),
            state={},
            formatter=self.formatter,
            seed=self.seed,
            reference=None if self.ref is None else self.ref.scoring,
        )

    def _for_part(self, base: BatchContext, b: Batch, key: str) -> BatchContext:
        return self.parts.grant(
            key,
            dataclasses.replace(
                base, data=b.channel(key), state=self.parts.state(key), modules=self.parts.modules_of(key)
            ),
        )

    def prepare(self, b: Batch) -> Batch:
        """Advantages (estimator, then shapers), the loss mask and reference log-probs, in place."""
        G, t0 = self.recipe.group_size, time.perf_counter()
        scored = torch.ones(b.rewards.shape, dtype=torch.bool) if b.ro.unscored is None else ~b.ro.unscored.view(-1, G)
        # (B, G); rows no reward could score (a failed judge) are left out of their group's advantage
        adv = scored_advantages(self.recipe.advantage, b.rewards, scored) if len(b.items) else torch.zeros(0, G)
        if b.preset is not None:  # a round's own advantages (STRIDE's harmless one) replace the estimator's
            pre = b.preset.view(*b.preset.shape, *([1] * (adv.dim() - 2))).expand_as(adv)
            adv = torch.where(pre.isnan(), adv, pre)
        excluded: list[torch.Tensor] = []  # rows a part takes out of the loss (exclude_rows: DISA's unknown prompts)
        if len(b.items):  # an empty batch has nothing to score or shape
            base = self.batch_context(b, excluded)
            for key, score in self.recipe.calls("score_batch"):  # annotations first: shapers read them
                b.metrics.update(hook_result(key, "score_batch", score(self._for_part(base, b, key)))[1])
            for key, shaper in self.recipe.calls("shape_advantages"):
                adv, shaped = hook_result(key, "shape_advantages", shaper(adv, self._for_part(base, b, key)))
                b.metrics.update(shaped)
        b.advantages = adv.reshape(len(b.ro.texts), *adv.shape[2:])  # (R,) or (R, T)
        if b.weight is not None:  # a round's loss weight or importance weight, per row
            b.advantages = b.advantages * b.weight.view(-1, *([1] * (b.advantages.dim() - 1)))
        b.loss_mask = trained_tokens(b.ro).clone()  # an episode's observation tokens never reach a loss
        if b.ro.unscored is not None:  # nor a row no reward could score (metric reward/unscored_frac)
            b.loss_mask[b.ro.unscored] = 0
        for rows in excluded:
            b.loss_mask[rows] = 0
        if self.recipe.mask_truncated:  # overlong filtering: a cut-off answer teaches nothing either way
            b.loss_mask[b.ro.truncated] = 0
        if self.ref is not None and self.recipe.kl.coef > 0 and len(b.items):
            self._reference_logp(b)
        self.seconds["score"] += time.perf_counter() - t0
        return b

    def _reference_logp(self, b: Batch) -> None:
        """The reference's log-probs of the rows this rank trains on (the update reads no other)."""
        G = self.recipe.group_size
        rows = (self.owns(torch.arange(len(b.ro.texts)) // G)).nonzero().squeeze(-1)
        b.ref_logp = torch.zeros(b.ro.completion_ids.shape)
        with torch.no_grad(), self.ref.scoring() as ref:  # a frozen copy, or the policy with adapters off
            mine, _ = score_completions(
                ref,
                b.ro.prompt_ids[rows],
                b.ro.prompt_mask[rows],
                b.ro.completion_ids[rows],
                b.ro.completion_mask[rows],
                temperature=self.recipe.sampling.temperature or 1.0,
                chunk_rows=self.micro,
                entropies=False,
            )
        b.ref_logp[rows] = mine.to(b.ref_logp)

    def select(self, b: Batch) -> Batch:
        """The selector's post-advantage hook: only the whole groups it keeps stay in the batch."""
        if self.selector is None:
            return b
        G, B = self.recipe.group_size, len(b.items)
        scores = torch.full((B,), float("nan")) if b.scores is None else b.scores
        scores = torch.cat([scores, torch.full((B - len(scores),), float("nan"))])  # groups a round added
        ctx = SelectContext(
            items=b.items,
            correct=b.correct,
            advantages=b.advantages.reshape(B, G, *b.advantages.shape[1:]),
            scores=scores,
            kinds=b.group_kinds(),
            tokens=group_tokens(b.ro.completion_mask, G),
            n_params=sum(p.numel() for p in self.engine.model.parameters()),
            minibatches=self.recipe.optim.minibatches,
        )
        keep, metrics = self.selector.select(ctx)
        b.metrics.update(metrics)
        return keep_groups(b, keep.nonzero().squeeze(-1).tolist(), G)


def _failed(res, n: int) -> torch.Tensor:  # -> (n,) bool
    return torch.zeros(n, dtype=torch.bool) if res.failed is None else torch.tensor(res.failed, dtype=torch.bool)


def _values(res, n: int) -> torch.Tensor:  # -> (n,) float: a reward's own values, NaN where it declined or failed
    return torch.tensor([float("nan") if v is None else float(v) for v in res.values]).masked_fill(
        _failed(res, n), float("nan")
    )
