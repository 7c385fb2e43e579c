"""PopuLoRA as one recipe part: asymmetric self-play between a population of LoRA teachers and students on
one frozen backbone (PopuLoRA; spec envs-selfplay-eval.md 4), built on AZR's program world (section 1,
:mod:`reasonrl.parts.azr`). T teacher and S student adapters live on the trainer's model; every row is
sampled under its member's adapter and trained under it (``Rollouts.adapters``), never a copy of the
base. Each step:

* ``draw`` + ``generate`` (the students' round): item i goes to student ``i mod S`` (by task position);
  the student picks a teacher by PFSP and draws one of that teacher's valid tasks (its own buffer,
  seeded with AZR's identity program); G attempts are sampled under the student's adapter; reward:
  the task's 0/1 plus AZR's format shaping (the recipe's ``AZRShaping``).
* ``extend`` (the teachers' round): each teacher proposes ``proposals`` tasks per type, conditioned on
  its own buffer, sampled under its adapter; each proposal prompt is matched by PFSP with a student,
  whose adapter solves every valid proposal ``estimate_samples`` times (no gradient): s_hat. Teacher
  reward ``1 - s_hat`` (0 at s_hat = 0 with ``zero_when_unsolved``), -0.5 invalid, -1 bad format.
  Validation, the sandbox and s_hat are AZR's own code. Every attempt is a rated game.
* ``shape_advantages``: REINFORCE++ normalised within each (member, role, task type) bucket.
* ``after_step``: every ``pbt_every`` steps, PBT per sub-population (:mod:`reasonrl.population.pbt`):
  the bottom ``pbt_frac`` by mu - 3 sigma are overwritten in place by a same-rank offspring of the top
  survivors, inherit the first parent's rating with sigma raised, and lose their optimiser state; a replaced
  teacher takes a copy of that parent's task buffers (``pbt_buffers``).

State (checkpointed with the adapters and the optimiser): ratings, games, the teachers' buffers, the
PBT log. Student ``s0`` is peft's ``default`` adapter, so the trainer's own evaluation reads it.
"""

from __future__ import annotations

import copy
import dataclasses
import random
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from ..advantages.buckets import role_task_advantages
from ..errors import UserError
from ..models.lora import (
    add_adapters,
    adapter_factors,
    adapter_parameters,
    is_lora,
    reset_optimizer_state,
    set_adapter_factors,
    use_adapter,
)
from ..population.league import League
from ..population.pbt import OPERATORS, make_offspring, pbt_plan
from ..population.ratings import PFSP_MODES, RatingModel
from ..rewards.populora import teacher_proposal_reward
from ..rollout import Rollouts, concat_rollouts, select_rows
from ..config.rules import Rule, above, at_least, one_of, within
from ..seeds import stable_seed
from ..tasks import Item
from ..tasks.azr import AZRTask, propose_prompt, solve_item
from ..tasks.azr_world import TYPES
from ..tasks.limits import played_task
from .azr import check_proposals, estimate_solve_rates, initial_buffers, proposal_metrics
from .protocol import BatchContext, ModelSetup, RoundContext, UpdateContext, register_part
from .strategy import GenRequest, Groups

__all__ = ["PopuLoRA", "adapter_of"]

PBT_BUFFERS = ("parent", "fresh", "keep")


def adapter_of(member: str) -> str:
    """The peft adapter of a member: student ``s0`` is ``default`` (what the trainer evaluates)."""
    return "default" if member == "s0" else member


@register_part("populora")
@dataclass(frozen=True)
class PopuLoRA:
    """Options: the population (4 + 4: the paper's best), the AZR game, ratings (the spec's TrueSkill
    defaults), PFSP and PBT. All but the sizes and the rating defaults [inferred]; see the recipe."""

    PHASE = "selfplay"

    teachers: int = 4
    students: int = 4
    proposals: int = 1  # proposal prompts per teacher per task type per step, G proposals each
    estimate_samples: int = 4  # the matched student's attempts per valid task: s_hat
    types: str = "deduction,abduction,induction"
    capacity: int = 512  # tasks kept per teacher per type, oldest dropped
    min_inputs: int = 4  # an induction proposal needs this many distinct inputs (AZR's check)
    zero_when_unsolved: bool = True  # s_hat = 0 earns 0 (AZR), else 1 (pure zero-sum)
    pfsp: str = "balanced"  # f(p) = p (1 - p); uniform: no prioritisation (an ablation)
    pbt_every: int = 10  # K steps between replacement steps; 0: no PBT
    pbt_frac: float = 0.25  # the bottom fraction of each sub-population replaced (1 of 4)
    operators: str = "gaussian,spectral,modulewise,svd"  # drawn uniformly per offspring
    mutation_sigma: float = 0.1  # sigma_m of the Gaussian / spectral mutation
    interp: float = 0.5  # a of the interpolation crossover (weight of the better parent)
    offspring_sigma: float = 25.0 / 6.0  # an offspring's sigma is raised to at least this (sigma0 / 2)
    pbt_buffers: str = "parent"  # a replaced teacher's tasks: its first parent's (copied) | fresh (AZR's seed) | keep
    mu0: float = 25.0
    sigma0: float = 25.0 / 3.0
    beta: float = 25.0 / 6.0
    tau: float = 25.0 / 300.0

    RULES: ClassVar[dict[str, Rule]] = {
        "teachers": at_least(1),
        "students": at_least(1),
        "proposals": at_least(1),
        "estimate_samples": at_least(1),
        "capacity": at_least(1),
        "min_inputs": at_least(2),
        "pfsp": one_of(PFSP_MODES),
        "pbt_every": at_least(0),
        "pbt_frac": within(0, 1),
        "pbt_buffers": one_of(PBT_BUFFERS),
        "mutation_sigma": at_least(0),
        "interp": within(0, 1),
        "offspring_sigma": above(0),
        "sigma0": above(0),
        "beta": above(0),
        "tau": at_least(0),
        "types": Rule(
            lambda v, _: bool(v) and all(t in TYPES for t in v.split(",")), f"a comma list of {', '.join(TYPES)}"
        ),
        "operators": Rule(
            lambda v, _: bool(v) and all(o in OPERATORS for o in v.split(",")),
            f"a comma list of {', '.join(OPERATORS)}",
        ),
    }
    # adapters switched on the trainer's model; the optimizer: PBT resets a replaced member's moments
    needs: ClassVar[frozenset[str]] = frozenset({"lora", "in_process", "own_engine", "optimizer"})

    # ---------------------------------------------------------------- members, state, the AZR game
    @property
    def teacher_names(self) -> list[str]:
        return [f"t{j}" for j in range(self.teachers)]

    @property
    def student_names(self) -> list[str]:
        return [f"s{i}" for i in range(self.students)]

    @property
    def type_list(self) -> list[str]:
        return self.types.split(",")

    def league(self, state: dict) -> League:
        return League(
            state,
            self.teacher_names,
            self.student_names,
            RatingModel(self.mu0, self.sigma0, self.beta, self.tau),
            self.pfsp,
        )

    def _task(self, ctx: Any) -> AZRTask:
        return played_task(
            ctx.task, AZRTask, "recipe part 'populora' plays AZR's program world: train it on --task azr, not {name}"
        )

    def _buffers(self, ctx: Any) -> dict[str, dict[str, list[dict]]]:
        c = self._task(ctx).config
        ctx.state.setdefault("buffer_inputs", c.shown + c.held)  # what a fresh buffer needs (PBT, pbt_buffers=fresh)
        return ctx.state.setdefault("buffers", {t: initial_buffers(c.shown + c.held) for t in self.teacher_names})

    # ---------------------------------------------------------------- the model: T + S adapters
    def setup_model(self, ctx: ModelSetup) -> tuple[nn.Module, dict[str, float]]:
        if not is_lora(ctx.model):
            raise UserError(
                "recipe part 'populora' needs LoRA: its teachers and students are adapters on one "
                "backbone. Set lora.r > 0 (e.g. lora.r=8)."
            )
        names = [adapter_of(m) for m in self.teacher_names + self.student_names]
        return add_adapters(ctx.model, names, lambda n: stable_seed(ctx.seed, "populora-adapter", n)), {}

    # ---------------------------------------------------------------- the students' round
    def draw(self, ctx: RoundContext, n: int) -> tuple[list[Item], dict[str, float]]:
        """Item i (task position p): student ``s_(p mod S)``, type ``(p div S) mod len(types)`` (each student
        meets every type), a PFSP teacher and one of its tasks of the type (AZR's identity seed at first)."""
        buffers, league, shown = self._buffers(ctx), self.league(ctx.state), self._task(ctx).config.shown
        out = []
        for i in range(n):
            pos = ctx.position + i
            student = self.student_names[pos % self.students]
            kind = self.type_list[(pos // self.students) % len(self.type_list)]
            rng = random.Random(stable_seed(ctx.seed, "populora-draw", pos))
            teacher = league.opponent(student, rng)
            entry = rng.choice(buffers[teacher][kind])
            item = solve_item(kind, entry, shown)
            by = teacher if entry.get("by") == teacher else None  # a seed task is no teacher's: no game
            out.append(dataclasses.replace(item, meta={**item.meta, "member": student, "opponent": by}))
        return out, {}

    def generate(self, req: GenRequest) -> tuple[Rollouts, dict[str, float]]:
        """G rows per item, each item's rows sampled under its student's adapter (seeds keyed by the item's
        task position, as plain sampling), group-major in item order; ``ro.adapters`` names each row's."""
        model, seeds, G = req.engine.model, req.seeds(), req.group_size
        members = [it.meta["member"] for it in req.items]
        parts, order = [], []
        for member in dict.fromkeys(members):
            idx = [i for i, m in enumerate(members) if m == member]
            with use_adapter(model, adapter_of(member)):
                ro = req.engine.generate(
                    [req.items[i].prompt for i in idx], G, req.sampling, seeds=[seeds[i] for i in idx]
                )
            ro.adapters = [adapter_of(member)] * len(ro.texts)
            parts.append(ro)
            order += idx
        joined = concat_rollouts(parts, req.engine.tok.pad_token_id)
        where = {i: k for k, i in enumerate(order)}  # item -> its place in the concatenation
        return select_rows(joined, [where[i] * G + j for i in range(len(members)) for j in range(G)]), {}

    # ---------------------------------------------------------------- the teachers' round
    def extend(self, ctx: RoundContext) -> tuple[Groups, dict[str, float]]:
        if not ctx.in_process:
            raise UserError(
                "recipe part 'populora' switches adapters on the trainer's own model: use the in-process "
                "engine (rollout.workers=0)"
            )
        task, buffers, league, G = self._task(ctx), self._buffers(ctx), self.league(ctx.state), ctx.group_size
        self._first_round_games(ctx.batch, league)
        items, parts = [], []
        for teacher in self.teacher_names:
            mine = self._proposal_items(ctx, teacher, buffers[teacher], league, task.config.refs)
            with use_adapter(ctx.policy, adapter_of(teacher)):
                ro = ctx.sample(mine, [it.prompt for it in mine], tag=f"populora-propose-{ctx.step}", first=len(items))
            ro.adapters = [adapter_of(teacher)] * len(ro.texts)
            items, parts = items + mine, parts + [ro]
        ro = concat_rollouts(parts, ctx.tok.pad_token_id)
        rows = [(items[r // G], ro.texts[r]) for r in range(len(ro.texts))]
        entries, verdicts = check_proposals(rows, task, self.min_inputs)  # AZR's validation in the sandbox
        s_hat = self._estimate(ctx, task, entries, rows)
        rewards = torch.tensor(
            [
                teacher_proposal_reward(v != "format", v == "", s_hat.get(r), self.zero_when_unsolved)
                for r, v in enumerate(verdicts)
            ]
        )
        for r, (kind, entry) in entries.items():
            item = rows[r][0]
            league.play(item.meta["opponent"], item.meta["member"], self._outcomes(s_hat[r]))
            bucket = buffers[item.meta["member"]][kind]
            bucket.append({**entry, "by": item.meta["member"]})
            del bucket[: -self.capacity]
        merged = {k: [e for b in buffers.values() for e in b[k]] for k in TYPES}
        metrics = {
            **proposal_metrics(rows, verdicts, entries, s_hat, rewards, merged),
            **league.metrics(),
            **self._teacher_metrics(rows, rewards),
        }
        valid = torch.tensor([float(v == "") for v in verdicts])
        return Groups(items=items, ro=ro, rewards=rewards.view(-1, G), correct=valid.view(-1, G)), metrics

    def _proposal_items(
        self, ctx: RoundContext, teacher: str, buffers: dict[str, list[dict]], league: League, k_refs: int
    ) -> list[Item]:
        """``proposals`` prompts per type conditioned on the teacher's own tasks, each matched with a student."""
        items = []
        for kind in self.type_list:
            for j in range(self.proposals):
                rng = random.Random(stable_seed(ctx.seed, "populora-refs", teacher, kind, ctx.position, j))
                if kind == "induction":  # a program to find inputs for, from any of its buffers
                    refs = [rng.choice([e for b in buffers.values() for e in b])]
                else:
                    refs = rng.sample(buffers[kind], min(k_refs, len(buffers[kind])))
                student = league.opponent(teacher, rng)
                items.append(
                    Item(
                        key=f"populora:{teacher}:propose:{kind}:{ctx.position}:{j}",
                        prompt=propose_prompt(kind, refs),
                        answer="",
                        meta={
                            "role": "propose",
                            "type": kind,
                            "program": refs[0]["program"],
                            "member": teacher,
                            "opponent": student,
                        },
                    )
                )
        return items

    def _estimate(self, ctx: RoundContext, task: AZRTask, entries: dict, rows: list) -> dict[int, float]:
        """s_hat of each valid proposal by its matched student (AZR's estimate, under that student's adapter)."""
        out: dict[int, float] = {}
        for student in self.student_names:
            mine = {r: e for r, e in entries.items() if rows[r][0].meta["opponent"] == student}
            if not mine:
                continue
            with use_adapter(ctx.policy, adapter_of(student)):
                out.update(
                    estimate_solve_rates(
                        ctx.sample, f"azr-estimate-{ctx.step}-{student}", task, mine, self.estimate_samples
                    )
                )
        return out

    def _outcomes(self, s_hat: float) -> list[bool]:
        """A task's ``estimate_samples`` attempts as games: its wins (solved) first, then its losses [inferred]."""
        wins = round(s_hat * self.estimate_samples)
        return [True] * wins + [False] * (self.estimate_samples - wins)

    def _first_round_games(self, batch: Any, league: League) -> None:
        """The students' attempts of this step at teachers' tasks: each row a game, in row order."""
        first = (batch.group_kinds() == 0).nonzero().squeeze(-1).tolist()
        for g in first:
            item = batch.items[g]
            if item.meta.get("opponent") is not None:
                league.play(
                    item.meta["member"], item.meta["opponent"], [bool(c >= 1) for c in batch.correct[g].tolist()]
                )

    def _teacher_metrics(self, rows: list, rewards: torch.Tensor) -> dict[str, float]:
        out = {"populora/teacher_reward": float(rewards.mean())}
        for t in self.teacher_names:
            mine = [float(r) for (item, _), r in zip(rows, rewards) if item.meta["member"] == t]
            out[f"populora/reward_{t}"] = sum(mine) / len(mine)
        return out

    # ---------------------------------------------------------------- advantages
    def shape_advantages(self, adv: torch.Tensor, ctx: BatchContext) -> tuple[torch.Tensor, dict[str, float]]:
        """REINFORCE++ within each (member, role, task type) bucket of rows, never across them."""
        B, G = ctx.rewards.shape
        keys = [
            (it.meta["member"], it.meta.get("role", "solve"), it.meta["type"]) for it in ctx.items for _ in range(G)
        ]
        out = role_task_advantages(ctx.rewards.reshape(-1), keys).view(B, G)
        return out, {"populora/buckets": float(len(set(keys)))}

    # ---------------------------------------------------------------- PBT
    def after_step(self, ctx: UpdateContext) -> tuple[None, dict[str, float]]:
        if not self.pbt_every or ctx.step % self.pbt_every:
            return None, {}
        league, ops = self.league(ctx.state), self.operators.split(",")
        log = ctx.state.setdefault("pbt", [])
        replaced = 0
        for side, names in (("teachers", self.teacher_names), ("students", self.student_names)):
            rng = np.random.default_rng(stable_seed(ctx.seed, "populora-pbt", ctx.step, side))
            plan = pbt_plan(league.sub_ratings(names), self.pbt_frac, ops, rng)
            parents = {
                p: adapter_factors(ctx.model, adapter_of(p)) for r in plan for p in r.parents
            }  # before any write
            for r in plan:
                child = make_offspring(
                    r.operator, [parents[p] for p in r.parents], rng, sigma=self.mutation_sigma, interp=self.interp
                )
                set_adapter_factors(ctx.model, adapter_of(r.child), child)
                reset_optimizer_state(ctx.optimizer, adapter_parameters(ctx.model, adapter_of(r.child)).values())
                log.append(
                    {
                        "step": ctx.step,
                        "child": r.child,
                        "parents": list(r.parents),
                        "operator": r.operator,
                        **({"buffers": self.pbt_buffers} if side == "teachers" else {}),
                    }
                )
            league.inherit(plan, self.offspring_sigma)
            if side == "teachers":
                self._inherit_buffers(ctx.state, plan)
            replaced += len(plan)
        return None, {"populora/pbt_replaced": float(replaced), "populora/pbt_total": float(len(log))}

    def _inherit_buffers(self, state: dict, plan: list) -> None:
        """A replaced teacher's task buffers [inferred; spec 4 (b) says the offspring inherits its parent's rating,
        not what it does with the loser's tasks]: ``parent``, a copy of its first parent's (the parent whose rating it
        takes), the parent's own tasks relabelled as the child's, so the students' games on them rate the child
        that now holds them; ``fresh``, AZR's seed tasks only; ``keep``, the loser's own (the behaviour before
        issue 41: the new weights proposed from, and were rated on, the tasks of the member they replaced)."""
        if self.pbt_buffers == "keep" or "buffers" not in state:  # no buffers yet: every teacher has the seed's
            return
        buffers = state["buffers"]
        before = copy.deepcopy(buffers)  # parents read before any write
        for r in plan:
            if self.pbt_buffers == "fresh":
                buffers[r.child] = initial_buffers(state["buffer_inputs"])
                continue
            buffers[r.child] = {
                kind: [{**e, "by": r.child} if "by" in e else e for e in entries]
                for kind, entries in before[r.parents[0]].items()
            }
