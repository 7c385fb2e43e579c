"""SU-01's refined-RL round: self-refinement prompts and replay of past successes (arXiv 2605.13301).

After the ordinary (GSPO, zero-std filtered) groups are rewarded, :class:`RefineReplay` adds two
kinds of groups, each a fixed share of the final batch (spec distill-and-data section 13):

- **refine groups**: an earlier wrong answer (from a normal group whose mean reward was < 0.5, the
  sample's reward < 0.9) becomes a refine prompt (the prompt, the previous answer, an instruction,
  the prompt again); G samples are drawn from it and rewarded by the question's own verifier. One
  refine attempt per question; refine samples are never collected again.
- **replay groups** (ExGRPO-style, k = 1): a question with a stored past success gets G - 1 fresh
  samples, and the stored trajectory is the G-th row of the same group, with the behaviour
  log-probs it was sampled with. The recipe's estimator gives the group's advantages, the replayed
  row's included (positive when some fresh samples fail); the loss's ratio is taken against the old
  log-probs, so its clip bounds the off-policy step.

Buffers live in the part's state (checkpointed by the trainer), keyed by ``Item.key``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from ..data.refine_replay import extra_group_counts, pick_replay_row, pop_refine, push_refine, refine_candidates
from ..rollout import Rollouts, concat_rollouts, select_rows
from ..config.rules import Rule, at_least, within
from ..seeds import stable_seed
from .protocol import RoundContext, register_part
from .strategy import Groups

# The repo's refine template ends with the question again, as CIPO's correction prompt does, so that
# a small model answers in its task's usual format (SU-01's own instruction asks for a rewritten proof).
DEFAULT_TEMPLATE = (
    "{prompt}Previous answer:\n{attempt}\n"
    "Check the previous answer step by step, fix any error and give a refined full solution.\n{prompt}"
)


@register_part("refine_replay")
@dataclass(frozen=True)
class RefineReplay:
    """Fields (spec numbers where it has them; [inferred] otherwise): ``refine_share`` 0.2 and
    ``replay_share`` 0.25 of the final batch; ``mean_below`` 0.5 / ``sample_below`` 0.9 (which groups and
    samples feed the refine buffer); ``min_reward`` 0.0 (a replayed success must score above it);
    ``capacity`` [inferred] refine-buffer entries kept (oldest dropped); ``drop_zero_std`` [inferred]:
    the zero-std filter applies to the extra groups too; ``template``: the refine prompt."""

    AFTER = ("vpd",)  # the order it ran in before the order was declared (parts/registry.py)

    refine_share: float = 0.2
    replay_share: float = 0.25
    mean_below: float = 0.5
    sample_below: float = 0.9
    min_reward: float = 0.0
    capacity: int = 256
    drop_zero_std: bool = True
    template: str = DEFAULT_TEMPLATE

    RULES: ClassVar[dict[str, Rule]] = {
        # shares of the final batch; the ordinary groups need the rest
        "refine_share": within(0, 1, open_hi=True),  # the sum of both: the replay_share rule
        "replay_share": Rule(
            lambda v, c: 0 <= v and v + c.get("refine_share", 0) < 1, "in [0, 1 - refine_replay.refine_share)"
        ),
        "capacity": at_least(1),
        "template": Rule(
            lambda v, _: "{prompt}" in v and "{attempt}" in v,
            "text with the slots {prompt} and {attempt} (end it with {prompt})",
        ),
    }

    def extend(self, ctx: RoundContext) -> tuple[Groups | None, dict[str, float]]:
        batch = ctx.batch
        G = batch.rewards.shape[1]
        if G < 2:
            raise ValueError("refine_replay needs group_size >= 2 (a replay group is G - 1 fresh rows + 1 replayed)")
        st = ctx.state
        for key, empty in (("refine", []), ("refined", {}), ("replay", {})):
            st.setdefault(key, empty)
        first = (batch.group_kinds() == 0).nonzero().squeeze(-1).tolist()  # ordinary groups only: never re-collect
        n_ref, n_rep = extra_group_counts(len(first), self.refine_share, self.replay_share)
        in_batch = {batch.items[g].key for g in first}
        parts = [
            p for p in (self._refine(ctx, st, n_ref, in_batch), self._replay(ctx, st, n_rep, in_batch)) if p is not None
        ]  # (items, rollouts, rewards, correct, kind, metrics) each
        m = self._collect(st, batch, first)  # after using the buffers: this batch feeds later ones
        count = {kind: 0 for kind in ("refine", "replay")}
        for p in parts:
            count[p[4]] += len(p[0])
            m.update(p[5])
        total = len(first) + sum(count.values())
        m.update({f"su01/{k}_groups": float(v) for k, v in count.items()})
        m.update({f"su01/{k}_frac": v / total for k, v in count.items()})  # share of the final batch
        parts = [p for p in parts if p[0]]
        if not parts:  # nothing to refine or replay: no groups, the counts still reported
            return None, m
        ro = concat_rollouts([p[1] for p in parts], ctx.tok.pad_token_id)
        ro.n = G
        return Groups(
            items=[it for p in parts for it in p[0]],
            ro=ro,
            rewards=torch.cat([p[2] for p in parts]),
            correct=torch.cat([p[3] for p in parts]),
        ), m

    def _keep(self, correct: torch.Tensor) -> torch.Tensor:  # (B', G) -> (B',) bool
        if not self.drop_zero_std:
            return torch.ones(len(correct), dtype=torch.bool)
        return correct.max(-1).values > correct.min(-1).values

    def _refine(self, ctx: RoundContext, st: dict, n: int, in_batch: set[str]):
        """Refine groups from the buffer (filled by earlier batches): G samples per refine prompt."""
        entries = pop_refine(st["refine"], st["refined"], n, exclude=in_batch)
        if not entries:
            return None
        items = [e["item"] for e in entries]
        prompts = [ctx.formatter.follow_up(it.prompt, self.template, e["attempt"]) for it, e in zip(items, entries)]
        ro = ctx.sample(items, prompts, tag="su01-refine", first=ctx.position)
        rewards, ok, _ = ctx.reward(items, ro)  # (B', G) each
        metrics = {"su01/refine_accuracy": float(ok.mean())}
        return self._filtered(items, ro, rewards, ok, "refine", metrics)

    def _replay(self, ctx: RoundContext, st: dict, n: int, in_batch: set[str]):
        """Replay groups: G - 1 fresh samples of a stored question + its stored success as row G."""
        keys = [k for k in st["replay"] if k not in in_batch]
        if not keys or n == 0:
            return None
        gen = torch.Generator().manual_seed(stable_seed(ctx.seed, "su01-replay", ctx.position))
        chosen = [keys[i] for i in torch.randperm(len(keys), generator=gen)[:n].tolist()]
        items = [st["replay"][k]["item"] for k in chosen]
        G = ctx.group_size
        fresh = ctx.sample(items, [it.prompt for it in items], tag="su01-replay", first=ctx.position, n=G - 1)
        rows = []
        for i, k in enumerate(chosen):  # group-major: the fresh rows of question i, then its replayed row
            rows += [select_rows(fresh, range(i * (G - 1), (i + 1) * (G - 1))), st["replay"][k]["row"]]
        ro = concat_rollouts(rows, ctx.tok.pad_token_id)
        ro.n = G
        rewards, ok, _ = ctx.reward(items, ro)  # (B', G): the replayed row re-verified with the others
        solved = ok[:, :-1].min(-1).values > 0  # (B',) every fresh sample right: retire the question (ExGRPO)
        for k, s in zip(chosen, solved.tolist()):
            if s:
                del st["replay"][k]
        metrics = {"su01/replay_fresh_accuracy": float(ok[:, :-1].mean()), "su01/replay_retired": float(solved.sum())}
        return self._filtered(items, ro, rewards, ok, "replay", metrics)

    def _filtered(self, items, ro: Rollouts, rewards, ok, kind: str, metrics: dict):
        """The groups the zero-std filter keeps (all with ``drop_zero_std=False``), as one part."""
        G = rewards.shape[1]
        keep = self._keep(ok).nonzero().squeeze(-1).tolist()
        metrics[f"su01/{kind}_dropped_zero_std"] = float(len(items) - len(keep))
        rows = [g * G + j for g in keep for j in range(G)]
        return [items[g] for g in keep], select_rows(ro, rows), rewards[keep], ok[keep], kind, metrics

    def _collect(self, st: dict, batch: Any, first: list[int]) -> dict[str, float]:
        """This batch's ordinary groups feed both buffers (used from the next batch on)."""
        G, ro = batch.rewards.shape[1], batch.ro
        ent = None if ro.entropies is None else (ro.entropies.sum(-1) / ro.lengths.clamp(min=1))  # (R,) mean entropy
        wrong = []
        for g in first:
            it, r, c = batch.items[g], batch.rewards[g].tolist(), batch.correct[g].tolist()
            wrong += [
                {"key": it.key, "item": it, "attempt": ro.texts[g * G + j]}
                for j in refine_candidates(r, False, self.mean_below, self.sample_below)
            ]
            j = pick_replay_row(c, r, None if ent is None else ent[g * G : (g + 1) * G].tolist(), self.min_reward)
            if j is not None:
                st["replay"][it.key] = {"item": it, "row": select_rows(ro, [g * G + j])}
            elif all(x > 0 for x in c):
                st["replay"].pop(it.key, None)  # solved by every sample now: nothing left to replay
        dropped = push_refine(st["refine"], st["refined"], wrong, self.capacity)
        return {
            "su01/refine_collected": float(len(wrong)),
            "su01/refine_buffer": float(len(st["refine"])),
            "su01/refine_overflow": float(dropped),
            "su01/replay_buffer": float(len(st["replay"])),
            "su01/refined_questions": float(len(st["refined"])),
        }
