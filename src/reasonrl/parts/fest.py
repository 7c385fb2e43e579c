"""FEST: a few demonstrations as a decaying DPO-style term beside RLVR (arXiv 2605.15012).

``L = L_GRPO(the RL batch) + alpha_e * L_sup(the step's demonstrations)`` (shared/specs/
distill-and-data.md section 5). :class:`FEST` takes part in the loop twice, through its methods:

* ``extend(ctx)`` (a second round, :mod:`~reasonrl.parts.protocol`): draws this step's
  ``demos_per_step`` demonstrations from its own cycled loader (a fixed set of ``n_demos``,
  reshuffled every pass, its cursor in the part's checkpointed state, so it never touches
  the RL prompt stream), samples G rollouts of each demo prompt with the current policy (the
  "semi-online" negatives), rewards them with the task's verifier, picks the rejected side
  (:func:`~reasonrl.losses.dpo.pick_rejected`) and scores both sides under the reference without
  grad. It adds no groups to the RL batch: the demo rollouts stay out of the GRPO term; the pairs
  travel in the part's channel on the batch (``batch.parts["fest"].values["pairs"]``).
* ``loss_term(...)`` (an auxiliary loss): the policy's log-probs of both sides with grad, and
  ``sum_j alpha_j * L_j / P`` over the batch's P pairs. Each pair is computed in the micro-batch that
  holds its *anchor* (a trained row of the RL batch, spread evenly), so it is counted once per pass
  whatever the micro-batch split, and its forward pass is split with the micro-batches.

Maths: :mod:`reasonrl.losses.dpo`. Every choice the abstract leaves open is a field with the spec's
default; the ones the spec is silent on are marked [inferred here].
"""

from __future__ import annotations

import random
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Iterator

import torch
from torch import Tensor

from ..data.demos import load_demos
from ..distill import encode_contexts
from ..errors import UserError
from ..losses.dpo import (
    ALL_CORRECT,
    DECAY_SCHEDULES,
    NEGATIVES,
    demo_weight,
    dpo_sigmoid,
    pick_rejected,
    sequence_logp,
    sft_nll,
)
from ..models.scoring import score_completions, trim_padding
from ..config.rules import Rule, above, at_least, one_of, within
from ..rollout import select_rows
from ..rollout.base import policy_tokens
from ..seeds import stable_seed
from ..tasks import Item, take_items
from .protocol import LossContext, RoundContext, register_part
from .strategy import Groups

__all__ = ["FEST", "FestPairs", "SUP_LOSSES", "REFERENCES", "demo_draws"]

SUP_LOSSES = ("dpo", "sft")
REFERENCES = ("initial", "behaviour")


@dataclass
class Tokens:
    """(N, P) left-padded prompts and (N, T) right-padded completions (the rollouts' layout)."""

    prompt_ids: Tensor
    prompt_mask: Tensor
    completion_ids: Tensor
    completion_mask: Tensor  # (N, T) what the forward attends to
    score_mask: Tensor | None = (
        None  # (N, T) what a sequence score sums: the policy's own tokens; None: completion_mask
    )

    def rows(self, idx: Tensor) -> "Tokens":
        return Tokens(
            self.prompt_ids[idx],
            self.prompt_mask[idx],
            self.completion_ids[idx],
            self.completion_mask[idx],
            None if self.score_mask is None else self.score_mask[idx],
        )


@dataclass
class FestPairs:
    """One batch's demonstration pairs (the fest channel's ``values["pairs"]``). ``chosen``: the k demonstrations;
    ``alpha`` (k,) their weights; per pair j (P pairs): ``demo`` (P,) its demonstration, ``rejected``
    its rollout's tokens (P rows; None with ``sup_loss="sft"``) and the reference sequence log-probs
    ``ref_chosen`` / ``ref_rejected`` (P,). With SFT the pairs are the demonstrations themselves."""

    chosen: Tokens
    alpha: Tensor  # (k,)
    demo: Tensor  # (P,) long
    rejected: Tokens | None = None
    ref_chosen: Tensor | None = None  # (P,)
    ref_rejected: Tensor | None = None  # (P,)
    metrics: dict[str, float] = field(default_factory=dict)

    @property
    def n_pairs(self) -> int:
        return len(self.demo)


def demo_draws(n_demos: int, first: int, k: int, seed: int) -> list[tuple[int, int]]:
    """Draws ``first .. first + k - 1`` of the cycled demo loader as (demo index, pass): pass
    ``e = draw // n_demos``, each pass a fresh permutation of the set seeded by (seed, e), so the
    order depends on the draw count alone (a resumed run continues it)."""
    out, perms = [], {}
    for draw in range(first, first + k):
        e = draw // n_demos
        if e not in perms:
            perms[e] = random.Random(stable_seed(seed, "fest-order", e)).sample(range(n_demos), n_demos)
        out.append((perms[e][draw % n_demos], e))
    return out


def encode_demos(tok, prompts: list[str], completions: list[str]) -> Tokens:
    """Demonstrations as token rows: prompts left-padded, completion + EOS right-padded (as the
    warm start's SFT rows: the model must learn to stop)."""
    p_ids, p_mask = encode_contexts(tok, prompts)  # (k, P)
    comps = [tok(c, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for c in completions]
    T = max(len(c) for c in comps)
    c_ids = torch.tensor([c + [tok.pad_token_id] * (T - len(c)) for c in comps])  # (k, T)
    c_mask = torch.tensor([[1] * len(c) + [0] * (T - len(c)) for c in comps])  # (k, T)
    return Tokens(p_ids, p_mask, c_ids, c_mask)


def _trimmed(t: Tokens) -> Tokens:
    """The rows without the padding columns none of them uses."""
    trimmed = trim_padding(t.prompt_ids, t.prompt_mask, t.completion_ids, t.completion_mask)
    return Tokens(*trimmed, None if t.score_mask is None else t.score_mask[:, : trimmed[3].shape[1]])


def _logp(model, t: Tokens, temperature: float, chunk_rows: int) -> tuple[Tensor, Tensor]:
    """(N, T) token log-probs of ``t``'s completions under ``model`` (grad as the caller's mode) and
    the (N, T) mask a sequence score sums (``score_mask``, else the completion's), padding columns trimmed."""
    t = _trimmed(t)
    lp, _ = score_completions(
        model,
        t.prompt_ids,
        t.prompt_mask,
        t.completion_ids,
        t.completion_mask,
        temperature=temperature,
        chunk_rows=chunk_rows,
        entropies=False,
    )
    return lp, (t.completion_mask if t.score_mask is None else t.score_mask).to(lp.device)


@contextmanager
def _behaviour(model) -> Iterator[Any]:
    """The policy as it is now (the behaviour policy of this step), in eval mode, without grad."""
    was = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield model
    finally:
        model.train(was)


@register_part("fest")
@dataclass(frozen=True)
class FEST:
    """FEST's supervised term on a few demonstrations (fields: the spec's defaults; see the module).

    ``coef`` alpha_0 = 1 and ``gamma`` 0.5 of ``decay="exponential"`` (``alpha_e = alpha_0 gamma^e``,
    e = completed passes over the demos; ``linear`` / ``cosine`` reach 0 after ``decay_passes`` E);
    ``beta`` = 0.1; ``sup_loss`` dpo | sft; ``reference`` initial (the frozen initial model) |
    behaviour (the policy that sampled this step, "semi-online"); ``length_norm``: l(y) is the token
    mean instead of the sum. The rest is [inferred here] (spec silent): ``n_demos`` the set's size
    (paper: 128), ``demos_per_step`` demos per step, ``demos`` a JSONL file
    (:mod:`reasonrl.data.demos`; None: the task's own ``Item.demo`` of ``n_demos`` train items),
    ``negatives`` one | all incorrect rollouts per demo, ``all_correct`` skip | lowest_likelihood,
    ``temperature`` of the log-probs (1: the untempered policy, as DPO and SFT are defined)."""

    AFTER = ("kdrl",)  # the order it ran in before the order was declared (parts/registry.py)

    coef: float = 1.0
    gamma: float = 0.5
    decay: str = "exponential"
    decay_passes: int = 8
    beta: float = 0.1
    sup_loss: str = "dpo"
    reference: str = "initial"
    length_norm: bool = False
    n_demos: int = 32
    demos_per_step: int = 4
    demos: str | None = None
    negatives: str = "one"
    all_correct: str = "skip"
    temperature: float = 1.0

    RULES: ClassVar[dict[str, Rule]] = {
        "coef": at_least(0),
        "gamma": within(0, 1),
        "decay": one_of(DECAY_SCHEDULES),
        "decay_passes": at_least(1),
        "beta": above(0),
        "sup_loss": one_of(SUP_LOSSES),
        "reference": one_of(REFERENCES),
        "n_demos": at_least(1),
        "demos_per_step": at_least(1),
        "demos": Rule(lambda v, _: v is None or Path(v).is_file(), "a JSONL file that exists, or null"),
        "negatives": one_of(NEGATIVES),
        "all_correct": one_of(ALL_CORRECT),
        "temperature": above(0),
    }

    @property
    def needs(self) -> frozenset[str]:
        """DPO against the initial model: the trainer keeps it (a frozen copy, or LoRA's adapters off); the
        supervised term scores the demonstrations with the policy inside the loss."""
        ref = self.sup_loss == "dpo" and self.reference == "initial"
        return frozenset({"reference", "policy_in_loss"} if ref else {"policy_in_loss"})

    def weight(self, passes: int) -> float:
        return demo_weight(passes, self.coef, self.gamma, self.decay, self.decay_passes)

    # ------------------------------------------------------------ the demonstration set
    def demo_set(self, task: Any, seed: int) -> list[Item]:
        """The fixed demo set: ``n_demos`` rows of ``demos`` (a seeded sample when the file has more),
        or the task's own demonstrations of ``n_demos`` distinct train items (their own seeded stream)."""
        if self.demos is None:
            items = take_items(task, "train", self.n_demos, seed=stable_seed(seed, "fest-demos"))
            missing = [it.key for it in items if not it.demo]
            if missing:
                raise UserError(
                    f"fest: task {task.name!r} has no demonstration for item {missing[0]!r}; "
                    "give your own with fest.demos=FILE.jsonl (schema: reasonrl.data.demos)"
                )
            return items
        rows = load_demos(self.demos)
        keep = (
            range(len(rows))
            if len(rows) <= self.n_demos
            else sorted(random.Random(stable_seed(seed, "fest-demos")).sample(range(len(rows)), self.n_demos))
        )
        out = []
        for i in keep:
            d = rows[i]
            answer = d.answer if d.answer is not None else task.extract_answer(d.completion)
            if answer is None:
                raise UserError(
                    f"{self.demos}:{d.line}: the demonstration has no 'answer' and task {task.name!r} "
                    f"finds none in its completion {d.completion[-60:]!r}; add an 'answer' field"
                )
            out.append(Item(key=d.key or d.prompt, prompt=d.prompt, answer=answer, demo=d.completion))
        return out

    # ------------------------------------------------------------ the round: this step's pairs
    def extend(self, ctx: RoundContext) -> tuple[Groups, dict[str, float]]:
        G = ctx.group_size
        demos = ctx.cache.get("demos")
        if demos is None:
            demos = ctx.cache["demos"] = self.demo_set(ctx.task, ctx.seed)
        st = ctx.state
        first = st.setdefault("drawn", 0)
        draws = demo_draws(len(demos), first, self.demos_per_step, ctx.seed)
        st["drawn"] = first + len(draws)
        items = [demos[i] for i, _ in draws]
        alpha = torch.tensor([self.weight(e) for _, e in draws])  # (k,)
        chosen = encode_demos(ctx.tok, ctx.formatter.render_all([it.prompt for it in items]), [it.demo for it in items])
        metrics = {"fest/demos": float(len(items)), "fest/pass": float(draws[0][1]), "fest/alpha": float(alpha.mean())}
        if self.sup_loss == "sft":
            pairs = FestPairs(chosen=chosen, alpha=alpha, demo=torch.arange(len(items)))
        else:
            pairs = self._dpo_pairs(ctx, items, chosen, alpha, first)
        metrics.update({"fest/pairs": float(pairs.n_pairs), **pairs.metrics})
        empty = select_rows(ctx.batch.ro, [])
        none = torch.zeros(0, G)
        return Groups(items=[], ro=empty, rewards=none, correct=none, data={"pairs": pairs}), metrics

    def _dpo_pairs(self, ctx: RoundContext, items: list[Item], chosen: Tokens, alpha: Tensor, first: int) -> FestPairs:
        """G rollouts per demo prompt (keyed by the draw count and "fest"), the rejected side picked
        among them, and the reference's sequence log-probs of both sides."""
        ro = ctx.sample(items, [it.prompt for it in items], tag="fest", first=first)
        _, correct, _ = ctx.reward(items, ro)  # (k, G) raw correctness
        G = correct.shape[1]
        own = policy_tokens(ro)  # (R, T) the tokens the policy sampled (an episode's observations are not)
        behaviour = sequence_logp(ro.logprobs, own, self.length_norm).view(-1, G)  # (k, G)
        demo, col = pick_rejected(correct, behaviour, self.negatives, self.all_correct)  # (P,), (P,)
        rows = demo * G + col  # (P,) rows of ro
        rejected = Tokens(
            ro.prompt_ids[rows], ro.prompt_mask[rows], ro.completion_ids[rows], ro.completion_mask[rows], own[rows]
        )
        metrics = {
            "fest/demo_accuracy": float(correct.mean()),
            "fest/demos_all_correct": float((correct.min(-1).values > 0).sum()),
        }
        pairs = FestPairs(chosen=chosen, alpha=alpha, demo=demo, rejected=rejected, metrics=metrics)
        if pairs.n_pairs:
            pairs.ref_chosen, pairs.ref_rejected = self._reference(ctx, chosen.rows(demo), rejected)
        return pairs

    def _reference(self, ctx: RoundContext, chosen: Tokens, rejected: Tokens) -> tuple[Tensor, Tensor]:
        """(P,) reference sequence log-probs of the chosen and rejected sides, without grad."""
        if self.reference == "initial":
            if ctx.reference is None:
                raise RuntimeError(
                    "fest.reference=initial needs the trainer's reference model "
                    "(the part's needs include 'reference', so the trainer keeps one)"
                )
            scope = ctx.reference()
        else:
            scope = _behaviour(ctx.policy)
        with torch.no_grad(), scope as ref:
            out = [
                sequence_logp(*_logp(ref, t, self.temperature, ctx.micro), self.length_norm).cpu()
                for t in (chosen, rejected)
            ]
        return out[0], out[1]

    # ------------------------------------------------------------ the loss term
    def loss_term(self, ctx: LossContext) -> tuple[Tensor, dict[str, float]]:
        pairs: FestPairs | None = ctx.data.values.get("pairs")
        batch, rows, model = ctx.batch, ctx.rows, ctx.model
        device = next(model.parameters()).device
        zero = torch.zeros((), device=device)
        if pairs is None or pairs.n_pairs == 0:
            return zero, {}
        here = torch.isin(anchors(batch.loss_mask, pairs.n_pairs), rows.cpu())  # (P,) pairs of this micro-batch
        if not bool(here.any()):
            return zero, {"fest/sup_term": 0.0}
        j = here.nonzero().squeeze(-1)  # (n,)
        alpha = pairs.alpha[pairs.demo[j]].to(device)  # (n,)
        # P pairs, times this minibatch's share of the batch: the policy loss is normalised per
        # minibatch, so a fixed P would weigh the term 1/M as much with M minibatches (issue #26)
        n_pairs = pairs.n_pairs * ctx.minibatch_share()
        lp_c, mask_c = _logp(model, pairs.chosen.rows(pairs.demo[j]), self.temperature, len(j))  # (n, T) with grad
        if self.sup_loss == "sft":
            per = sft_nll(lp_c, mask_c)  # (n,)
            loss = (alpha * per).sum() / n_pairs
            return loss, {
                "fest/sup_term": float(loss.detach()),
                "fest/sft_nll_term": float(per.detach().sum()) / n_pairs,
            }
        pol_c = sequence_logp(lp_c, mask_c, self.length_norm)  # (n,)
        pol_r = sequence_logp(*_logp(model, pairs.rejected.rows(j), self.temperature, len(j)), self.length_norm)  # (n,)
        per, m = dpo_sigmoid(pol_c, pairs.ref_chosen[j].to(device), pol_r, pairs.ref_rejected[j].to(device), self.beta)
        loss = (alpha * per).sum() / n_pairs
        out = {"fest/sup_term": float(loss.detach()), "fest/dpo_loss_term": float(per.detach().sum()) / n_pairs}
        out.update({f"fest/{k}_term": float(v.sum()) / n_pairs for k, v in m.items()})
        return loss, out


def anchors(loss_mask: Tensor, n_pairs: int) -> Tensor:
    """(R, T) loss mask of the RL batch -> (P,) each pair's anchor row: the trained rows (any token the
    loss sees), spread evenly over the pairs; empty when no row is trained (no micro-batch runs)."""
    live = (loss_mask.sum(-1) > 0).nonzero().squeeze(-1)  # (L,)
    if not len(live):
        return torch.zeros(0, dtype=torch.long)
    return live[(torch.arange(n_pairs) * len(live)) // n_pairs]  # (P,)
