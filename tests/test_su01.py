"""SU-01's refined RL (spec distill-and-data section 13): the buffers' bookkeeping by hand, the round
on hand-made batches with a scripted maker (no model), then 3 steps of the recipe on the shipped base."""

import dataclasses
import json
import math
from types import SimpleNamespace

import pytest
import torch

from helpers import round_context, text_rollouts
from reasonrl.loop.batch import Batch
from reasonrl.errors import UserError
from reasonrl.data.refine_replay import extra_group_counts, pick_replay_row, pop_refine, push_refine, refine_candidates
from reasonrl.parts import RefineReplay
from reasonrl.parts.correction import correction_prompt
from reasonrl.parts.su01 import DEFAULT_TEMPLATE
from reasonrl.tasks import ArithmeticTask
from reasonrl.config.validate import check_part, check_run

G = 4
TASK = ArithmeticTask()


def item(a, b):
    return TASK.make_item([a, b], ["+"])


# ------------------------------------------------------------------ the spec's examples (section 13 (d))


def test_spec_refine_collection_examples():
    # [1, 0, 0, 0]: mean 0.25 < 0.5, the three rewards 0 < 0.9 -> rows 1, 2, 3
    assert refine_candidates([1, 0, 0, 0], False) == [1, 2, 3]
    # [1, 1, 0, 1]: mean 0.75 >= 0.5 -> none
    assert refine_candidates([1, 1, 0, 1], False) == []
    # a group of refine samples (_is_self_refine) is never re-collected, however wrong
    assert refine_candidates([0, 0, 0, 0], True) == []


def test_refine_thresholds_are_strict():
    # mean exactly 0.5 is not below 0.5; a reward of exactly 0.9 is not below 0.9 (0.4 and 0.2 are)
    assert refine_candidates([1, 1, 0, 0], False) == []
    assert refine_candidates([0.9, 0.4, 0.2, 0.0], False) == [1, 2, 3]  # mean 0.375
    assert refine_candidates([], False) == []


def test_extra_group_counts_are_shares_of_the_final_batch():
    # 8 ordinary groups: total 8 / 0.55 = 14.545; refine 0.2 x 14.545 = 2.909 -> 3, replay 3.636 -> 4
    # (final batch 15: 3/15 = 20%, 4/15 = 26.7%)
    assert extra_group_counts(8, 0.2, 0.25) == (3, 4)
    # 4 groups: total 7.273; 1.455 -> 1, 1.818 -> 2
    assert extra_group_counts(4, 0.2, 0.25) == (1, 2)
    # one kind alone: 4 / 0.8 = 5 -> refine 1
    assert extra_group_counts(4, 0.2, 0.0) == (1, 0)
    for bad in ((0.5, 0.5), (-0.1, 0.2)):
        with pytest.raises(ValueError, match="refine_share"):
            extra_group_counts(4, *bad)


def test_refine_buffer_newest_first_one_attempt_per_question():
    buf, refined = [], {}
    push_refine(buf, refined, [{"key": "a", "n": 1}, {"key": "a", "n": 2}, {"key": "b", "n": 3}], capacity=10)
    # newest first: b's sample, then a's newest (n 2); a's older sample leaves with it
    assert [e["n"] for e in pop_refine(buf, refined, 1)] == [3]
    assert refined == {"b": True} and [e["n"] for e in buf] == [1, 2]
    assert [e["n"] for e in pop_refine(buf, refined, 5)] == [2] and buf == []
    # a refined question is never buffered again; the capacity drops the oldest
    assert push_refine(buf, refined, [{"key": k, "n": i} for i, k in enumerate("abcde")], capacity=2) == 1
    assert [e["key"] for e in buf] == ["d", "e"]
    # a question in the current batch waits for a later one
    assert pop_refine(buf, refined, 2, exclude={"e"}) == [{"key": "d", "n": 3}] and [e["key"] for e in buf] == ["e"]


def test_pick_replay_row_lowest_entropy_success_and_retirement():
    # correct rows 0 and 2, entropies 0.5 and 0.2 -> row 2; no entropies -> the first (0)
    assert pick_replay_row([1, 0, 1, 0], [1, 0, 1, 0], [0.5, 0.1, 0.2, 0.3]) == 2
    assert pick_replay_row([1, 0, 1, 0], [1, 0, 1, 0], None) == 0
    assert pick_replay_row([1, 1, 1, 1], [1, 1, 1, 1], None) is None  # fully solved: retired, not replayed
    assert pick_replay_row([0, 0, 0, 0], [0, 0, 0, 0], None) is None
    assert pick_replay_row([1, 0], [0.0, 0.0], None, min_reward=0.0) is None  # reward must exceed min_reward


# ------------------------------------------------------------------ extend() on hand-made batches

REFINE = {"3+3": ["A:6", "A:5", "A:6", "A:6"]}
REPLAY = {"1+1": ["A:2", "A:3", "A:2"], "2+3": ["A:5", "A:5", "A:5"]}  # G - 1 fresh rows each


class FakeMaker:
    def __init__(self):
        self.seed, self.items_drawn, self.state, self.calls = 0, 4, {}, []
        self.engine = SimpleNamespace(tok=SimpleNamespace(pad_token_id=0))
        self.recipe = SimpleNamespace(group_size=G)

    def generate(self, items, prompts, tag, first, n=None):
        self.calls.append(([it.key for it in items], list(prompts), tag, first, n))
        script = REFINE if tag == "su01-refine" else REPLAY
        return text_rollouts(prompts, [t for it in items for t in script[it.key]], n or G)

    def reward(self, items, ro):
        ok = torch.tensor(
            [
                float(TASK.extract_answer(t) == it.answer)
                for i, it in enumerate(items)
                for t in ro.texts[i * G : (i + 1) * G]
            ]
        )
        return ok.view(-1, G).clone(), ok.view(-1, G), {}

    def ctx(self, batch):
        """The round's context: scripted sampling and reward, the part's state, the task position."""
        return round_context(
            batch,
            task=TASK,
            sample=self.generate,
            reward=self.reward,
            state=self.state,
            seed=self.seed,
            position=self.items_drawn,
            tok=self.engine.tok,
            group_size=G,
        )


def _batch(items, texts, logp=0.0):
    ro = text_rollouts([it.prompt for it in items], [t for g in texts for t in g], G)
    ro.logprobs = torch.full(ro.logprobs.shape, logp) * ro.completion_mask
    ok = torch.tensor([[float(TASK.extract_answer(t) == it.answer) for t in g] for it, g in zip(items, texts)])
    return Batch(items=list(items), ro=ro, rewards=ok.clone(), correct=ok)


# batch 1: accuracies [1,0,0,0] (refine 3, replay row 0), [1,1,0,1] (replay row 0), all right, all wrong (refine 4)
B1 = _batch(
    [item(1, 1), item(2, 3), item(4, 5), item(3, 3)],
    [["A:2", "A:3", "A:3", "A:3"], ["A:5", "A:5", "A:7", "A:5"], ["A:9"] * 4, ["A:1", "A:2", "A:3", "A:4"]],
    logp=-0.7,
)
# batch 2: four new questions, each [1, 1, 0, 1]: nothing to refine, four new replay entries
B2 = _batch(
    [item(5, 5), item(1, 2), item(2, 2), item(4, 4)],
    [
        ["A:10", "A:10", "A:1", "A:10"],
        ["A:3", "A:3", "A:1", "A:3"],
        ["A:4", "A:4", "A:1", "A:4"],
        ["A:8", "A:8", "A:1", "A:8"],
    ],
)


def test_first_batch_fills_the_buffers_and_adds_nothing():
    maker = FakeMaker()
    g, m = RefineReplay().extend(maker.ctx(B1))
    assert g is None and maker.calls == []  # no groups: the counts alone
    st = maker.state
    # 3 wrong samples of 1+1 and 4 of 3+3; successes of 1+1 and 2+3 (4+5 solved by all, 3+3 by none)
    assert [(e["key"], e["attempt"]) for e in st["refine"]] == [("1+1", "A:3")] * 3 + [
        ("3+3", f"A:{i}") for i in range(1, 5)
    ]
    assert list(st["replay"]) == ["1+1", "2+3"] and st["replay"]["1+1"]["row"].texts == ["A:2"]
    assert m["su01/refine_collected"] == 7 and m["su01/refine_buffer"] == 7
    assert m["su01/replay_buffer"] == 2 and m["su01/refine_frac"] == 0.0


def test_later_batch_gets_refine_and_replay_groups():
    maker, part = FakeMaker(), RefineReplay()
    part.extend(maker.ctx(B1))
    g, m = part.extend(maker.ctx(B2))
    # 4 ordinary groups -> (1 refine, 2 replay). Refine: the newest wrong answer, 3+3's "A:4"
    refine_call = [c for c in maker.calls if c[2] == "su01-refine"]
    assert refine_call == [(["3+3"], [correction_prompt(DEFAULT_TEMPLATE, "3+3=?\n", "A:4")], "su01-refine", 4, None)]
    # replay: both stored questions, G - 1 = 3 fresh rows each; 2+3's fresh rows are all right -> retired and
    # its group [1, 1, 1, 1] dropped by the zero-std filter; 1+1: fresh [1, 0, 1] + the replayed "A:2" row
    replay_call = [c for c in maker.calls if c[2] == "su01-replay"]
    assert sorted(replay_call[0][0]) == ["1+1", "2+3"] and replay_call[0][4] == G - 1
    assert [it.key for it in g.items] == ["3+3", "1+1"]
    assert g.ro.texts == REFINE["3+3"] + ["A:2", "A:3", "A:2", "A:2"]
    assert g.correct.tolist() == [[1, 0, 1, 1], [1, 0, 1, 1]]
    # the replayed row keeps its old behaviour log-probs (-0.7 per token), the fresh ones theirs (0)
    assert g.ro.logprobs[7, :3].tolist() == pytest.approx([-0.7] * 3) and g.ro.logprobs[4].abs().sum() == 0
    # final batch 4 + 1 + 1 = 6 groups: refine 1/6, replay 1/6
    assert (m["su01/refine_groups"], m["su01/replay_groups"]) == (1.0, 1.0)
    assert m["su01/refine_frac"] == pytest.approx(1 / 6) and m["su01/replay_frac"] == pytest.approx(1 / 6)
    assert m["su01/replay_retired"] == 1.0 and m["su01/replay_dropped_zero_std"] == 1.0
    assert m["su01/refine_accuracy"] == 0.75 and m["su01/replay_fresh_accuracy"] == pytest.approx(5 / 6)
    # 3+3 had its one attempt: its other samples left; 1+1's three wait. Replay: 1+1 and batch 2's four
    st = maker.state
    assert m["su01/refine_buffer"] == 3 and st["refined"] == {"3+3": True}
    assert list(st["replay"]) == ["1+1", "5+5", "1+2", "2+2", "4+4"] and m["su01/replay_buffer"] == 5


def test_refine_samples_are_never_collected():
    # the round's own groups (kind 1) are skipped: only ordinary groups feed the buffers
    maker = FakeMaker()
    b = dataclasses.replace(B1, kinds=torch.tensor([1, 1, 1, 0]))
    RefineReplay().extend(maker.ctx(b))
    assert [e["key"] for e in maker.state["refine"]] == ["3+3"] * 4 and maker.state["replay"] == {}


def test_bad_settings_are_refused():
    with pytest.raises(UserError, match=r"'refine_replay.replay_share' = 0.5 .* \[0, 1 - refine_replay.refine_share\)"):
        check_part(RefineReplay(refine_share=0.6, replay_share=0.5))
    with pytest.raises(UserError, match="'refine_replay.template' = '{prompt} only'"):
        check_part(RefineReplay(template="{prompt} only"))


# ------------------------------------------------------------------ the recipe, 3 steps on the shipped base


def _rows(run):
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_su01_trains_three_steps_and_checkpoints_its_buffers(tmp_path, monkeypatch):
    from reasonrl.config.train import TrainConfig
    from reasonrl.recipes import get_recipe
    from reasonrl.loop.run import train_run
    from reasonrl.loop.trainer import Trainer

    recipe = get_recipe("su01")
    assert recipe.loss.ratio == "sequence" and recipe.group_filter is not None and recipe.refine_replay is not None
    recipe = dataclasses.replace(recipe, group_size=G)
    seen, real_update = [], Trainer.update

    def spy(self, b, minibatches=None):
        seen.append(b.group_kinds().clone())
        return real_update(self, b, minibatches)

    monkeypatch.setattr(Trainer, "update", spy)
    cfg = TrainConfig(
        out=str(tmp_path / "a"),
        recipe="su01",
        steps=3,
        prompts_per_step=4,
        eval_every=0,
        final_eval_problems=0,
        save_every=1,
        keep_last=0,
    )
    train_run(cfg, recipe)
    rows = _rows(tmp_path / "a")
    assert [r["step"] for r in rows] == [1, 2, 3] and len(seen) == 3
    assert rows[0]["su01/refine_groups"] == 0 and rows[0]["su01/replay_groups"] == 0  # nothing buffered yet
    for r, kinds in zip(rows, seen):
        n_main = int((kinds == 0).sum())
        n_ref, n_rep = r["su01/refine_groups"], r["su01/replay_groups"]
        assert int((kinds == 1).sum()) == n_ref + n_rep  # the round's groups reach the update
        assert r["su01/refine_frac"] == pytest.approx(n_ref / (n_main + n_ref + n_rep))
        assert r["su01/replay_frac"] == pytest.approx(n_rep / (n_main + n_ref + n_rep))
        assert n_ref <= extra_group_counts(n_main, 0.2, 0.25)[0] and all(
            math.isfinite(v) for v in r.values() if isinstance(v, float)
        )
    # the buffers grow from the ordinary groups: at least one wrong sample or success was kept
    assert rows[0]["su01/refine_buffer"] + rows[0]["su01/replay_buffer"] > 0
    assert any(r["su01/refine_groups"] + r["su01/replay_groups"] > 0 for r in rows[1:])
    # the checkpoint after step 3 holds the buffers the last step left, keyed by item key
    state = torch.load(tmp_path / "a" / "checkpoints" / "step-000003" / "trainer_state.pt", weights_only=False)["state"]
    su = state["parts"]["refine_replay"]
    assert len(su["refine"]) == rows[2]["su01/refine_buffer"] and len(su["replay"]) == rows[2]["su01/replay_buffer"]
    assert all(k == v["item"].key for k, v in su["replay"].items())


def test_buffers_survive_a_checkpoint_round_trip():
    # the trainer saves the part state with torch.save and loads it with torch.load(weights_only=False): a maker
    # restored from the saved state after batch 1 makes the same batch-2 groups as the one that went on
    import io

    straight, resumed, part = FakeMaker(), FakeMaker(), RefineReplay()
    part.extend(straight.ctx(B1))
    blob = io.BytesIO()
    torch.save(straight.state, blob)
    blob.seek(0)
    resumed.state = torch.load(blob, weights_only=False)
    (a, ma), (b, mb) = part.extend(straight.ctx(B2)), part.extend(resumed.ctx(B2))
    assert [it.key for it in a.items] == [it.key for it in b.items] and a.ro.texts == b.ro.texts
    assert torch.equal(a.ro.logprobs, b.ro.logprobs) and ma == mb


def test_dotted_keys_change_and_turn_off_the_round():
    from reasonrl.config.train import TrainConfig, apply_overrides, split_config
    from reasonrl.recipes import get_recipe

    _, over = split_config({"refine_replay": {"refine_share": 0.1, "capacity": 8}})
    r = apply_overrides(get_recipe("su01"), over)
    assert (r.refine_replay.refine_share, r.refine_replay.replay_share, r.refine_replay.capacity) == (0.1, 0.25, 8)
    _, off = split_config({"refine_replay": None})
    assert apply_overrides(get_recipe("su01"), off).refine_replay is None
    with pytest.raises(UserError, match=r"'refine_replay.replay_share' = 0.25 .* 1 - refine_replay.refine_share"):
        check_run(
            TrainConfig(),
            apply_overrides(get_recipe("su01"), split_config({"refine_replay": {"refine_share": 0.9}})[1]),
        )
