"""CIPO (arXiv 2605.14539): the correction round's glue, by hand, and the recipe end to end.

The spec's unit examples (shared/specs/distill-and-data.md section 6 (d)), the prompt builder, the
adaptive replay controller, ``Correction.extend`` on a hand-made batch with a scripted maker (no
model), then 3 steps on the tiny model: the cipo/* metrics, correction groups reaching the update,
and the replay ratio surviving a checkpoint and a resume.
"""

import dataclasses
import json
import math
from types import SimpleNamespace

import pytest
import torch

from helpers import round_context, text_rollouts
from reasonrl.advantages import cipo_select, get_estimator
from reasonrl.loop.batch import Batch, join_groups
from reasonrl.config.train import TrainConfig, apply_overrides, split_config
from reasonrl.errors import UserError
from reasonrl.parts import Advantage, Correction
from reasonrl.parts.correction import DEFAULT_TEMPLATE, correction_prompt, keep_at_most, next_rho, replay_cap
from reasonrl.recipes import get_recipe
from reasonrl.loop.run import train_run
from reasonrl.tasks import ArithmeticTask
from reasonrl.config.validate import check_part, check_run

G = 4
TASK = ArithmeticTask()
ITEMS = [TASK.make_item([a, b], ["+"]) for a, b in ((1, 1), (2, 3), (4, 5), (3, 3))]  # answers 2, 5, 9, 6
# first-round texts: group accuracies 0, 0.25, 0.5, 1 (each group's wrong rows share one final answer)
MAIN = [["A:3", "A:4", "A:5", "A:3"], ["A:5", "A:7", "x\nA:7", "y\nA:7"], ["A:9", "A:9", "A:3", "z\nA:3"], ["A:6"] * 4]
# corrections sampled for each problem (by its key)
SCRIPT = {
    "1+1": ["A:2", "A:3", "A:3", "A:2"],
    "2+3": ["A:5", "A:7", "A:8", "oops"],
    "4+5": ["A:3", "A:3", "A:9", "A:9"],
    "3+3": ["A:6"] * 4,
    "5+5": ["A:10"] * 4,
}


def _batch(items=ITEMS, texts=MAIN, kinds=None) -> Batch:
    flat = [t for group in texts for t in group]
    ro = text_rollouts([it.prompt for it in items], flat, G)
    correct = torch.tensor(
        [[float(TASK.extract_answer(t) == it.answer) for t in group] for it, group in zip(items, texts)]
    )
    return Batch(items=list(items), ro=ro, rewards=correct.clone(), correct=correct, kinds=kinds)


class FakeMaker:
    """What ``extend`` may use of a BatchMaker, scripted: generate returns SCRIPT's texts, reward is the
    verifier's 0/1 (with a reward metric that must not leak into the correction groups' metrics)."""

    def __init__(self, items_drawn=4, seed=0):
        self.seed, self.items_drawn, self.state, self.task, self.calls = seed, items_drawn, {}, TASK, []
        self.engine = SimpleNamespace(tok=SimpleNamespace(pad_token_id=0))

    def generate(self, items, prompts, tag, first, n=None):
        self.calls.append(([it.key for it in items], list(prompts), tag, first))
        return text_rollouts(prompts, [t for it in items for t in SCRIPT[it.key]], n or G)

    def reward(self, items, ro):
        ok = torch.tensor(
            [
                float(TASK.extract_answer(t) == it.answer)
                for i, it in enumerate(items)
                for t in ro.texts[i * G : (i + 1) * G]
            ]
        )
        return ok.view(-1, G).clone(), ok.view(-1, G), {"reward/correct/mean": float(ok.mean())}

    def ctx(self, batch):
        """The round's context: this maker's scripted sampling and reward, its part state, its position."""
        return round_context(
            batch,
            task=self.task,
            sample=self.generate,
            reward=self.reward,
            state=self.state,
            seed=self.seed,
            position=self.items_drawn,
            tok=self.engine.tok,
            group_size=G,
        )


# ------------------------------------------------------------------ the spec's examples (section 6 (d))


def test_spec_selection_example():
    # accuracies [0, 0.25, 0.5, 1.0], p_max 0.75, q0 0: prompts 2 and 3 (1-based) only
    correct = _batch().correct
    assert correct.mean(1).tolist() == [0.0, 0.25, 0.5, 1.0]
    assert cipo_select(correct, p_max=0.75, q0=0.0, generator=torch.Generator().manual_seed(0)).tolist() == [
        False,
        True,
        True,
        False,
    ]


def test_spec_correction_group_advantages():
    # rewards [1, 0, 0, 1]: mean 0.5, population std 0.5 -> (r - 0.5) / 0.5 = [1, -1, -1, 1]
    adv = get_estimator("grpo")(torch.tensor([[1.0, 0.0, 0.0, 1.0]]), unbiased=False)
    assert adv.tolist()[0] == pytest.approx([1.0, -1.0, -1.0, 1.0], abs=1e-5)
    # the recipe's own estimator (as grpo: the N-1 std, sqrt(1/3) = 0.57735): +-0.5 / 0.57735 = +-0.86603
    adv = get_recipe("cipo").advantage(torch.tensor([[1.0, 0.0, 0.0, 1.0]]))
    assert adv.tolist()[0] == pytest.approx([0.86603, -0.86603, -0.86603, 0.86603], abs=1e-4)


def test_spec_risk_averse_example():
    # group "2+3" (answer 5), failed attempt answered 7; corrections 5 (right), 7 (repeats: -0.5), 8, none
    shaped, m = Correction().shape(torch.tensor([[1.0, 0.0, 0.0, 0.0]]), [["5", "7", "8", None]], ["7"])
    rewards = torch.tensor([[1.0, 0.0, 0.0, 0.0]]) + shaped
    assert rewards.tolist() == [[1.0, -0.5, 0.0, 0.0]] and float(rewards.mean()) == pytest.approx(0.125)
    # accuracy 1/4; 1 of the 3 wrong corrections repeats the failed answer
    assert m == {"cipo/accuracy": 0.25, "cipo/repeat_rate": pytest.approx(1 / 3)}
    # kappa 0: the plain 0/1 reward, the repeat still counted
    shaped, m = Correction(kappa=0.0).shape(torch.tensor([[1.0, 0.0, 0.0, 0.0]]), [["5", "7", "8", None]], ["7"])
    assert shaped.tolist() == [[0.0, 0.0, 0.0, 0.0]] and m["cipo/repeat_rate"] == pytest.approx(1 / 3)


def test_no_answer_never_counts_as_a_repeat():
    # a failed attempt without an answer (None) and corrections without one: 0, not -kappa
    shaped, m = Correction().shape(torch.tensor([[0.0, 0.0]]), [[None, "3"]], [None])
    assert shaped.tolist() == [[0.0, 0.0]] and m == {"cipo/accuracy": 0.0, "cipo/repeat_rate": 0.0}


# ------------------------------------------------------------------ prompt builder and replay controller


def test_correction_prompt_ends_as_the_task_prompt():
    got = correction_prompt(DEFAULT_TEMPLATE, "12+3=?\n", "2+3+0=5,1+0+0=1\nA:14")
    assert got == (
        "12+3=?\nPrevious attempt:\n2+3+0=5,1+0+0=1\nA:14\n"
        "The attempt above may be wrong. Find the error and give a corrected full solution.\n12+3=?\n"
    )
    assert got.endswith("=?\n")
    # one pass: braces and a "{prompt}" inside the attempt stay literal; other braces of the template too
    assert correction_prompt("{x}{attempt}|{prompt}", "P", "a{prompt}{0}") == "{x}a{prompt}{0}|P"


def test_template_without_its_slots_is_refused():
    with pytest.raises(UserError, match=r"'correction.template' = '\{prompt\} try again'.*\{attempt\}"):
        check_part(Correction(template="{prompt} try again"))
    cfg, overrides = split_config({"correction": {"template": "no slots"}})
    with pytest.raises(UserError, match="correction.template"):  # from the command line: names the key
        check_run(cfg, apply_overrides(get_recipe("cipo"), overrides))


def test_replay_cap_floors_the_ratio():
    # floor(0.5 * 8) = 4, floor(0.125 * 8) = 1, floor(0.125 * 4) = 0, floor(0.5 * 3) = 1,
    # floor(0.3 * 10) = 3 although 0.3 * 10 = 2.9999999999999996 in floats
    assert [
        replay_cap(0.5, 8),
        replay_cap(0.125, 8),
        replay_cap(0.125, 4),
        replay_cap(0.5, 3),
        replay_cap(0.3, 10),
    ] == [4, 1, 0, 1, 3]


def test_replay_ratio_halves_below_the_floor_and_doubles_back():
    knobs = dict(rho=0.5, rho_min=0.125, acc_floor=0.1, factor=2.0)
    rho, seen = 0.5, []
    # acc 0.0 < 0.1: 0.5/2 = 0.25; 0.05: 0.125; 0.0: max(0.125, 0.0625) = 0.125; None (no corrections):
    # unchanged; 0.1 (at the floor, not below): 0.25; 0.5: 0.5; 0.9: min(0.5, 1.0) = 0.5
    for acc in (0.0, 0.05, 0.0, None, 0.1, 0.5, 0.9):
        rho = next_rho(rho, acc, **knobs)
        seen.append(rho)
    assert seen == [0.25, 0.125, 0.125, 0.125, 0.25, 0.5, 0.5]
    assert next_rho(0.5, 0.0, rho=0.5, rho_min=0.0, acc_floor=0.1, factor=1.0) == 0.5  # factor 1: fixed ratio


def test_keep_at_most_keeps_only_candidates():
    cand = torch.tensor([True, False, True, True, False])
    for k, n in ((0, 0), (1, 1), (2, 2), (3, 3), (9, 3)):
        kept = keep_at_most(cand, k, torch.Generator().manual_seed(k))
        assert int(kept.sum()) == n and not (kept & ~cand).any()


# ------------------------------------------------------------------ extend() on a hand-made batch


def test_extend_builds_the_correction_groups():
    maker, batch = FakeMaker(), _batch()
    part = Correction(q0=0.0, rho=1.0, acc_floor=0.5, weight=0.7)
    g, m = part.extend(maker.ctx(batch))
    # groups 1 and 2 (accuracies 0.25, 0.5) at task positions 4 - 4 + 1 = 1 and 2: one call, keyed "cipo"
    assert [(keys, tag, first) for keys, _, tag, first in maker.calls] == [(["2+3", "4+5"], "cipo", 1)]
    prompts = maker.calls[0][1]
    assert prompts[0] in {correction_prompt(DEFAULT_TEMPLATE, "2+3=?\n", y) for y in ("A:7", "x\nA:7", "y\nA:7")}
    assert prompts[1] in {correction_prompt(DEFAULT_TEMPLATE, "4+5=?\n", y) for y in ("A:3", "z\nA:3")}
    assert g.items == [ITEMS[1], ITEMS[2]] and g.ro.texts == SCRIPT["2+3"] + SCRIPT["4+5"]
    # "2+3" failed with 7: [5, 7, 8, none] -> [1, -0.5, 0, 0]; "4+5" failed with 3: [3, 3, 9, 9] -> [-0.5, -0.5, 1, 1]
    assert g.rewards.tolist() == [[1.0, -0.5, 0.0, 0.0], [-0.5, -0.5, 1.0, 1.0]]
    assert g.correct.tolist() == [[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 1.0, 1.0]]
    assert g.preset is None and g.weight.tolist() == pytest.approx([0.7] * 8)  # the estimator decides; lambda_c
    # accuracy 3/8; wrong 3 + 2 = 5, repeats 1 + 2 = 3: 3/5; rho used 1.0; the reward metric stays out
    assert m == {
        "cipo/selected": 2.0,
        "cipo/groups": 2.0,
        "cipo/rho": 1.0,
        "cipo/accuracy": 0.375,
        "cipo/repeat_rate": pytest.approx(0.6),
    }
    # 0.375 < acc_floor 0.5: rho 1.0 / 2 = 0.5 for the next step
    assert maker.state == {"rho_eff": 0.5}
    # the same maker again (the state carried): the cap floor(0.5 * 4) = 2 keeps both; rho 0.5 logged
    _, again = part.extend(maker.ctx(batch))
    assert again["cipo/rho"] == 0.5 and maker.state["rho_eff"] == 0.25


def test_joined_correction_groups_get_grpo_advantages_and_their_weight():
    batch = _batch()
    g, _ = Correction(q0=0.0, rho=1.0, weight=0.7).extend(FakeMaker().ctx(batch))
    joined = join_groups(batch, g, 1, 0)
    assert joined.group_kinds().tolist() == [0, 0, 0, 0, 1, 1]
    assert joined.weight.tolist() == pytest.approx([1.0] * 16 + [0.7] * 8)
    # [-0.5, -0.5, 1, 1]: mean 0.25, population std 0.75 -> [-1, -1, 1, 1]; times lambda_c 0.7
    adv = Advantage("grpo", unbiased=False)(joined.rewards)[5] * 0.7
    assert adv.tolist() == pytest.approx([-0.7, -0.7, 0.7, 0.7], abs=1e-5)


def test_extend_caps_by_rho_and_reads_only_first_round_groups():
    # p_max 1, q0 1: every first-round group is selected (4); groups 0-2 have a failure; the cap
    # floor(0.5 * 4) = 2 keeps 2 of them. The 5th group (kind 1, from another round) is never used.
    items = ITEMS + [TASK.make_item([5, 5], ["+"])]
    batch = _batch(items, MAIN + [["A:10", "A:1", "A:1", "A:1"]], kinds=torch.tensor([0, 0, 0, 0, 1]))
    part, picks = Correction(p_max=1.0, q0=1.0), []
    for _ in range(2):
        maker = FakeMaker()
        g, m = part.extend(maker.ctx(batch))
        assert m["cipo/selected"] == 4.0 and m["cipo/groups"] == 2.0 and len(g.items) == 2
        keys = [it.key for it in g.items]
        assert set(keys) < {"1+1", "2+3", "4+5"}
        # one call per run of consecutive positions, each keyed by its first group's index
        assert all(first == [it.key for it in ITEMS].index(ks[0]) for ks, _, _, first in maker.calls)
        assert sum(len(ks) for ks, _, _, _ in maker.calls) == 2
        picks.append(keys)
    assert picks[0] == picks[1]  # keyed by (seed, task position): the same choice every time


def test_extend_with_nothing_to_correct():
    batch = _batch(ITEMS[3:], MAIN[3:])  # one group, all correct
    maker = FakeMaker(items_drawn=1)
    g, m = Correction(p_max=1.0, q0=1.0).extend(maker.ctx(batch))
    assert g is None and maker.calls == []  # no groups: the counts alone
    assert m == {"cipo/selected": 1.0, "cipo/groups": 0.0, "cipo/rho": 0.5}
    assert maker.state == {"rho_eff": 0.5}  # no correction accuracy: the ratio stays


# ------------------------------------------------------------------ end to end on the tiny model


def _cfg(tiny_dir, out, steps):
    return TrainConfig(
        model=str(tiny_dir),
        out=str(out),
        recipe="cipo",
        steps=steps,
        prompts_per_step=4,
        eval_every=0,
        final_eval_problems=0,
        save_every=1,
        keep_last=0,
    )


# every prompt with a failure qualifies (p_max 1, q0 1); any correction accuracy below 1 halves rho (floor 1),
# down to 0.25: caps floor(0.5 * 4) = 2 then floor(0.25 * 4) = 1 correction groups
E2E = dataclasses.replace(
    get_recipe("cipo"), group_size=G, correction=Correction(p_max=1.0, q0=1.0, rho_min=0.25, acc_floor=1.0)
)


def _rows(run):
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_cipo_trains_end_to_end_and_its_replay_ratio_survives_a_resume(tiny_dir, tmp_path, monkeypatch):
    from reasonrl.loop.trainer import Trainer

    seen, real_update = [], Trainer.update

    def spy(self, b, minibatches=None):
        seen.append((b.group_kinds().clone(), b.weight.clone(), b.advantages.clone()))
        return real_update(self, b, minibatches)

    monkeypatch.setattr(Trainer, "update", spy)
    train_run(_cfg(tiny_dir, tmp_path / "a", 3), E2E)
    monkeypatch.setattr(Trainer, "update", real_update)
    rows = _rows(tmp_path / "a")
    assert [r["step"] for r in rows] == [1, 2, 3] and len(seen) == 3
    c = E2E.correction
    rho = c.rho
    for r, (kinds, weight, adv) in zip(rows, seen):
        assert all(math.isfinite(v) for v in r.values() if isinstance(v, float)), r
        n = int(r["cipo/groups"])
        assert r["cipo/rho"] == rho and n <= replay_cap(rho, 4) and 0 <= r["cipo/selected"] <= 4
        # the correction groups reach the update as kind-1 groups, their rows weighted lambda_c = 1
        assert kinds.tolist() == [0] * 4 + [1] * n and weight.tolist() == [1.0] * (4 + n) * G
        assert adv.shape[0] == (4 + n) * G
        if n:
            assert 0.0 <= r["cipo/accuracy"] <= 1.0 and 0.0 <= r["cipo/repeat_rate"] <= 1.0
        rho = next_rho(
            rho, r.get("cipo/accuracy"), rho=c.rho, rho_min=c.rho_min, acc_floor=c.acc_floor, factor=c.factor
        )
    assert any(r["cipo/groups"] > 0 for r in rows) and rows[2]["cipo/rho"] < c.rho  # the ratio did move
    # the checkpoint after step 2 holds the ratio step 3 used
    state = torch.load(tmp_path / "a" / "checkpoints" / "step-000002" / "trainer_state.pt", weights_only=False)["state"]
    assert state["parts"] == {"correction": {"rho_eff": rows[2]["cipo/rho"]}}
    # a run stopped after step 2 and resumed logs the same step 3 as the straight run
    train_run(_cfg(tiny_dir, tmp_path / "b", 2), E2E)
    train_run(_cfg(tiny_dir, tmp_path / "b", 3), E2E, resume=True)
    resumed = _rows(tmp_path / "b")
    assert [r["step"] for r in resumed] == [1, 2, 3]
    keys = [k for k in rows[2] if k.startswith("cipo/")] + ["reward/mean", "accuracy"]
    assert {k: resumed[2][k] for k in keys} == {k: rows[2][k] for k in keys}
