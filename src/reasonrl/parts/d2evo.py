"""D2Evo: anchor mining, a Questioner on the same backbone, and the Solver's rebuilt pool (arXiv 2605.17037).

One recipe part, :class:`D2Evo`, plays the paper's three steps through the loop's generic seams:

* ``before_step(ctx)`` (at the first step of each iteration of ``iteration_steps`` steps): pass-rate
  estimation over the real pool (``data.pool``; ``estimate_samples`` Solver samples per problem, no
  gradient), anchors = real problems with p_hat in [p_lo, p_hi], and the Solver's pool = anchors +
  the generated problems accepted during the previous iteration (their difficulty was measured
  against a recent Solver; older ones leave).
* As the run's selector (``build`` -> :class:`~reasonrl.data.d2evo.D2EvoState`): only anchors are
  admitted to the Solver's first round (every pool item before any anchor exists).
* ``extend(ctx)`` (a second round, every step): the Questioner.
  ``anchors_per_step`` anchors are put in the role prompt (``template``), G = group_size questions are
  sampled per anchor with the same weights, each is read by the task (``task.generated_item``: the
  task's format, and its true answer when computable), the Solver answers it ``solver_samples`` times
  and R_Q = 1[valid] (1 - 2|p_hat - p*|) - eta * sim(q', anchor) (invalid: -1) is its reward. The round
  also adds Solver groups on the pool's generated problems (labels: the majority pseudo-labels), in
  proportion to their share of the pool. Both roles' groups train in the same update as the Solver's
  first round (joint, not alternating), GRPO advantages within each group, so each role's rewards
  are normalised apart (envs-selfplay-eval.md section 0's role-wise normalisation).

Every constant is [inferred] by the spec (distill-and-data.md section 11 (b)): see the fields.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from ..data.d2evo import D2EvoState, Verdict, accepted, judge, ngram_similarity, pass_rates, questioner_rewards
from ..rollout import concat_rollouts
from ..config.rules import Rule, at_least, one_of, within
from ..tasks import is_correct
from ..text import fill_slots
from ..tasks.protocols import ReadsGenerated, require
from .protocol import RoundContext, register_part
from .strategy import Groups

# The spec's Questioner input: the anchor plus an instruction to write a new problem of similar difficulty.
# The template ends with the anchor's prompt so a small model continues in the task's format.
DEFAULT_TEMPLATE = "write a new problem as hard as this one:\n{prompt}"


def role_prompt(template: str, prompt: str, answer: str) -> str:
    """``template`` with ``{prompt}`` (the anchor's prompt) and ``{answer}`` (its gold answer) filled in one pass."""
    return fill_slots(template, prompt=prompt, answer=answer)


@register_part("d2evo")
@dataclass(frozen=True)
class D2Evo:
    """D2Evo's knobs; every default is the spec's [inferred] value unless said otherwise.

    ``iteration_steps``: steps per outer iteration (estimation and a new pool at its first step).
    ``estimate_samples`` / ``solver_samples``: n Solver samples per real / generated problem (8).
    ``p_lo`` / ``p_hi``: the difficulty band for anchors and accepted problems ([0.2, 0.8]).
    ``p_star``, ``eta``, ``invalid``: R_Q's target (0.5), novelty weight (0.5) and invalid reward (-1).
    ``floor``: a majority pseudo-label needs this share of the samples (0.3).
    ``use_gold``: judge generated problems by the task's computed answer instead of the majority
    vote (off: the paper's majority pseudo-labels). ``ngram``: character n-gram size of sim (3).
    ``anchors_per_step``: anchors given to the Questioner per step, G questions each [ours].
    ``template``: the Questioner's role prompt, slots ``{prompt}`` and ``{answer}`` [ours].
    ``parse``: how a question is read from the Questioner's text (``prefix`` | ``line``) [ours].
    ``weight``: loss weight of the Questioner's rows (1: as the Solver's) [ours].
    """

    AFTER = ("egrsd",)  # the order it ran in before the order was declared (parts/registry.py)

    iteration_steps: int = 10
    estimate_samples: int = 8
    solver_samples: int = 8
    p_lo: float = 0.2
    p_hi: float = 0.8
    p_star: float = 0.5
    eta: float = 0.5
    invalid: float = -1.0
    floor: float = 0.3
    use_gold: bool = False
    ngram: int = 3
    anchors_per_step: int = 4
    template: str = DEFAULT_TEMPLATE
    parse: str = "prefix"
    weight: float = 1.0
    needs: ClassVar[frozenset[str]] = frozenset({"pool"})  # anchors are mined from a finite real pool (data.pool=N)

    task_needs: ClassVar[tuple[type, ...]] = (ReadsGenerated,)  # the questioner's problems read back as items
    RULES: ClassVar[dict[str, Rule]] = {
        **{
            k: at_least(1)
            for k in ("iteration_steps", "estimate_samples", "solver_samples", "anchors_per_step", "ngram")
        },
        "p_lo": within(0, 1),
        "p_hi": Rule(lambda v, c: c.get("p_lo", 0) <= v <= 1, lambda c: f"in [d2evo.p_lo = {c.get('p_lo')}, 1]"),
        "p_star": within(0, 1),
        "eta": at_least(0),
        "floor": within(0, 1),
        "weight": at_least(0),
        "parse": one_of(("prefix", "line")),
        "template": Rule(lambda v, _: "{prompt}" in v, "text containing {prompt} (the anchor's prompt)"),
    }

    def build(self, seed: int) -> D2EvoState:
        return D2EvoState()

    # ---------------------------------------------------------------- each iteration: estimate, mine, rebuild
    def before_step(self, ctx: RoundContext) -> tuple[None, dict[str, float]]:
        """At the first step of an iteration: estimate the real pool's pass rates, mine anchors and
        rebuild the Solver's pool (nothing on the iteration's other steps)."""
        st, it = ctx.state, ctx.step // self.iteration_steps
        if st.iteration == it:
            return None, {}
        real = list(ctx.pool)
        p = self.estimate(ctx, real, it)  # (N,)
        st.rebuild(it, real, p, self.p_lo, self.p_hi)
        st.pending = {
            "d2evo/est_pass_rate_mean": float(p.mean()),
            "d2evo/est_rows": float(len(real) * self.estimate_samples),
        }  # logged with the step's selection
        return None, {}

    def estimate(self, ctx: RoundContext, items: list[Any], iteration: int) -> torch.Tensor:
        """p_hat of each item (N,) from ``estimate_samples`` Solver samples against its gold answer."""
        n = self.estimate_samples
        ro = ctx.sample(items, [it.prompt for it in items], tag=f"d2evo_est{iteration}", first=0, n=n)
        ok = [
            [is_correct(ctx.task.verify(t, it.answer, it.meta)) for t in ro.texts[i * n : (i + 1) * n]]
            for i, it in enumerate(items)
        ]
        return pass_rates(torch.tensor(ok, dtype=torch.float).view(len(items), n))  # (N,)

    # ---------------------------------------------------------------- every step: a round of two roles
    def extend(self, ctx: RoundContext) -> tuple[Groups | None, dict[str, float]]:
        """The Questioner's groups (rewarded by R_Q), then Solver groups on generated problems."""
        require(ctx.task, ReadsGenerated, "d2evo", "the built-in arithmetic task can")
        batch = ctx.batch
        st, G = ctx.state, batch.rewards.shape[1]
        metrics, st.pending = {**st.pending, **_pool_metrics(st)}, {}
        parts = []
        if st.anchors:
            parts.append(self.questioner_groups(ctx, st, G, metrics))
        n_first = int((batch.group_kinds() == 0).sum())
        gen = self.generated_groups(ctx, st, n_first, metrics)
        if gen is not None:
            parts.append(gen)
        if not parts:  # no anchors and no generated problems yet: no groups, the pool's counts still reported
            return None, metrics
        groups = Groups(
            items=[i for g in parts for i in g.items],
            ro=concat_rollouts([g.ro for g in parts], ctx.tok.pad_token_id),
            rewards=torch.cat([g.rewards for g in parts]),
            correct=torch.cat([g.correct for g in parts]),
            weight=torch.cat([g.weight for g in parts]),
        )
        return groups, metrics

    def questioner_groups(self, ctx: RoundContext, st: D2EvoState, G: int, metrics: dict[str, float]) -> Groups:
        """``anchors_per_step`` anchors (cycling through the anchor list), G questions each, R_Q."""
        real = {r.key: r for r in ctx.pool}
        k = min(self.anchors_per_step, len(st.anchors))
        anchors = [real[st.anchors[(st.q_cursor + j) % len(st.anchors)]] for j in range(k)]
        st.q_cursor = (st.q_cursor + k) % len(st.anchors)
        prompts = [ctx.formatter.rewrite(a.prompt, lambda p: role_prompt(self.template, p, a.answer)) for a in anchors]  # noqa: B023 - rewrite() calls the edit at once, in this iteration
        ro = ctx.sample(anchors, prompts, tag=f"d2evo_q{ctx.step}", first=0)
        rewards, ok, m = self.score_questions(ctx, st, anchors, ro.texts, G)
        metrics.update(m)
        items = [dataclasses.replace(a, prompt=p) for a, p in zip(anchors, prompts)]
        return Groups(items=items, ro=ro, rewards=rewards, correct=ok, weight=torch.full((k * G,), float(self.weight)))

    def score_questions(self, ctx: RoundContext, st: D2EvoState, anchors: list[Any], texts: list[str], G: int):
        """R_Q (A, G), accepted 0/1 (A, G) and metrics for the Questioner's ``texts`` (A * G rows)."""
        K = len(texts)
        qs = [ctx.task.generated_item(t, self.parse) for t in texts]
        parsed = [i for i, q in enumerate(qs) if q is not None]
        verdicts = dict(zip(parsed, self.solve(ctx, [qs[i] for i in parsed])))
        valid, p_hat, sim = torch.zeros(K, dtype=torch.bool), torch.zeros(K), torch.zeros(K)
        for i, v in verdicts.items():
            valid[i], p_hat[i] = v.valid, v.p_hat
            sim[i] = ngram_similarity(qs[i].key, anchors[i // G].key, self.ngram)
        r_q = questioner_rewards(valid, p_hat, sim, self.p_star, self.eta, self.invalid)  # (K,)
        held = torch.tensor([q is not None and bool(q.meta.get("held_out")) for q in qs])  # (K,)
        fresh = torch.tensor([q is not None and q.key not in st.pass_rates for q in qs])  # (K,) not a real problem
        ok = accepted(valid, p_hat, self.p_lo, self.p_hi) & ~held & fresh  # (K,)
        for i in ok.nonzero().flatten().tolist():
            st.accepted[qs[i].key] = {"text": qs[i].key, "label": verdicts[i].label, "p_hat": verdicts[i].p_hat}
        m = _question_metrics(r_q, valid, p_hat, sim, ok, len(parsed), held, list(verdicts.values()))
        m["d2evo/accepted_waiting"] = float(len(st.accepted))
        return r_q.view(-1, G), ok.float().view(-1, G), m

    def solve(self, ctx: RoundContext, questions: list[Any]) -> list[Verdict]:
        """The Solver's ``solver_samples`` answers to each well-formed question, judged (no gradient)."""
        if not questions:
            return []
        n = self.solver_samples
        ro = ctx.sample(questions, [q.prompt for q in questions], tag=f"d2evo_solve{ctx.step}", first=0, n=n)
        out = []
        for i, q in enumerate(questions):
            texts = ro.texts[i * n : (i + 1) * n]
            answers = [ctx.task.extract_answer(t) for t in texts]
            correct = [is_correct(ctx.task.verify(t, q.answer, q.meta)) for t in texts]
            out.append(judge(answers, correct, q.answer, self.use_gold, self.floor))
        return out

    def generated_groups(
        self, ctx: RoundContext, st: D2EvoState, n_first: int, metrics: dict[str, float]
    ) -> Groups | None:
        """Solver groups on the pool's generated problems: as many per step as their share of the pool
        gives next to the ``n_first`` anchor groups (round(n_first * generated / anchors), at most all)."""
        keys = list(st.generated)
        n = min(len(keys), round(n_first * len(keys) / max(len(st.anchors), 1)))
        metrics["d2evo/solver_generated_groups"] = float(n)
        if not n:
            return None
        picked = [keys[(st.g_cursor + j) % len(keys)] for j in range(n)]
        st.g_cursor = (st.g_cursor + n) % len(keys)
        items = [_generated_item(ctx.task, st.generated[k]) for k in picked]
        ro = ctx.sample(items, [it.prompt for it in items], tag=f"d2evo_gen{ctx.step}", first=0)
        rewards, correct, _ = ctx.reward(items, ro)  # (n, G) each: against the pseudo-labels
        metrics["d2evo/solver_generated_acc"] = float(correct.mean())
        return Groups(items=items, ro=ro, rewards=rewards, correct=correct, weight=torch.ones(len(ro.texts)))


def _generated_item(task: Any, rec: dict[str, Any]) -> Any:
    """A pool entry of a generated problem: the task's item with the label it was accepted with (the
    majority pseudo-label, or the computed answer with use_gold)."""
    item = task.generated_item(rec["text"], "line")
    return dataclasses.replace(item, answer=rec["label"], meta={**item.meta, "d2evo_generated": True})


def _pool_metrics(st: D2EvoState) -> dict[str, float]:
    return {
        "d2evo/iteration": float(st.iteration),
        "d2evo/anchors": float(len(st.anchors)),
        "d2evo/pool_generated": float(len(st.generated)),
        "d2evo/pool_size": float(len(st.anchors) + len(st.generated)),
        "d2evo/pool_fallback": float(not st.anchors),
    }  # no anchor: the Solver draws the whole real pool


def _question_metrics(r_q, valid, p_hat, sim, ok, n_parsed, held, verdicts) -> dict[str, float]:
    """The Questioner's step: reward, parse / valid / accepted fractions, difficulty and novelty of the
    valid ones, and how often a majority label was the true answer (a diagnostic, never trained on)."""
    K, nv = len(r_q), int(valid.sum())
    truth = [v.label_true for v in verdicts if v.valid and v.label_true is not None]
    out = {
        "d2evo/q_reward_mean": float(r_q.mean()),
        "d2evo/q_parsed_frac": n_parsed / K,
        "d2evo/q_valid_frac": nv / K,
        "d2evo/q_accepted_frac": float(ok.float().mean()),
        "d2evo/q_held_out": float(held.sum()),
    }
    if nv:
        out.update({"d2evo/q_p_hat_mean": float(p_hat[valid].mean()), "d2evo/q_sim_mean": float(sim[valid].mean())})
    if truth:
        out["d2evo/q_label_true_frac"] = sum(truth) / len(truth)
    return out
