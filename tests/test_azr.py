"""AZR (arXiv 2505.03335; spec envs-selfplay-eval.md section 1): the rewards and TRR++ by hand, program
validation and hostile proposals in the sandbox, the three task types' grading, the part's draw and
proposer round on a scripted context, and the recipe end to end with an exact resume."""

import dataclasses
import math

import pytest
import torch

from helpers import batch_context, round_context, text_rollouts
from reasonrl.advantages.buckets import role_task_advantages
from reasonrl.config.train import TrainConfig
from reasonrl.errors import UserError
from reasonrl.parts import AZR
from reasonrl.parts.azr import ast_depth, initial_buffers
from reasonrl.recipes import get_recipe
from reasonrl.rewards.azr import azr_format_shaping, azr_proposal_reward, azr_proposer_reward
from reasonrl.tasks import get_task
from reasonrl.tasks.azr import AZRShaping, format_ok, parse_inputs, parse_proposal, solve_item
from reasonrl.tasks.azr_world import IDENTITY, banned_names, validate_programs
from reasonrl.loop.trainer import Trainer
from reasonrl.config.validate import check_part

TASK = get_task("azr")
MOD3 = "a=int(input())\nprint(a%3)\n"  # the spec's abduction example: f(x) = x % 3


# ------------------------------------------------------------------ the spec's (d) list, by hand


def test_learnability_reward_and_format_shaping():
    assert [azr_proposer_reward(p) for p in (0.0, 1.0, 0.25)] == [0.0, 0.0, 0.75]
    assert azr_format_shaping(0.0, True) == -0.5 and azr_format_shaping(1.0, False) == -1.0
    assert azr_format_shaping(1.0, True) == 1.0
    # the proposer: bad format -1, invalid -0.5, valid: the learnability (0 at p_hat 1: useless but valid)
    assert [
        azr_proposal_reward(False, False, None),
        azr_proposal_reward(True, False, None),
        azr_proposal_reward(True, True, 0.25),
        azr_proposal_reward(True, True, 1.0),
    ] == [-1.0, -0.5, 0.75, 0.0]
    with pytest.raises(ValueError):
        azr_proposer_reward(1.5)


def test_trr_plus_plus_normalises_within_buckets_only():
    # bucket A: [1, 0, 1], mean 2/3, unbiased std sqrt((1/9 + 4/9 + 1/9) / 2) = sqrt(1/3) = 0.57735
    #   -> (1 - 2/3) / 0.57735 = 0.57735, (0 - 2/3) / 0.57735 = -1.15470
    # bucket B: [0.5, -0.5], mean 0, std sqrt(0.5) = 0.70711 -> +-0.70711; bucket C: one row -> 0
    keys = ["A", "B", "A", "B", "A", "C"]
    adv = role_task_advantages(torch.tensor([1.0, 0.5, 0.0, -0.5, 1.0, 9.0]), keys)
    assert adv.tolist() == pytest.approx([0.57735, 0.70711, -1.15470, -0.70711, 0.57735, 0.0], abs=1e-4)
    # never across: changing B's rewards leaves A's advantages alone
    again = role_task_advantages(torch.tensor([1.0, 50.0, 0.0, -7.0, 1.0, 9.0]), keys)
    assert again[[0, 2, 4]].tolist() == adv[[0, 2, 4]].tolist()
    with pytest.raises(ValueError):
        role_task_advantages(torch.zeros(2, 2), ["a", "b"])


def test_determinism_rejects_random_and_object_ids():
    got = validate_programs(
        [
            ("import random\nprint(random.random())\n", "1"),
            ("print(id(object()))\n", "1"),
            ("a=int(input())\nprint(a+1)\n", "4"),
        ],
        check_banned=False,
    )
    assert [v.stage for v in got] == ["determinism", "determinism", ""] and got[2].output == "5"
    # with AZR's banned words on (the default), random is refused before it runs
    assert validate_programs([("import random\nprint(random.random())\n", "1")])[0].stage == "banned"


def test_abduction_accepts_any_input_with_the_right_output():
    item = solve_item("abduction", {"program": MOD3, "input": "4", "output": "1"}, shown=3)
    assert item.answer == "4" and item.prompt.endswith("OUT:1\n")
    answers = ["IN:1", "IN:4", "IN:7", "IN:2", "7"]  # 1, 4, 7 = 1 (mod 3); 2 is not; "7" has no format
    TASK.prepare(answers, [item.meta] * len(answers))
    assert [TASK.verify(a, item.answer, item.meta) for a in answers] == [1.0, 1.0, 1.0, 0.0, 0.0]


def test_deduction_and_induction_grading():
    ded = solve_item("deduction", {"program": MOD3, "input": "5", "output": "2"}, shown=3)
    assert [TASK.verify(t, ded.answer, ded.meta) for t in ("L1 a=5\nO:2", "O:1", "no answer")] == [1.0, 0.0, 0.0]
    # induction: pairs of x % 3 on 1..6; 3 shown, 3 held out; a program must pass every held-out pair
    ind = solve_item(
        "induction",
        {"program": MOD3, "inputs": ["1", "2", "3", "4", "5", "6"], "outputs": ["1", "2", "0", "1", "2", "0"]},
        shown=3,
    )
    assert ind.prompt == "#F\n1>1\n2>2\n3>0\n" and ind.meta["held"] == [("4", "1"), ("5", "2"), ("6", "0")]
    right, mostly = "a=int(input())\nprint(a-3*(a//3))\n", "a=int(input())\nprint(a-3)\n"  # the second fits 4>1 only
    assert [TASK.verify(t, "", ind.meta) for t in (right, mostly, "not python (")] == [1.0, 0.0, 0.0]


def test_hostile_proposals_are_rejected_with_their_stage():
    pairs = [
        ("while True:\n pass\n", "1"),
        ("x=[0]*10**9\nprint(len(x))\n", "1"),
        ("import os\nos.fork()\n", "1"),
        ("open('/tmp/azr_pwn','w').write('x')\nprint(1)\n", "1"),
        ("import socket\nsocket.socket()\n", "1"),
        ("print(1\n", "1"),
    ]
    got = validate_programs(pairs)
    assert [v.stage for v in got] == ["run", "run", "banned", "banned", "banned", "parse"]
    assert "line events" in got[0].reason and "MemoryError" in got[1].reason
    # even with the banned words off, what runs runs in the sandbox: the file is written in its private /tmp
    assert validate_programs(pairs[3:4], check_banned=False)[0].ok
    import os

    assert not os.path.exists("/tmp/azr_pwn")
    assert banned_names("import subprocess\nx=eval('1')\n") == ["subprocess", "eval"]


def test_parsing_and_format_of_the_six_prompts():
    assert parse_proposal("a=int(input())\nprint(a+1)\nIN:4") == ("a=int(input())\nprint(a+1)\n", "4")
    assert parse_proposal("IN:4") is None and parse_proposal("a=1\nprint(a)") is None
    assert parse_inputs("IN:1,5,-2") == ["1", "5", "-2"] and parse_inputs("IN:1,,2") is None
    cases = [
        ("solve", "deduction", "L1 a=1\nO:1", True),
        ("solve", "deduction", "L1 a=1", False),
        ("solve", "abduction", "IN:3", True),
        ("solve", "abduction", "3", False),
        ("solve", "induction", "a=int(input())\nprint(a)", True),
        ("solve", "induction", "a=(", False),
        ("solve", "induction", "a=1", False),  # parses, prints nothing
        ("propose", "deduction", "a=int(input())\nprint(a)\nIN:2", True),
        ("propose", "abduction", "IN:2", False),
        ("propose", "induction", "IN:1,2,3,4", True),
        ("propose", "induction", "1,2", False),
    ]
    assert [format_ok(r, k, t) for r, k, t, _ in cases] == [want for *_, want in cases]
    # the solver's shaped reward: verifier 0/1 + this term = AZR's 1 / -0.5 / -1
    m = {"role": "solve", "type": "abduction"}
    res = AZRShaping().score(["p"] * 3, ["IN:1", "IN:2", "junk"], meta=[m] * 3, correct=[True, False, False])
    assert res.values == [0.0, -0.5, -1.0]


def test_the_task_demonstrates_all_six_prompts_and_evaluates_solver_prompts():
    import itertools

    train = list(itertools.islice(TASK.iter_items("train", 0), 30))
    kinds = {(it.meta["role"], it.meta["type"]) for it in train}
    assert len(kinds) == 6  # solve and propose, for each of the three types
    for it in train:
        assert format_ok(it.meta["role"], it.meta["type"], it.demo), it
        if it.meta["role"] == "solve":
            assert TASK.verify(it.demo, it.answer, it.meta) == 1.0
    test = list(itertools.islice(TASK.iter_items("test", 0), 12))
    assert {it.meta["role"] for it in test} == {"solve"} and not {it.key for it in test} & {it.key for it in train}
    assert TASK.diagnostics(
        ["x"] * 3, [{"type": "deduction"}, {"type": "deduction"}, {"type": "abduction"}], [1.0, 0.0, 1.0]
    ) == {"deduction_acc": 0.5, "abduction_acc": 1.0}
    assert ast_depth("a=1\n") == 4  # Module > Assign > Name > Store (a constant leaf: depth 3)


# ------------------------------------------------------------------ the part on a scripted context


class Scripted:
    """A round's sampling surface: proposals by the prompt's type, then solver answers (every estimate
    sample of a deduction task answers O:<program(input)> right, abduction answers IN:0)."""

    PROPOSALS = {
        "deduction": [
            "a=int(input())\nprint(a+1)\nIN:4",
            "junk",
            "import os\nprint(1)\nIN:1",
            "a=int(input())\nprint(a+2)\nIN:1",
        ],
        "abduction": ["a=int(input())\nprint(a*2)\nIN:3", "print(id(object()))\nIN:1", "x", "x"],
        "induction": ["IN:1,2,3,4,5,6", "IN:1,1,1", "x", "x"],
    }

    def __init__(self):
        self.calls = []

    def sample(self, items, prompts, tag, first, n=None):
        self.calls.append((tag, len(items), n))
        if tag.startswith("azr-propose"):
            texts = [t for it in items for t in self.PROPOSALS[it.meta["type"]]]
            return text_rollouts(prompts, texts, 4)
        texts = [
            ("O:" + it.meta["output"]) if it.meta["type"] == "deduction" else "IN:0" for it in items for _ in range(n)
        ]
        return text_rollouts(prompts, texts, n)


def test_draw_and_the_proposer_round_by_hand():
    part, script, state = AZR(proposals=1, estimate_samples=2), Scripted(), {}
    ctx = round_context(None, task=TASK, sample=script.sample, state=state, position=0, group_size=4)
    drawn, _ = part.draw(ctx, 3)  # types in turn from the identity-seeded buffers
    assert [it.meta["type"] for it in drawn] == ["deduction", "abduction", "induction"]
    assert drawn[0].prompt == "#O\n1|a=int(input())\n2|print(a)\nIN:3\n" and drawn[1].answer == "3"
    g, m = part.extend(round_context(None, task=TASK, sample=script.sample, state=state, position=3, group_size=4))
    # deduction: valid (a+1 on 4 -> 5), bad format, banned (os), valid (a+2 on 1 -> 3); both solved by every
    # estimate sample: p_hat 1 -> reward 0. abduction: valid (a*2 on 3 -> 6) but every estimate answers IN:0
    # (0*2 = 0 != 6): p_hat 0 -> 0; nondeterministic -> -0.5; two bad formats -> -1.
    # induction: six distinct inputs -> valid; three copies of one input -> invalid; two bad formats.
    assert g.rewards.tolist() == [[0.0, -1.0, -0.5, 0.0], [0.0, -0.5, -1.0, -1.0], [0.0, -0.5, -1.0, -1.0]]
    assert g.correct.tolist() == [[1.0, 0.0, 0.0, 1.0], [1.0, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]]
    assert m["azr/rejected_banned"] == 1.0 and m["azr/rejected_determinism"] == 1.0
    assert m["azr/rejected_inputs"] == 1.0 and m["azr/rejected_format"] == 5.0
    buffers = state["buffers"]
    assert [e["output"] for e in buffers["deduction"]] == ["3", "5", "3"]  # identity, then the two valid ones
    assert buffers["abduction"][-1] == {"program": "a=int(input())\nprint(a*2)\n", "input": "3", "output": "6"}
    assert buffers["induction"][-1]["outputs"] == ["1", "2", "3", "4", "5", "6"]  # the identity on 1..6
    assert ("azr-estimate-0", 4, 2) in script.calls  # the 4 valid proposals, 2 solver samples each


class PartlySolved(Scripted):
    """Estimate samples that solve some proposals only part of the time: the deduction task with output 5
    is answered right by 1 of its 4 samples, the one with output 3 by 3 of 4; the abduction task (a*2 -> 6)
    by 1 of 4 (IN:3 is right, IN:0 is not)."""

    def sample(self, items, prompts, tag, first, n=None):
        if tag.startswith("azr-propose"):
            return super().sample(items, prompts, tag, first, n)
        self.calls.append((tag, len(items), n))
        right = {"5": 1, "3": 3, "6": 1}
        texts = []
        for it in items:
            good = ("O:" + it.meta["output"]) if it.meta["type"] == "deduction" else "IN:3"
            bad = "O:999" if it.meta["type"] == "deduction" else "IN:0"
            texts += [good] * right[it.meta["output"]] + [bad] * (n - right[it.meta["output"]])
        return text_rollouts(prompts, texts, n)


def test_the_proposer_round_rewards_one_minus_the_solvers_accuracy_at_an_intermediate_p_hat():
    # p_hat is the solver's accuracy over the 4 estimate samples: 1/4 -> reward 1 - 1/4 = 0.75, 3/4 -> 0.25
    # (the failure rate as p_hat would swap them: 0.25 and 0.75). Rows: deduction [valid a+1 on 4 -> 5,
    # bad format -1, banned -0.5, valid a+2 on 1 -> 3]; abduction [valid a*2 on 3 -> 6, nondeterministic
    # -0.5, bad format -1, bad format -1]
    part, script = AZR(proposals=1, estimate_samples=4, types="deduction,abduction"), PartlySolved()
    g, _ = part.extend(round_context(None, task=TASK, sample=script.sample, state={}, position=0, group_size=4))
    assert g.rewards.tolist() == [[0.75, -1.0, -0.5, 0.25], [0.75, -0.5, -1.0, -1.0]]
    assert ("azr-estimate-0", 3, 4) in script.calls  # the 3 valid proposals, 4 solver samples each


def test_trr_shaper_uses_role_and_type_buckets():
    items = [
        solve_item("deduction", {"program": MOD3, "input": "1", "output": "1"}, 3),
        solve_item("abduction", {"program": MOD3, "input": "1", "output": "1"}, 3),
        dataclasses.replace(
            solve_item("deduction", {"program": MOD3, "input": "2", "output": "2"}, 3),
            meta={"role": "propose", "type": "deduction"},
        ),
    ]
    rewards = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.5, -1.0]])
    adv, m = AZR().shape_advantages(torch.zeros(3, 2), batch_context(rewards=rewards, items=items))
    # (solve, deduction) [1, 0]: +-0.70711; (solve, abduction) constant: 0; (propose, deduction) [0.5, -1]: +-0.70711
    assert adv.view(-1).tolist() == pytest.approx([0.70711, -0.70711, 0.0, 0.0, 0.70711, -0.70711], abs=1e-4)
    assert m == {"azr/buckets": 3.0}


def test_options_and_the_task_it_needs():
    with pytest.raises(UserError, match="'azr.types' = 'deduction,code'"):
        check_part(AZR(types="deduction,code"))
    ctx = round_context(None, task=get_task("arithmetic"), state={})
    with pytest.raises(UserError, match="--task azr"):
        AZR().draw(ctx, 1)
    r = get_recipe("azr")
    assert dict(r.run_defaults) == {"task": "azr"} and r.rounds == [("azr", AZR())]


# ------------------------------------------------------------------ the recipe, with an exact resume


@pytest.mark.slow
def test_azr_trains_three_steps_and_resumes_its_buffers_exactly(sharp_tiny, tmp_path):
    import copy

    recipe = get_recipe("azr")
    recipe = dataclasses.replace(
        recipe,
        sampling=dataclasses.replace(recipe.sampling, max_new_tokens=40),
        azr=AZR(proposals=1, estimate_samples=2),
    )
    cfg = TrainConfig(
        recipe="azr", task="azr", steps=3, prompts_per_step=3, eval_every=0, save_every=0, final_eval_problems=0
    )

    def trainer(folder, steps):
        model, tok = copy.deepcopy(sharp_tiny[0]).train(), sharp_tiny[1]
        return Trainer(model, tok, TASK, recipe, dataclasses.replace(cfg, steps=steps), tmp_path / folder)

    straight = trainer("a", 3)
    rows = [straight.train_step() for _ in range(3)]
    for r in rows:
        assert all(math.isfinite(v) for v in r.values() if isinstance(v, float))
        assert {"azr/proposer_reward", "azr/buffer_deduction", "azr/buckets", "reward/azr_format/format_rate"} <= set(r)
    first = trainer("b", 3)
    first.train_step(), first.train_step()
    first.save()
    resumed = trainer("b", 3)
    assert resumed.resume() == 2
    assert resumed.batches.parts.state("azr") == first.batches.parts.state("azr")
    last = resumed.train_step()
    assert {k: v for k, v in last.items() if not k.startswith(("time/", "tokens_per_s"))} == {
        k: v for k, v in rows[2].items() if not k.startswith(("time/", "tokens_per_s"))
    }
    assert resumed.batches.parts.state("azr") == straight.batches.parts.state("azr")
    assert IDENTITY == straight.batches.parts.state("azr")["buffers"]["deduction"][0]["program"]
    assert initial_buffers(6)["induction"][0]["inputs"] == ["1", "2", "3", "4", "5", "6"]
