"""EvoEnv as one recipe part: the policy writes the environments that train it (spec envs-selfplay-eval.md
section 2; every mechanism below is [inferred] unless the spec tags it [paper]).

One shared policy plays three parts every step:

* ``draw`` (the first round's items): solver instances from the pool, an environment and an instance
  seed per task position; the ``evoenv`` task grades them with the environment's ``score`` (sandbox).
* ``extend`` (the generator's round): ``proposals`` prompts, each conditioned on K short reference
  environments from the pool, G environments each. Every environment goes through L1-L3
  (:func:`reasonrl.tasks.env_check.check_envs`, sandbox), novelty (5-gram Jaccard against the pool and
  the batch), the L4 review by the same policy (``review=policy``: ``review_samples`` yes/no answers,
  majority), and L5 calibration: ``estimate_instances`` x ``estimate_samples`` solver answers (no
  gradient), p_hat. Admitted inside ``[p_lo, p_hi]``. Reward: :func:`reasonrl.rewards.evoenv.evoenv_generator_reward`.
* ``score_batch``: each environment's solver accuracy this step is one check of its EMA p_hat; the
  pool then rotates (too easy or never solved for ``patience`` checks: retired; capacity: oldest out).
* ``shape_advantages``: advantages normalised per role (TRR++ over the solve and generate buckets).

The pool is the part's state (checkpointed, resumed exactly); it starts from the task's starting
environments (the ten seeds [paper], and for the tiny model the grammar catalogue). Nothing an
environment contains ever runs outside the sandbox.
"""

from __future__ import annotations

import ast
import random
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from ..advantages.buckets import role_task_advantages
from ..errors import UserError
from ..rewards.evoenv import GENERATOR_REWARDS, PAID, evoenv_generator_reward, in_band
from ..rewards.user import load_function
from ..eval.audit_models import make_embedder
from ..config.rules import Rule, at_least, one_of, within
from ..seeds import stable_seed
from ..tasks import Item
from ..tasks.env_check import EnvCheck, EnvReport, check_envs, novel
from ..tasks.env_pool import EnvPool
from ..tasks.evoenv import TEST_SEED, EvoEnvTask, generate_prompt, parse_review, review_prompt, solve_item
from ..tasks.limits import played_task
from .protocol import BatchContext, RoundContext, register_part
from .strategy import Groups

__all__ = ["EvoEnv", "env_name"]

STAGES = (
    "parse",
    "size",
    "banned",
    "interface",
    "run",
    "determinism",
    "diversity",
    "consistency",
    "degenerate",
    "leak",
    "novelty",
    "review",
    "calibration",
)


def env_name(code: str) -> str:
    """The environment's ``name`` (a constant string given in its class body), else its class name."""
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.ClassDef):
            for stmt in node.body:
                if isinstance(stmt, ast.Assign):
                    for target in stmt.targets:
                        pairs = (
                            zip(target.elts, stmt.value.elts)
                            if isinstance(target, ast.Tuple) and isinstance(stmt.value, ast.Tuple)
                            else [(target, stmt.value)]
                        )
                        for t, v in pairs:
                            if (
                                getattr(t, "id", "") == "name"
                                and isinstance(v, ast.Constant)
                                and isinstance(v.value, str)
                            ):
                                return v.value
            return node.name
    return "?"


@register_part("evoenv")
@dataclass(frozen=True)
class EvoEnv:
    """EvoEnv's generator/solver self-play (thresholds [inferred], the spec's defaults)."""

    PHASE = "selfplay"

    proposals: int = 2  # generator prompts per step, G environments each
    estimate_instances: int = 4  # m instances for calibration
    estimate_samples: int = 2  # n solver answers per instance
    p_lo: float = 0.1
    p_hi: float = 0.8
    reward: str = "learnability"  # or band
    paid: str = (
        "admitted"  # learnability paid to admitted environments only (spec 2 (b)); calibrated: any p_hat (pre-#41)
    )
    review: str = "policy"  # L4 by the policy itself, by a judge callable, or off
    review_samples: int = 3
    judge: str = ""  # review=judge: "file.py:function", (code, two rendered instances) -> bool
    novelty_tau: float = 0.5  # the spec's tau_J
    embed: str = "off"  # also novelty by embedding cosine: off | minilm (the audit's) | a sentence-transformers dir
    embed_tau: float = 0.9  # the spec's tau_cos
    capacity: int = 64
    ema: float = 0.2
    patience: int = 3

    RULES: ClassVar[dict[str, Rule]] = {
        "proposals": at_least(1),
        "estimate_instances": at_least(1),
        "estimate_samples": at_least(1),
        "p_lo": within(0, 1),
        "p_hi": Rule(lambda v, c: c.get("p_lo", 0) <= v <= 1, lambda c: f"in [evoenv.p_lo = {c.get('p_lo')}, 1]"),
        "reward": one_of(GENERATOR_REWARDS),
        "paid": one_of(PAID),
        "review": one_of(("policy", "judge", "off")),
        "review_samples": at_least(1),
        "judge": Rule(lambda v, c: c.get("review") != "judge" or ":" in v, "'file.py:function' when review=judge"),
        "novelty_tau": within(0, 1, open_lo=True),
        "embed_tau": within(0, 1, open_lo=True),
        "capacity": at_least(1),
        "ema": within(0, 1, open_lo=True),
        "patience": at_least(1),
    }

    def _task(self, ctx: Any) -> EvoEnvTask:
        return played_task(
            ctx.task,
            EvoEnvTask,
            "recipe part 'evoenv' plays EvoEnv's environment world: train it on --task evoenv, not {name}",
        )

    def _pool(self, ctx: Any) -> EnvPool:
        if "pool" not in ctx.state:
            ctx.state["pool"] = []
            pool = EnvPool(ctx.state["pool"], capacity=10**9)
            for env in self._task(ctx).envs:
                pool.add(
                    env["code"],
                    name=env["name"],
                    seed=True,
                    step=0,
                    p_hat=None,
                    difficulty=self._task(ctx).config.difficulty,
                )
        return EnvPool(ctx.state["pool"], capacity=self.capacity, ema=self.ema, p_hi=self.p_hi, patience=self.patience)

    # ---------------------------------------------------------------- the solver's instances
    def draw(self, ctx: RoundContext, n: int) -> tuple[list[Item], dict[str, float]]:
        """``n`` instances, each a seeded (environment, instance seed) pick by task position; an
        environment that fails to render a fresh instance is retired and the pick falls to a seed one."""
        task, pool = self._task(ctx), self._pool(ctx)
        rngs = [random.Random(stable_seed(ctx.seed, "evoenv-draw", ctx.position + i)) for i in range(n)]
        picks = [(pool.pick(rng), rng.randrange(TEST_SEED)) for rng in rngs]
        rendered, failed = task.render(picks), 0
        for k, r in enumerate(rendered):
            if r is None:
                env = picks[k][0]
                if env["seed"]:
                    raise RuntimeError(
                        f"evoenv: the starting environment {env['name']!r} failed to render seed {picks[k][1]}"
                    )
                if pool.get(env["id"]) is not None:
                    pool.entries.remove(env)
                ctx.state["draw_failures"] = ctx.state.get("draw_failures", 0) + 1
                failed += 1
                picks[k] = (rngs[k].choice([e for e in pool.entries if e["seed"]]), picks[k][1])
                rendered[k] = task.render([picks[k]])[0]
        items = [solve_item(env, r, s) for (env, s), r in zip(picks, rendered)]
        # this draw's failed renders (evoenv/draw_failures, the extend round's metric, counts the run's)
        return items, {"evoenv/draw_failed": float(failed)}

    # ---------------------------------------------------------------- the generator's round
    def extend(self, ctx: RoundContext) -> tuple[Groups, dict[str, float]]:
        task, pool, G = self._task(ctx), self._pool(ctx), ctx.group_size
        items = self._generator_items(ctx, pool, task)
        ro = ctx.sample(items, [it.prompt for it in items], tag=f"evoenv-generate-{ctx.step}", first=0)
        codes = [t.strip("\n") + "\n" for t in ro.texts]
        reports = check_envs(codes, EnvCheck())
        self._novelty(ctx, codes, reports, pool)
        if self.review == "policy":
            self._review(ctx, codes, reports)
        elif self.review == "judge":
            self._judge(ctx, codes, reports)
        p_hat = self._calibrate(ctx, task, codes, reports)
        rewards = torch.tensor(
            [
                evoenv_generator_reward(rep.level, p_hat.get(r), self.reward, self.p_lo, self.p_hi, self.paid)
                for r, rep in enumerate(reports)
            ]
        )
        admitted = [r for r in sorted(p_hat) if in_band(p_hat[r], self.p_lo, self.p_hi)]
        for r in sorted(p_hat):
            if r not in admitted:
                reports[r] = EnvReport(False, "calibration", f"p_hat {p_hat[r]:.2f} outside the band")
        for r in admitted:
            pool.add(
                codes[r],
                name=env_name(codes[r]),
                seed=False,
                step=ctx.step + 1,
                p_hat=p_hat[r],
                difficulty=task.config.difficulty,
            )
        metrics = self._metrics(reports, p_hat, admitted, rewards, pool, ctx.state)
        ok = torch.tensor([float(r in admitted) for r in range(len(codes))])
        return Groups(items=items, ro=ro, rewards=rewards.view(-1, G), correct=ok.view(-1, G)), metrics

    def _generator_items(self, ctx: RoundContext, pool: EnvPool, task: EvoEnvTask) -> list[Item]:
        short = [e["code"] for e in pool.entries if len(e["code"]) <= task.config.ref_chars]
        items = []
        for j in range(self.proposals):
            rng = random.Random(stable_seed(ctx.seed, "evoenv-refs", ctx.position, j))
            refs = rng.sample(short, min(task.config.refs, len(short)))
            items.append(
                Item(
                    key=f"evoenv:generate:{ctx.position}:{j}",
                    prompt=generate_prompt(refs),
                    answer="",
                    meta={"role": "generate"},
                )
            )
        return items

    def _novelty(self, ctx: RoundContext, codes: list[str], reports: list[EnvReport], pool: EnvPool) -> None:
        live = [r for r, rep in enumerate(reports) if rep.ok]
        embed = None
        if self.embed != "off" and live:
            if "embedder" not in ctx.cache:  # loaded once per run
                ctx.cache["embedder"] = make_embedder(None if self.embed == "minilm" else self.embed)
            embed = ctx.cache["embedder"]
        verdicts = novel(
            [codes[r] for r in live],
            [e["code"] for e in pool.entries],
            tau=self.novelty_tau,
            embed=embed,
            cos_tau=self.embed_tau,
        )
        for r, (fresh, top) in zip(live, verdicts):
            if not fresh:
                reports[r] = EnvReport(False, "novelty", f"similarity {top:.2f}")

    def _judge(self, ctx: RoundContext, codes: list[str], reports: list[EnvReport]) -> None:
        """L4 by the user's judge callable (an LLM client, a rule): (code, two rendered instances) -> bool."""
        if "judge" not in ctx.cache:  # a user's file, loaded as a user's reward is
            ctx.cache["judge"] = load_function(self.judge)
        for r, rep in enumerate(reports):
            if rep.ok:
                verdict = ctx.cache["judge"](codes[r], list(rep.samples[:2]))
                if not isinstance(verdict, bool):
                    raise UserError(f"evoenv.judge {self.judge!r} returned {verdict!r}, not True or False")
                if not verdict:
                    reports[r] = EnvReport(False, "review", "the judge says no")

    def _review(self, ctx: RoundContext, codes: list[str], reports: list[EnvReport]) -> None:
        """L4: the policy, as reviewer, says yes or no on the code and two rendered instances (majority)."""
        live = [r for r, rep in enumerate(reports) if rep.ok]
        if not live:
            return
        items = [
            Item(
                key=f"evoenv:review:{r}",
                prompt=review_prompt(codes[r], reports[r].samples[:2]),
                answer="",
                meta={"role": "review"},
            )
            for r in live
        ]
        n = self.review_samples
        ro = ctx.sample(items, [it.prompt for it in items], tag=f"evoenv-review-{ctx.step}", first=0, n=n)
        for i, r in enumerate(live):
            votes = [parse_review(t) for t in ro.texts[i * n : (i + 1) * n]]
            if sum(v is True for v in votes) * 2 <= n:
                reports[r] = EnvReport(False, "review", f"{sum(v is True for v in votes)} of {n} reviews say yes")
        ctx.state["reviews"] = ctx.state.get("reviews", 0) + len(live)

    def _calibrate(
        self, ctx: RoundContext, task: EvoEnvTask, codes: list[str], reports: list[EnvReport]
    ) -> dict[int, float]:
        """L5: p_hat of every environment still standing, from m instances x n solver answers."""
        live = [r for r, rep in enumerate(reports) if rep.ok]
        if not live:
            return {}
        m, n = self.estimate_instances, self.estimate_samples
        probs = [
            solve_item({"id": f"candidate{r}", "code": codes[r]}, s, k)
            for r in live
            for k, s in enumerate(reports[r].samples[:m])
        ]
        ro = ctx.sample(probs, [p.prompt for p in probs], tag=f"evoenv-calibrate-{ctx.step}", first=0, n=n)
        metas = [p.meta for p in probs for _ in range(n)]
        task.prepare(ro.texts, metas)
        scores = [task.verify(t, "", meta) for t, meta in zip(ro.texts, metas)]
        out, start = {}, 0
        for r in live:
            count = min(m, len(reports[r].samples)) * n
            out[r] = sum(scores[start : start + count]) / count
            start += count
        return out

    # ---------------------------------------------------------------- rotation and advantages
    def score_batch(self, ctx: BatchContext) -> tuple[None, dict[str, float]]:
        """Each environment's solver accuracy in this step's first round: one check of its EMA."""
        pool, acc = self._pool(ctx), {}
        for b, item in enumerate(ctx.items):
            if int(ctx.kinds[b]) == 0 and item.meta.get("role") == "solve":
                acc.setdefault(item.meta["env"], []).append(ctx.correct[b])
        for eid, rows in acc.items():
            pool.observe(eid, float(torch.cat([r.view(-1) for r in rows]).float().mean()))
        gone = pool.rotate()
        ctx.state["retired"] = ctx.state.get("retired", 0) + len(gone)
        return None, {
            **pool.stats(),
            "evoenv/retired_total": float(ctx.state["retired"]),
            "evoenv/draw_failures": float(ctx.state.get("draw_failures", 0)),
        }

    def shape_advantages(self, adv: torch.Tensor, ctx: BatchContext) -> tuple[torch.Tensor, dict[str, float]]:
        """TRR++ per role: REINFORCE++ within the solve rows and within the generate rows."""
        B, G = ctx.rewards.shape
        keys = [it.meta.get("role", "solve") for it in ctx.items for _ in range(G)]
        return role_task_advantages(ctx.rewards.reshape(-1), keys).view(B, G), {}

    def _metrics(self, reports, p_hat, admitted, rewards, pool, state) -> dict[str, float]:
        out = {f"evoenv/rejected_{s}": float(sum(rep.stage == s for rep in reports)) for s in STAGES}
        out.update(
            {
                "evoenv/generated": float(len(reports)),
                "evoenv/admitted": float(len(admitted)),
                "evoenv/generator_reward": float(rewards.mean()),
                **pool.stats(),
            }
        )
        state["admitted"] = state.get("admitted", 0) + len(admitted)
        out["evoenv/admitted_total"] = float(state["admitted"])
        if p_hat:
            out["evoenv/calibration_p_hat"] = sum(p_hat.values()) / len(p_hat)
        return out
