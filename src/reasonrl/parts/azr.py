"""AZR as one recipe part: self-play over programs (Absolute Zero Reasoner, arXiv 2505.03335; spec
envs-selfplay-eval.md section 1). One shared policy plays both roles every step:

* ``draw`` (the first round's items, instead of a dataset): solver problems of the three types,
  each from its type's buffer of valid triplets (seeded by the task position), graded by the
  ``azr`` task (:mod:`reasonrl.tasks.azr`), AZR's format shaping added by ``AZRShaping``.
* ``extend`` (the proposer's round): per type ``proposals`` prompts conditioned on K reference
  triplets (induction: on one program), G proposals each; every proposal is parsed, validated in the
  sandbox (parse, banned names, a run, a second run for determinism), and, when valid, solved
  ``estimate_samples`` times by the same policy without gradient: p_hat. Reward: -1 bad format, -0.5
  invalid, else ``1 - p_hat`` if ``p_hat > 0`` (0 otherwise). Valid triplets join their buffer.
* ``shape_advantages``: TRR++, REINFORCE++ normalised within each (role, task type) bucket and never
  across them (:func:`reasonrl.advantages.buckets.role_task_advantages`).

The buffers are the part's state (checkpointed, resumed exactly); each starts with AZR's identity
program. Nothing a proposal contains ever runs outside the sandbox.
"""

from __future__ import annotations

import ast
import random
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from ..advantages.buckets import role_task_advantages
from ..rewards.azr import azr_proposal_reward
from ..config.rules import Rule, at_least
from ..seeds import stable_seed
from ..tasks import Item
from ..tasks.azr import AZRTask, format_ok, parse_inputs, parse_proposal, propose_prompt, solve_item
from ..tasks.azr_world import IDENTITY, TYPES, run_programs, validate_programs
from ..tasks.limits import played_task
from .protocol import BatchContext, RoundContext, Sample, register_part
from .strategy import Groups

__all__ = ["AZR", "check_proposals", "estimate_solve_rates", "initial_buffers", "proposal_metrics"]


def initial_buffers(n_inputs: int) -> dict[str, list[dict]]:
    """Each type's buffer with AZR's seed: the identity program (induction: on inputs 1..n)."""
    ins = [str(i) for i in range(1, n_inputs + 1)]
    one = {"program": IDENTITY, "input": "3", "output": "3"}
    return {
        "deduction": [dict(one)],
        "abduction": [dict(one)],
        "induction": [{"program": IDENTITY, "inputs": ins, "outputs": list(ins)}],
    }


def ast_depth(code: str) -> int:
    """Nesting depth of a program's syntax tree (how the proposed tasks grow; a module alone is 1)."""

    def depth(node: ast.AST) -> int:
        return 1 + max((depth(c) for c in ast.iter_child_nodes(node)), default=0)

    return depth(ast.parse(code))


@register_part("azr")
@dataclass(frozen=True)
class AZR:
    """AZR's self-play (every field [inferred] for the tiny model unless noted)."""

    PHASE = "selfplay"  # the hook order (parts/registry.py)

    proposals: int = 2  # proposal prompts per task type per step, G proposals each
    estimate_samples: int = 4  # solver samples per valid proposal for p_hat (AZR: n = 8)
    types: str = "deduction,abduction,induction"  # task types played (AZR: all three)
    capacity: int = 512  # entries kept per buffer, oldest dropped (AZR keeps every valid triplet)
    min_inputs: int = 4  # an induction proposal needs this many distinct inputs (its shown + held pairs)

    RULES: ClassVar[dict[str, Rule]] = {
        "proposals": at_least(1),
        "estimate_samples": at_least(1),
        "capacity": at_least(1),
        "min_inputs": at_least(2),
        "types": Rule(
            lambda v, _: bool(v) and all(t in TYPES for t in v.split(",")), f"a comma list of {', '.join(TYPES)}"
        ),
    }

    @property
    def type_list(self) -> list[str]:
        return self.types.split(",")

    def _task(self, ctx: Any) -> AZRTask:
        return played_task(
            ctx.task, AZRTask, "recipe part 'azr' plays AZR's program world: train it on --task azr, not {name}"
        )

    def _buffers(self, ctx: Any) -> dict[str, list[dict]]:
        c = self._task(ctx).config
        return ctx.state.setdefault("buffers", initial_buffers(c.shown + c.held))

    # ---------------------------------------------------------------- the solver's problems
    def draw(self, ctx: RoundContext, n: int) -> tuple[list[Item], dict[str, float]]:
        """``n`` solver problems, types in turn by task position, each a seeded pick from its buffer."""
        buffers, shown = self._buffers(ctx), self._task(ctx).config.shown
        out = []
        for i in range(n):
            pos = ctx.position + i
            kind = self.type_list[pos % len(self.type_list)]
            entry = random.Random(stable_seed(ctx.seed, "azr-draw", pos)).choice(buffers[kind])
            out.append(solve_item(kind, entry, shown))
        return out, {}

    # ---------------------------------------------------------------- the proposer's round
    def extend(self, ctx: RoundContext) -> tuple[Groups, dict[str, float]]:
        buffers, task = self._buffers(ctx), self._task(ctx)
        items = self._proposal_items(ctx, buffers, task.config.refs)
        ro = ctx.sample(items, [it.prompt for it in items], tag=f"azr-propose-{ctx.step}", first=0)
        G = ctx.group_size
        rows = [(items[r // G], ro.texts[r]) for r in range(len(ro.texts))]
        entries, verdicts = check_proposals(rows, task, self.min_inputs)
        p_hat = estimate_solve_rates(ctx.sample, f"azr-estimate-{ctx.step}", task, entries, self.estimate_samples)
        rewards = torch.tensor(
            [azr_proposal_reward(v != "format", v == "", p_hat.get(r)) for r, v in enumerate(verdicts)]
        )
        for kind, entry in entries.values():
            buffers[kind].append(entry)
            del buffers[kind][: -self.capacity]
        metrics = proposal_metrics(rows, verdicts, entries, p_hat, rewards, buffers)
        valid = torch.tensor([float(v == "") for v in verdicts])
        return Groups(items=items, ro=ro, rewards=rewards.view(-1, G), correct=valid.view(-1, G)), metrics

    def _proposal_items(self, ctx: RoundContext, buffers: dict[str, list[dict]], k_refs: int) -> list[Item]:
        items = []
        for kind in self.type_list:
            for j in range(self.proposals):
                rng = random.Random(stable_seed(ctx.seed, "azr-refs", kind, ctx.position, j))
                if kind == "induction":  # a program to find inputs for, from any buffer
                    refs = [rng.choice([e for b in buffers.values() for e in b])]
                else:
                    refs = rng.sample(buffers[kind], min(k_refs, len(buffers[kind])))
                prompt = propose_prompt(kind, refs)
                items.append(
                    Item(
                        key=f"azr:propose:{kind}:{ctx.position}:{j}",
                        prompt=prompt,
                        answer="",
                        meta={"role": "propose", "type": kind, "program": refs[0]["program"]},
                    )
                )
        return items

    def shape_advantages(self, adv: torch.Tensor, ctx: BatchContext) -> tuple[torch.Tensor, dict[str, float]]:
        """TRR++: REINFORCE++ within each (role, task type) bucket of rows."""
        B, G = ctx.rewards.shape
        keys = [(it.meta.get("role", "solve"), it.meta["type"]) for it in ctx.items for _ in range(G)]
        out = role_task_advantages(ctx.rewards.reshape(-1), keys).view(B, G)
        return out, {"azr/buckets": float(len(set(keys)))}


def check_proposals(
    rows: list[tuple[Item, str]], task: AZRTask, min_inputs: int
) -> tuple[dict[int, tuple[str, dict]], list[str]]:
    """Each proposal's verdict (``""`` valid, ``"format"``, or the validation stage that failed) and
    the (type, buffer entry) of the valid ones, by row (AZR's proposer round and PopuLoRA's teachers')."""
    verdicts, triplets, inductions = [], [], []
    for r, (item, text) in enumerate(rows):
        if not format_ok("propose", item.meta["type"], text):
            verdicts.append("format")
        elif item.meta["type"] == "induction":
            verdicts.append("?")
            inductions.append((r, item.meta["program"], parse_inputs(text)))
        else:
            verdicts.append("?")
            triplets.append((r, *parse_proposal(text)))
    entries: dict[int, tuple[str, dict]] = {}
    for (r, code, stdin), v in zip(triplets, validate_programs([(c, i) for _, c, i in triplets])):
        verdicts[r] = "" if v.ok else v.stage
        if v.ok:
            entries[r] = (rows[r][0].meta["type"], {"program": code, "input": stdin, "output": v.output})
    n_in = task.config.shown + task.config.held
    for r, code, inputs in inductions:
        ins = list(dict.fromkeys(inputs))[:n_in]
        outs = run_programs([(code, i) for i in ins]) if len(ins) >= max(min_inputs, n_in) else []
        ok = bool(outs) and all(o is not None for o, _ in outs)
        verdicts[r] = "" if ok else ("inputs" if not outs else "run")
        if ok:
            entries[r] = ("induction", {"program": code, "inputs": ins, "outputs": [o for o, _ in outs]})
    return entries, verdicts


def estimate_solve_rates(
    sample: Sample, tag: str, task: AZRTask, entries: dict[int, tuple[str, dict]], n: int
) -> dict[int, float]:
    """p_hat of each valid proposal: ``n`` solver answers sampled by ``sample`` under ``tag``, graded (no gradient)."""
    if not entries:
        return {}
    order = sorted(entries)
    probs = [solve_item(*entries[r], task.config.shown) for r in order]
    ro = sample(probs, [p.prompt for p in probs], tag=tag, first=0, n=n)
    metas = [p.meta for p in probs for _ in range(n)]
    task.prepare(ro.texts, metas)
    scores = [task.verify(t, "", m) for t, m in zip(ro.texts, metas)]
    return {r: sum(scores[i * n : (i + 1) * n]) / n for i, r in enumerate(order)}


def proposal_metrics(
    rows: list[tuple[Item, str]],
    verdicts: list[str],
    entries: dict[int, tuple[str, dict]],
    p_hat: dict[int, float],
    rewards: torch.Tensor,
    buffers: dict[str, list[dict]],
) -> dict[str, float]:
    """The proposer round's metrics (AZR and PopuLoRA): buffer sizes, validity per type, rejections, p_hat."""
    out = {f"azr/buffer_{k}": float(len(v)) for k, v in buffers.items()}
    out["azr/proposer_reward"] = float(rewards.mean())
    for kind in TYPES:
        mine = [v for (item, _), v in zip(rows, verdicts) if item.meta["type"] == kind]
        if mine:
            out[f"azr/valid_{kind}"] = sum(v == "" for v in mine) / len(mine)
    for stage in ("format", "parse", "banned", "run", "determinism", "inputs"):
        out[f"azr/rejected_{stage}"] = float(sum(v == stage for v in verdicts))
    if p_hat:
        out["azr/p_hat"] = sum(p_hat.values()) / len(p_hat)
        programs = [e["program"] for _, e in entries.values()]
        out["azr/program_chars"] = sum(map(len, programs)) / len(programs)
        out["azr/ast_depth"] = sum(map(ast_depth, programs)) / len(programs)
    return out
