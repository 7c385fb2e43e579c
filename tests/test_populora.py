"""PopuLoRA's part (spec envs-selfplay-eval.md 4): the students' draw and per-adapter sampling, the teachers'
round by hand on a scripted context (each sample under its member's adapter), per-member advantages, PBT on
real adapters with a fresh optimiser state, and the recipe end to end with a kill-and-resume that continues
bit for bit (adapters, optimiser, ratings, buffers, the PBT log)."""

import copy
import dataclasses
import math

import numpy as np
import pytest
import torch

from helpers import batch_context, round_context, text_rollouts
from reasonrl.config.train import Lora, TrainConfig
from reasonrl.errors import UserError
from reasonrl.models import build_tiny
from reasonrl.models.lora import adapter_factors, adapter_parameters, apply_lora
from reasonrl.parts import PopuLoRA
from reasonrl.parts.protocol import ModelSetup, UpdateContext
from reasonrl.parts.strategy import GenRequest
from reasonrl.recipes import get_recipe
from reasonrl.rollout import SamplingParams
from reasonrl.loop.stepdata import Batch
from reasonrl.tasks import get_task
from reasonrl.tasks.azr import solve_item
from reasonrl.loop.trainer import Trainer
from reasonrl.config.validate import check_part

TASK = get_task("azr")
LORA = Lora(r=2, alpha=4.0)


def _population(part):
    model, _ = build_tiny("tiny", seed=0)
    return part.setup_model(ModelSetup(model=apply_lora(model, LORA, seed=0), seed=0))[0]  # (model, metrics)


class Scripted:
    """Proposals by teacher; the matched student's answers: right for a+1 / a+2, half right for a*3."""

    PROPOSALS = {
        "t0": [
            "a=int(input())\nprint(a+1)\nIN:4",
            "junk",
            "import os\nprint(1)\nIN:1",
            "a=int(input())\nprint(a+2)\nIN:1",
        ],
        "t1": ["a=int(input())\nprint(a*3)\nIN:2", "x", "x", "x"],
    }

    def __init__(self, model):
        self.model, self.calls = model, []

    def sample(self, items, prompts, tag, first, n=None):
        active = self.model.active_adapter
        self.calls.append((tag, active, len(items)))
        if tag.startswith("populora-propose"):
            return text_rollouts(prompts, [t for it in items for t in self.PROPOSALS[it.meta["member"]]], 4)
        texts = [
            ("O:" + it.meta["output"]) if "*3" not in it.meta["program"] or k == 0 else "O:999"
            for it in items
            for k in range(n)
        ]
        return text_rollouts(prompts, texts, n)


def _first_round(items, correct):
    G = len(correct[0])
    ro = text_rollouts([it.prompt for it in items], ["O:1"] * (len(items) * G), G)
    return Batch(items, ro, torch.zeros(len(items), G), torch.tensor(correct, dtype=torch.float))


def test_the_teachers_round_by_hand():
    part = PopuLoRA(teachers=2, students=1, estimate_samples=2, types="deduction", pbt_every=0)
    model = _population(part)
    script, state = Scripted(model), {}
    entry = {"program": "a=int(input())\nprint(a)\n", "input": "7", "output": "7", "by": "t0"}
    item = dataclasses.replace(
        solve_item("deduction", entry, 3),
        meta={**solve_item("deduction", entry, 3).meta, "member": "s0", "opponent": "t0"},
    )
    ctx = round_context(
        _first_round([item], [[1, 0, 1, 1]]),
        task=TASK,
        sample=script.sample,
        state=state,
        policy=model,
        group_size=4,
        position=1,
    )
    g, metrics = part.extend(ctx)
    # t0: a+1 on 4 and a+2 on 1 are valid, both solved by every attempt (s_hat 1 -> 1 - 1 = 0); "junk" has no
    # format (-1); os is banned (-0.5). t1: a*3 on 2 is valid and half solved (s_hat 1/2 -> 0.5); three bad formats
    assert g.rewards.tolist() == [[0.0, -1.0, -0.5, 0.0], [0.5, -1.0, -1.0, -1.0]]
    assert g.ro.adapters == ["t0"] * 4 + ["t1"] * 4
    # each teacher sampled under its own adapter, the estimates under the one student's (s0 = peft's default)
    assert [(tag.split("-")[1], active) for tag, active, _ in script.calls] == [
        ("propose", "t0"),
        ("propose", "t1"),
        ("estimate", "default"),
    ]
    # games: the first round's 4 attempts at t0's task, then 2 attempts at each of the 3 valid proposals
    assert state["games"] == 4 + 6
    mu = {n: r[0] for n, r in state["ratings"].items()}
    assert mu["s0"] > 25 > mu["t0"]  # s0 won 3 + 4 of its games against t0
    assert [e["output"] for e in state["buffers"]["t0"]["deduction"]] == ["3", "5", "3"]  # the seed, then its two
    assert state["buffers"]["t1"]["deduction"][-1] == {
        "program": "a=int(input())\nprint(a*3)\n",
        "input": "2",
        "output": "6",
        "by": "t1",
    }
    assert metrics["populora/reward_t1"] == pytest.approx((0.5 - 3) / 4)
    # the pure zero-sum reading: an unsolved task earns 1 (here t1's half-solved one is unchanged)
    zs = dataclasses.replace(part, zero_when_unsolved=False)
    g2, _ = zs.extend(dataclasses.replace(ctx, state={}))
    assert g2.rewards.tolist() == g.rewards.tolist()


class Uneven(Scripted):
    """The student solves t0's a+1 task (output 5) in 1 of 4 attempts, its a+2 task (output 3) never, and
    t1's a*3 task (output 6) in 3 of 4."""

    def sample(self, items, prompts, tag, first, n=None):
        if tag.startswith("populora-propose"):
            return super().sample(items, prompts, tag, first, n)
        self.calls.append((tag, self.model.active_adapter, len(items)))
        right = {"5": 1, "3": 0, "6": 3}
        texts = [
            t
            for it in items
            for t in ["O:" + it.meta["output"]] * right[it.meta["output"]] + ["O:999"] * (n - right[it.meta["output"]])
        ]
        return text_rollouts(prompts, texts, n)


def test_the_teacher_earns_one_minus_the_students_solve_rate_and_zero_when_unsolved():
    # s_hat 1/4 -> 1 - 1/4 = 0.75; s_hat 3/4 -> 0.25 (s_hat itself would give 0.25 and 0.75); s_hat 0 -> 0 with
    # zero_when_unsolved (AZR's rule), 1 under the pure zero-sum reading; -1 bad format, -0.5 banned
    part = PopuLoRA(teachers=2, students=1, estimate_samples=4, types="deduction", pbt_every=0)
    model = _population(part)
    entry = {"program": "a=int(input())\nprint(a)\n", "input": "7", "output": "7", "by": "t0"}
    item = dataclasses.replace(
        solve_item("deduction", entry, 3),
        meta={**solve_item("deduction", entry, 3).meta, "member": "s0", "opponent": "t0"},
    )
    ctx = round_context(
        _first_round([item], [[1, 0, 1, 1]]),
        task=TASK,
        sample=Uneven(model).sample,
        state={},
        policy=model,
        group_size=4,
        position=1,
    )
    g, _ = part.extend(ctx)
    assert g.rewards.tolist() == [[0.75, -1.0, -0.5, 0.0], [0.25, -1.0, -1.0, -1.0]]
    zero_sum, _ = dataclasses.replace(part, zero_when_unsolved=False).extend(dataclasses.replace(ctx, state={}))
    assert zero_sum.rewards.tolist() == [[0.75, -1.0, -0.5, 1.0], [0.25, -1.0, -1.0, -1.0]]


def test_students_draw_from_pfsp_teachers_and_sample_under_their_adapters():
    part = PopuLoRA(teachers=2, students=2, types="deduction,abduction", pbt_every=0)
    model = _population(part)
    state = {}
    items, _ = part.draw(round_context(None, task=TASK, state=state, position=0, group_size=2), 4)
    # positions 0..3: students s0 s1 s0 s1, types (p div 2) mod 2: deduction twice, then abduction twice
    assert [(it.meta["member"], it.meta["type"]) for it in items] == [
        ("s0", "deduction"),
        ("s1", "deduction"),
        ("s0", "abduction"),
        ("s1", "abduction"),
    ]
    assert all(it.meta["opponent"] is None for it in items)  # only the seed tasks yet: nobody's, no games

    seen = []

    class Engine:
        tok = type("Tok", (), {"pad_token_id": 0})()

        def __init__(self):
            self.model = model

        def generate(self, prompts, n, sampling, seeds=None):
            seen.append((model.active_adapter, list(seeds)))
            return text_rollouts(prompts, [f"{model.active_adapter}@@{p}@@{j}" for p in prompts for j in range(n)], n)

    req = GenRequest(
        items=items[:3], first=10, engine=Engine(), task=TASK, group_size=2, sampling=SamplingParams(), seed=0
    )
    ro, _ = part.generate(req)
    seeds = req.seeds()
    assert seen == [("default", [seeds[0], seeds[2]]), ("s1", [seeds[1]])]  # per student, seeds as plain sampling
    assert [t.split("@@")[0] for t in ro.texts] == ["default"] * 2 + ["s1"] * 2 + ["default"] * 2  # item order
    assert [t.split("@@")[1] for t in ro.texts[::2]] == [it.prompt for it in items[:3]]
    assert ro.adapters == ["default", "default", "s1", "s1", "default", "default"]


def test_advantages_are_normalised_per_member_role_and_type():
    items = [
        dataclasses.replace(
            solve_item("deduction", {"program": "p", "input": "1", "output": "1"}, 3),
            meta={"role": role, "type": "deduction", "member": m},
        )
        for m, role in (("s0", "solve"), ("s1", "solve"), ("t0", "propose"))
    ]
    rewards = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.5, -1.0]])
    adv, m = PopuLoRA().shape_advantages(torch.zeros(3, 2), batch_context(rewards=rewards, items=items))
    # s0 [1, 0]: +-0.70711 (mean 0.5, unbiased std 0.70711); s1 constant: 0; t0 [0.5, -1]: +-0.70711
    assert adv.view(-1).tolist() == pytest.approx([0.70711, -0.70711, 0.0, 0.0, 0.70711, -0.70711], abs=1e-4)
    assert m == {"populora/buckets": 3.0}


def test_pbt_overwrites_the_worst_teacher_with_an_offspring_and_resets_its_optimiser_state():
    part = PopuLoRA(teachers=3, students=2, pbt_every=2, pbt_frac=0.34, operators="svd", interp=1.0)
    model = _population(part)
    with torch.no_grad():  # distinct non-zero deltas
        for i, (_k, p) in enumerate(sorted((k, p) for k, p in model.named_parameters() if "lora_B" in k)):
            p.normal_(0, 0.1, generator=torch.Generator().manual_seed(i))
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=0.1)
    sum(p.sum() for p in params).backward()
    opt.step()
    state = {"ratings": {"t0": [30.0, 1.0], "t1": [25.0, 1.0], "t2": [20.0, 1.0], "s0": [25.0, 1.0], "s1": [25.0, 8.0]}}
    before = {n: adapter_factors(model, n) for n in ("t0", "t1", "default")}
    ctx = UpdateContext(model=model, optimizer=opt, step=1, seed=0, state=state)
    assert part.after_step(ctx) == (None, {})  # step 1: not a PBT step
    _, out = part.after_step(dataclasses.replace(ctx, step=2))
    # teachers: floor(0.34 * 3) = 1 replaced, t2 (mu - 3 sigma 17); svd crossover of (t0, t1) with a = 1 is t0's
    # B A exactly; students: floor(0.68) = 0 replaced
    assert out == {"populora/pbt_replaced": 1.0, "populora/pbt_total": 1.0}
    assert state["pbt"] == [{"step": 2, "child": "t2", "parents": ["t0", "t1"], "operator": "svd", "buffers": "parent"}]
    child = adapter_factors(model, "t2")
    for m, (a, b) in before["t0"].items():
        assert np.allclose(child[m][1] @ child[m][0], b @ a, atol=1e-6)
    assert all(np.array_equal(adapter_factors(model, "t0")[m][0], before["t0"][m][0]) for m in before["t0"])
    assert state["ratings"]["t2"] == [30.0, 25 / 6]  # t0's mu, sigma raised from 1 to 25/6
    fresh = adapter_parameters(model, "t2").values()
    assert all(p not in opt.state for p in fresh) and all(
        p in opt.state for p in adapter_parameters(model, "t1").values()
    )


def _buffers(*teachers):
    """Each teacher's deduction buffer: the seed and one task of its own (output = the teacher's index)."""
    seed = {"program": "a=int(input())\nprint(a)\n", "input": "1", "output": "1"}
    return {
        t: {"deduction": [seed, {"program": "p", "input": "0", "output": str(j), "by": t}]}
        for j, t in enumerate(teachers)
    }


def test_a_replaced_teacher_takes_its_parents_buffers_or_fresh_ones():
    part = PopuLoRA(teachers=3, students=1, pbt_every=1, pbt_frac=0.34, operators="gaussian", types="deduction")
    model = _population(part)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=0.1)
    ratings = {"t0": [30.0, 1.0], "t1": [25.0, 1.0], "t2": [20.0, 1.0], "s0": [25.0, 1.0]}
    ctx = UpdateContext(
        model=model,
        optimizer=opt,
        step=1,
        seed=0,
        state={"ratings": copy.deepcopy(ratings), "buffers": _buffers("t0", "t1", "t2")},
    )
    part.after_step(ctx)
    # t2 (mu - 3 sigma 17, the lowest) is replaced by a mutation of one parent drawn from the top two; the child
    # takes that parent's buffers (spec 4 (b): the offspring inherits its parent's rating; its tasks come with
    # it), its own tasks relabelled as the child's so the students' games on them rate the child
    parent = ctx.state["pbt"][0]["parents"][0]
    k = int(parent[1])
    child = ctx.state["buffers"]["t2"]["deduction"]
    assert [e["output"] for e in child] == ["1", str(k)] and child[1]["by"] == "t2" and "by" not in child[0]
    assert ctx.state["pbt"][0]["child"] == "t2" and ctx.state["pbt"][0]["buffers"] == "parent"
    assert ctx.state["buffers"][parent]["deduction"][1]["by"] == parent  # the parent's own stays its own
    child[0]["input"] = "changed"  # a copy, not shared lists
    assert ctx.state["buffers"][parent]["deduction"][0]["input"] == "1"
    # pbt_buffers=fresh: AZR's seed tasks only; keep: the loser's own tasks stay (the behaviour before issue 41)
    for mode, want in (("fresh", ["3"]), ("keep", ["1", "2"])):
        st = {"ratings": copy.deepcopy(ratings), "buffers": _buffers("t0", "t1", "t2"), "buffer_inputs": 6}
        dataclasses.replace(part, pbt_buffers=mode).after_step(dataclasses.replace(ctx, state=st))
        assert [e["output"] for e in st["buffers"]["t2"]["deduction"]] == want, mode


def test_options_the_task_and_lora_it_needs():
    with pytest.raises(UserError, match="'populora.operators' = 'gaussian,blend'"):
        check_part(PopuLoRA(operators="gaussian,blend"))
    with pytest.raises(UserError, match="--task azr"):
        PopuLoRA().draw(round_context(None, task=get_task("arithmetic"), state={}), 1)
    with pytest.raises(UserError, match="lora.r > 0"):
        PopuLoRA().setup_model(ModelSetup(model=build_tiny("tiny")[0], seed=0))
    r = get_recipe("populora")
    assert dict(r.run_defaults) == {"task": "azr", "lora.r": 8} and r.azr is None and r.needs >= {"lora", "in_process"}


# ------------------------------------------------------------------ the recipe, killed and resumed


def _recipe():
    r = get_recipe("populora")
    return dataclasses.replace(
        r,
        sampling=dataclasses.replace(r.sampling, max_new_tokens=32),
        populora=PopuLoRA(
            teachers=2, students=2, estimate_samples=2, types="deduction,abduction", pbt_every=2, pbt_frac=0.5
        ),
    )


@pytest.mark.slow
def test_populora_trains_three_steps_and_a_killed_run_resumes_bit_for_bit(sharp_tiny, tmp_path):
    cfg = TrainConfig(
        recipe="populora",
        task="azr",
        steps=3,
        prompts_per_step=2,
        eval_every=0,
        save_every=0,
        final_eval_problems=0,
        lora=Lora(r=4, alpha=8.0),
    )
    recipe = _recipe()

    def trainer(folder):
        return Trainer(copy.deepcopy(sharp_tiny[0]).train(), sharp_tiny[1], TASK, recipe, cfg, tmp_path / folder)

    straight = trainer("a")
    rows = [straight.train_step() for _ in range(3)]
    for r in rows:
        assert all(math.isfinite(v) for v in r.values() if isinstance(v, float))
    assert rows[1]["populora/pbt_replaced"] == 2.0  # step 2: one teacher and one student replaced
    first = trainer("b")
    first.train_step(), first.train_step()
    first.save()
    del first  # killed after step 2's checkpoint
    resumed = trainer("b")
    assert resumed.resume() == 2
    last = resumed.train_step()
    drop = ("time/", "tokens_per_s")
    assert {k: v for k, v in last.items() if not k.startswith(drop)} == {
        k: v for k, v in rows[2].items() if not k.startswith(drop)
    }
    assert resumed.batches.parts.state("populora") == straight.batches.parts.state("populora")
    for (k, p), (k2, q) in zip(resumed.model.named_parameters(), straight.model.named_parameters()):
        assert k == k2 and torch.equal(p, q), k  # every adapter, bit for bit
    st, so = resumed.opt.state_dict()["state"], straight.opt.state_dict()["state"]
    assert st.keys() == so.keys() and all(torch.equal(st[i]["exp_avg"], so[i]["exp_avg"]) for i in st)
