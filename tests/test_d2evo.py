"""D2Evo's part (parts/d2evo.py) and run state (data/d2evo.py D2EvoState) with a scripted maker, by
hand; then the d2evo recipe for 3 steps on the tiny model, asserting its own metrics.
"""

import dataclasses
import json
import math
import shutil
from types import SimpleNamespace

import pytest
import torch

from helpers import round_context, text_rollouts
from reasonrl.loop.batch import Batch
from reasonrl.config.train import DataOpts, TrainConfig
from reasonrl.data.d2evo import D2EvoState
from reasonrl.errors import UserError
from reasonrl.parts import D2Evo
from reasonrl.parts.d2evo import DEFAULT_TEMPLATE, role_prompt
from reasonrl.recipes import get_recipe
from reasonrl.tasks import ArithmeticTask
from reasonrl.config.validate import check_part

G, N = 4, 4  # group size, Solver samples per problem (estimation and generated problems)
TASK = ArithmeticTask()
POOL = [TASK.make_item([a, b], ["+"]) for a, b in ((3, 3), (2, 3), (6, 7), (8, 9))]  # all in the train split


def q(anchor):  # the Questioner's role prompt of an anchor
    return role_prompt(DEFAULT_TEMPLATE, anchor + "=?\n", "")


SCRIPT = {
    # estimation, 4 samples: 3+3 none right (0), 2+3 one (0.25), 6+7 two (0.5), 8+9 all (1): anchors 2+3, 6+7
    "3+3=?\n": ["A:7"] * 4,
    "2+3=?\n": ["A:5", "A:4", "A:4", "A:4"],
    "6+7=?\n": ["A:13", "A:13", "A:1", "A:2"],
    "8+9=?\n": ["A:17"] * 4,
    # the Questioner: G = 4 texts per anchor (read with parse=prefix)
    q("2+3"): ["7+5+0=12,", "junk", "2+3=?", "12+30=4"],
    q("6+7"): ["9+9", "9+9", "40+2", "x"],
    # the Solver on the generated problems
    "7+5=?\n": ["A:12", "A:12", "A:13", "A:12"],
    "12+30=?\n": ["A:42", "A:41", "A:40", "A:43"],
    "9+9=?\n": ["A:18"] * 4,
    "40+2=?\n": ["A:42", "A:42", "A:24", "A:24"],
}


class FakeMaker:
    """What D2Evo uses of a BatchMaker, scripted by prompt: generate returns SCRIPT's texts (``n``
    of them), reward is the verifier's 0/1 against the item's answer."""

    def __init__(self, part, step=0):
        self.task, self.pool, self.step, self.seed, self.calls = TASK, POOL, step, 0, []
        self.selector = part.build(0)
        self.engine = SimpleNamespace(tok=SimpleNamespace(pad_token_id=0))

    def generate(self, items, prompts, tag, first, n=None):
        self.calls.append((tag, list(prompts), n or G))
        return text_rollouts(prompts, [t for p in prompts for t in SCRIPT[p][: n or G]], n or G)

    def reward(self, items, ro):
        ok = torch.tensor(
            [float(TASK.verify(t, it.answer, {})) for i, it in enumerate(items) for t in ro.texts[i * G : (i + 1) * G]]
        ).view(-1, G)
        return ok.clone(), ok, {}

    def ctx(self, batch=None):
        """The part's round context: scripted sampling and reward, the selector state as its own state."""
        return round_context(
            batch,
            task=self.task,
            sample=self.generate,
            reward=self.reward,
            state=self.selector,
            seed=self.seed,
            pool=self.pool,
            step=self.step,
            tok=self.engine.tok,
            group_size=G,
        )


def _first_round(items):
    ro = text_rollouts([it.prompt for it in items], ["A:0"] * (len(items) * G), G)
    return Batch(items=list(items), ro=ro, rewards=torch.zeros(len(items), G), correct=torch.zeros(len(items), G))


PART = D2Evo(estimate_samples=N, solver_samples=N, anchors_per_step=2, iteration_steps=5)


def test_estimation_mines_the_spec_anchors_once_per_iteration():
    maker = FakeMaker(PART)
    st = maker.selector
    assert st.admit(POOL[0], 0)  # no anchors yet: every pool item gets rollouts
    PART.before_step(maker.ctx())
    # pass rates [0, 0.25, 0.5, 1.0] (the spec's example): anchors are the 2nd and 3rd problems
    assert st.pass_rates == {"3+3": 0.0, "2+3": 0.25, "6+7": 0.5, "8+9": 1.0} and st.anchors == ["2+3", "6+7"]
    assert [st.admit(it, 0) for it in POOL] == [False, True, True, False]
    # mean (0 + 0.25 + 0.5 + 1) / 4 = 0.4375; 4 problems x 4 samples
    assert st.pending == {"d2evo/est_pass_rate_mean": 0.4375, "d2evo/est_rows": 16.0}
    assert maker.calls == [("d2evo_est0", [it.prompt for it in POOL], N)]
    maker.step = 4  # same iteration (5 steps each): no new estimation
    PART.before_step(maker.ctx())
    maker.step = 5  # iteration 1: estimated again, under its own tag
    PART.before_step(maker.ctx())
    assert [c[0] for c in maker.calls] == ["d2evo_est0", "d2evo_est1"] and st.iteration == 1


def test_questioner_round_by_hand():
    maker = FakeMaker(PART)
    PART.before_step(maker.ctx())
    g, m = PART.extend(maker.ctx(_first_round(POOL[1:3])))
    # R_Q per question (p* 0.5, eta 0.5; sim: character trigrams against the anchor):
    #  2+3 -> "7+5": 12 x3 of 4, p 0.75, sim 0 -> 1 - 0.5 = 0.5 | "junk": -1
    #        "2+3" (a copy): 4 x3 of 4, p 0.75, sim 1 -> 1 - 0.5 - 0.5 = 0 | "12+30": top share 1/4 < 0.3: -1
    #  6+7 -> "9+9" twice: p 1, sim 0 -> 0 | "40+2": tie 42/24, 42 first, p 0.5, sim 0 -> 1 | "x": -1
    assert g.rewards.flatten().tolist() == pytest.approx([0.5, -1.0, 0.0, -1.0, 0.0, 0.0, 1.0, -1.0])
    # accepted: valid, p in [0.2, 0.8], not a real problem: "7+5" and "40+2" ("2+3" is an anchor itself)
    assert g.correct.tolist() == [[1, 0, 0, 0], [0, 0, 1, 0]]
    assert maker.selector.accepted == {
        "7+5": {"text": "7+5", "label": "12", "p_hat": 0.75},
        "40+2": {"text": "40+2", "label": "42", "p_hat": 0.5},
    }
    # mean of the 8 rewards -1.5 / 8; parsed 6 of 8, valid 5, accepted 2; over the 5 valid: p (0.75 + 0.75 + 1 + 1 +
    # 0.5) / 5 = 0.8, sim (0 + 1 + 0 + 0 + 0) / 5 = 0.2; the majority was the true answer for 4 of 5 (not "2+3": 4)
    assert m["d2evo/q_reward_mean"] == pytest.approx(-0.1875)
    assert (m["d2evo/q_parsed_frac"], m["d2evo/q_valid_frac"], m["d2evo/q_accepted_frac"]) == (0.75, 0.625, 0.25)
    assert m["d2evo/q_p_hat_mean"] == pytest.approx(0.8) and m["d2evo/q_sim_mean"] == pytest.approx(0.2)
    assert m["d2evo/q_label_true_frac"] == pytest.approx(0.8) and m["d2evo/accepted_waiting"] == 2.0
    assert (m["d2evo/anchors"], m["d2evo/pool_size"], m["d2evo/est_rows"]) == (2.0, 2.0, 16.0)
    # the groups carry the role prompts; the Solver answered the 6 well-formed questions once, 4 samples each
    assert [it.prompt for it in g.items] == [q("2+3"), q("6+7")] and g.weight.tolist() == [1.0] * 8
    assert maker.calls[2] == ("d2evo_solve0", ["7+5=?\n", "2+3=?\n", "12+30=?\n", "9+9=?\n", "9+9=?\n", "40+2=?\n"], N)


def test_gold_mode_judges_by_the_computed_answer():
    part = dataclasses.replace(PART, use_gold=True)
    maker = FakeMaker(part)
    part.before_step(maker.ctx())
    g, _ = part.extend(maker.ctx(_first_round(POOL[1:3])))
    # "12+30" (true 42): 1 of 4 right, p 0.25, sim {12+, 2+3, +30} vs {2+3} = 1/3 -> 1 - 0.5 - 1/6 = 0.3333
    # "2+3" copy: 1 of 4 right (5), p 0.25, sim 1 -> 1 - 0.5 - 0.5 = 0; the rest as the majority's
    assert g.rewards.flatten().tolist() == pytest.approx([0.5, -1.0, 0.0, 1 / 3, 0.0, 0.0, 1.0, -1.0], abs=1e-6)
    assert set(maker.selector.accepted) == {"7+5", "12+30", "40+2"}
    assert maker.selector.accepted["12+30"]["label"] == "42"


def test_next_iteration_trains_the_solver_on_accepted_problems():
    maker = FakeMaker(PART)
    PART.before_step(maker.ctx())
    PART.extend(maker.ctx(_first_round(POOL[1:3])))
    maker.step = 5
    PART.before_step(maker.ctx())
    st = maker.selector
    assert (
        st.generated
        == {"7+5": {"text": "7+5", "label": "12", "p_hat": 0.75}, "40+2": {"text": "40+2", "label": "42", "p_hat": 0.5}}
        and st.accepted == {}
    )
    g, m = PART.extend(maker.ctx(_first_round(POOL[1:3])))
    # 2 first-round groups, 2 anchors, 2 generated: round(2 * 2 / 2) = 2 Solver groups after 2 Questioner groups
    assert [it.key for it in g.items] == ["2+3", "6+7", "7+5", "40+2"]
    assert [it.answer for it in g.items[2:]] == ["12", "42"]  # the pseudo-labels
    # 7+5: [12, 12, 13, 12] -> 3 of 4 right; 40+2: [42, 42, 24, 24] -> 2 of 4: accuracy 5/8
    assert g.correct[2:].tolist() == [[1, 1, 0, 1], [1, 1, 0, 0]]
    assert m["d2evo/solver_generated_groups"] == 2.0 and m["d2evo/solver_generated_acc"] == 0.625
    assert m["d2evo/pool_size"] == 4.0 and m["d2evo/pool_generated"] == 2.0


def test_no_anchor_means_no_questioner_and_the_whole_pool():
    part = dataclasses.replace(PART, p_lo=0.6, p_hi=0.9)  # no pass rate in [0.6, 0.9]
    maker = FakeMaker(part)
    part.before_step(maker.ctx())
    g, m = part.extend(maker.ctx(_first_round(POOL[:2])))
    assert g is None and m["d2evo/anchors"] == 0.0 and m["d2evo/pool_fallback"] == 1.0  # no groups, the counts
    assert all(maker.selector.admit(it, 0) for it in POOL)


def test_state_round_trip_and_another_datasets_state_is_refused():
    maker = FakeMaker(PART)
    PART.before_step(maker.ctx())
    PART.extend(maker.ctx(_first_round(POOL[1:3])))
    saved = maker.selector.state_dict()
    fresh = D2EvoState()
    fresh.load_state_dict(saved, {k: v for k, v in saved["hashes"].items()})
    assert fresh.state_dict() == saved
    with pytest.raises(UserError, match="another dataset"):
        D2EvoState().load_state_dict(saved, {"1+2": "x"})


def test_options_are_checked():
    for bad, key in (
        (dict(template="no slot"), "template"),
        (dict(p_lo=0.9, p_hi=0.1), "p_hi"),
        (dict(parse="word"), "parse"),
        (dict(solver_samples=0), "solver_samples"),
    ):
        with pytest.raises(UserError, match=f"'d2evo.{key}' = "):
            check_part(D2Evo(**bad))
    with pytest.raises(UserError, match="generated_item"):
        maker = FakeMaker(PART)
        maker.task = SimpleNamespace(name="plain")
        PART.extend(maker.ctx(_first_round(POOL[:1])))


# ------------------------------------------------------------------ end to end on the tiny model


def _rows(run):
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_d2evo_trains_end_to_end(tiny_dir, tmp_path, monkeypatch):
    from reasonrl.loop.run import train_run
    from reasonrl.loop.trainer import Trainer

    # every pool problem is an anchor (band [0, 1]) so the Questioner always runs; 2 steps per iteration
    recipe = dataclasses.replace(
        get_recipe("d2evo"),
        d2evo=D2Evo(iteration_steps=2, estimate_samples=2, solver_samples=2, anchors_per_step=1, p_lo=0.0, p_hi=1.0),
    )
    seen, real_update = [], Trainer.update

    def spy(self, b, minibatches=None):
        seen.append(b.group_kinds().tolist())
        return real_update(self, b, minibatches)

    monkeypatch.setattr(Trainer, "update", spy)
    cfg = TrainConfig(
        model=str(tiny_dir),
        out=str(tmp_path / "a"),
        recipe="d2evo",
        steps=3,
        prompts_per_step=2,
        eval_every=0,
        final_eval_problems=0,
        save_every=1,
        keep_last=0,
        data=DataOpts(pool=6),
    )
    train_run(cfg, recipe)
    rows = _rows(tmp_path / "a")
    assert [r["step"] for r in rows] == [1, 2, 3]
    # estimation at steps 1 and 3 (iterations 0 and 1), 6 problems x 2 samples
    assert [r.get("d2evo/est_rows") for r in rows] == [12.0, None, 12.0]
    assert [r["d2evo/iteration"] for r in rows] == [0.0, 0.0, 1.0]
    for r, kinds in zip(rows, seen):
        assert all(math.isfinite(v) for v in r.values() if isinstance(v, float)), r
        assert r["d2evo/anchors"] == 6.0  # the whole pool is in the band
        # R_Q is in [-1 - eta, 1]; with no valid question it is exactly -1
        assert -1.5 <= r["d2evo/q_reward_mean"] <= 1.0
        assert r["d2evo/q_accepted_frac"] <= r["d2evo/q_valid_frac"] <= r["d2evo/q_parsed_frac"] <= 1.0
        if r["d2evo/q_valid_frac"] == 0:
            assert r["d2evo/q_reward_mean"] == -1.0
        # 2 anchor groups first, then 1 Questioner group and the Solver's groups on generated problems
        n_gen = int(r["d2evo/solver_generated_groups"])
        assert kinds == [0, 0] + [1] * (1 + n_gen)
    # accepted problems of iteration 0 are iteration 1's generated pool
    waiting = rows[1]["d2evo/accepted_waiting"]
    assert rows[2]["d2evo/pool_generated"] == waiting and rows[2]["d2evo/pool_size"] == 6 + waiting
    state = torch.load(tmp_path / "a" / "checkpoints" / "step-000003" / "trainer_state.pt", weights_only=False)["state"]
    assert state["parts"]["d2evo"]["iteration"] == 1 and len(state["parts"]["d2evo"]["anchors"]) == 6
    # resumed from the step-2 checkpoint (a copy of the run without step 3), step 3 logs the same numbers:
    # the estimation, the Questioner's questions and the Solver's samples are keyed by step and iteration
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    shutil.rmtree(tmp_path / "b" / "checkpoints" / "step-000003")
    (tmp_path / "b" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:2]))
    train_run(dataclasses.replace(cfg, out=str(tmp_path / "b")), recipe, resume=True)
    again = _rows(tmp_path / "b")
    keys = [k for k in rows[2] if k.startswith("d2evo/")] + ["reward/mean", "accuracy"]
    assert [r["step"] for r in again] == [1, 2, 3]
    assert {k: again[2].get(k) for k in keys} == {k: rows[2][k] for k in keys}
