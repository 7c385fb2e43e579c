"""Reward models: preference pairs (data/preferences.py), the explain task's judge, Bradley-Terry training
(rm_train.py, `reasonrl rm train`) and a trained directory scoring rollouts as a reward."""

import json
import random

import pytest
import torch
from typer.testing import CliRunner

from reasonrl.cli import app
from reasonrl.data.preferences import judged_pairs, pair_lines, read_pairs, split_pairs
from reasonrl.errors import UserError
from reasonrl.models.reward_model import RMReward, load_reward_model
from reasonrl.rewards.base import score_rewards
from reasonrl.rewards.preference import RewardModel, as_reward, style_mix
from reasonrl.tasks import get_task, take_items
from reasonrl.tasks.explain import Verdict, judge


def _pairs_file(path, n_prompts=24):
    task = get_task("explain", max_digits=2)
    pairs = judged_pairs(None, None, task, n_prompts, samples=0, per_prompt=3)  # the task's edits alone: no model
    path.write_text(pair_lines(pairs))
    return path, pairs


def test_the_judge_prefers_correct_then_complete_then_concise():
    # 47+85: canonical working 7+5+0=12,4+8+1=13 / A:132 (3 steps with the answer line)
    good = "7+5+0=12,4+8+1=13\nA:132"
    assert judge("47+85", good) == Verdict(True, 1.0, 0)
    assert judge("47+85", good + "\nA:132") == Verdict(True, 1.0, -6)  # 6 characters beyond the working
    assert judge("47+85", "A:132") == Verdict(True, 0.0, 0)  # right answer, no working: step 1 is wrong
    assert judge("47+85", "7+5+0=12,4+8+1=14\nA:132") == Verdict(True, 1 / 3, 0)  # step 2 wrong: 1 of 3 right
    assert judge("47+85", "7+5+0=12,4+8+1=13\nA:131") == Verdict(False, 2 / 3, 0)
    ranked = sorted([good + "\nA:132", "A:132", good, "7+5+0=12,4+8+1=13\nA:131"], key=lambda c: judge("47+85", c))
    assert ranked == ["7+5+0=12,4+8+1=13\nA:131", "A:132", good + "\nA:132", good]


def test_explain_items_share_the_arithmetic_split_and_state_the_fact():
    explain, arith = get_task("explain"), get_task("arithmetic")
    for it in take_items(explain, "test", 20, seed=0):
        assert f"{it.key}={it.answer}" in it.prompt
    a_keys = {it.key for it in take_items(arith, "test", 50, seed=3)}
    e_train = {it.key for it in take_items(explain, "train", 400, seed=3)}
    assert not a_keys & e_train  # a held-out arithmetic problem is never an explain training fact


def test_pairs_are_judged_and_read_back_and_bad_lines_are_named(tmp_path):
    path, pairs = _pairs_file(tmp_path / "p.jsonl")
    task = get_task("explain", max_digits=2)
    assert len(pairs) == 24 * 3
    items = {it.prompt: it for it in take_items(task, "train", 24, seed=0)}
    assert all(judge(items[p["prompt"]].key, p["chosen"]) > judge(items[p["prompt"]].key, p["rejected"]) for p in pairs)
    assert read_pairs(path)[0] == {**pairs[0], "margin": 0.0}
    train, held = split_pairs(read_pairs(path), 0.25)
    assert {p["prompt"] for p in train}.isdisjoint({p["prompt"] for p in held}) and len(train) + len(held) == 72
    (tmp_path / "bad.jsonl").write_text(json.dumps(pairs[0]) + "\n" + json.dumps({"prompt": "x", "chosen": "y"}) + "\n")
    with pytest.raises(UserError, match=r"bad.jsonl:2: a pair needs text fields .*\['rejected'\]"):
        read_pairs(tmp_path / "bad.jsonl")
    with pytest.raises(UserError, match="has no scripted judge"):
        judged_pairs(None, None, get_task("arithmetic"), 2, samples=0)


def test_style_mix_by_hand_and_any_scorer_is_a_reward():
    # target 64 tokens, coef 0.5: 50 tokens -> no penalty; 100 tokens -> 0.5 * 36 / 64 = 0.28125 off
    assert style_mix([1.0, 1.0], [50, 100], 0.5, 64) == [1.0, 0.71875]
    assert style_mix([0.3], [500], 0.0, 64) == [0.3]

    class Longer:
        def score(self, prompts, completions):
            return [float(len(c)) for c in completions]

    assert isinstance(Longer(), RewardModel)
    res = score_rewards(as_reward(Longer()), ["p", "p"], ["ab", "abcd"])
    assert res.values == [2.0, 4.0] and res.metrics["reward/rm/mean"] == 3.0


def test_a_reward_model_saved_by_rm_train_loads_as_a_reward(tmp_path):
    path, pairs = _pairs_file(tmp_path / "p.jsonl")
    out = tmp_path / "rm"
    result = CliRunner().invoke(
        app,
        [
            "rm",
            "train",
            "--pairs",
            str(path),
            "--model",
            "tiny:tiny",
            "--out",
            str(out),
            "--steps",
            "3",
            "--batch-size",
            "4",
            "--eval-frac",
            "0.3",
        ],
    )
    assert result.exit_code == 0, result.output
    metrics = json.loads((out / "rm_metrics.json").read_text())
    # the held-out accuracy re-counted here: the prompts split_pairs holds out (eval_frac 0.3, seed 0), each pair
    # scored on its own through the saved model's score()
    _, held = split_pairs(pairs, 0.3, 0)
    saved = load_reward_model(str(out))
    right = sum(
        saved.score([p["prompt"]], [p["chosen"]])[0] > saved.score([p["prompt"]], [p["rejected"]])[0] for p in held
    )
    assert metrics["heldout_pairs"] == len(held) > 0 and metrics["heldout_accuracy"] == pytest.approx(right / len(held))
    reward = RMReward(model=str(out))
    assert reward.problems() == []
    prompts, completions = ["why 47+85=132\n"] * 3, ["7+5+0=12,4+8+1=13\nA:132", "A:132", "x" * 40]
    res = score_rewards(reward, prompts, completions, {"completion_lengths": [28, 5, 40]})
    assert len(res.values) == 3 and all(isinstance(v, float) for v in res.values)
    assert res.metrics["reward/rm/length_penalty"] == 0.0  # style_mix off by default
    # a row's score does not depend on the rows padded beside it (positions come from the mask)
    rm = load_reward_model(str(out))
    alone = rm.score(prompts[1:2], completions[1:2])[0]
    assert alone == pytest.approx(res.values[1], abs=1e-5)
    # with GRLO's inferred length control: 40 tokens over a 20-token target -> 1.0 * 20 / 20 = 1 off
    mixed = score_rewards(
        RMReward(model=str(out), length_coef=1.0, length_target=20),
        prompts,
        completions,
        {"completion_lengths": [28, 5, 40]},
    )
    assert mixed.values[2] == pytest.approx(res.values[2] - 1.0, abs=1e-5)
    assert mixed.values[0] == pytest.approx(res.values[0] - 0.4, abs=1e-5)  # 28 tokens: 8 / 20 = 0.4 off


def test_a_causal_lm_with_a_value_head_is_a_reward_model(tmp_path):
    from reasonrl.models import build_tiny
    from reasonrl.models.critic import critic_from_policy, save_critic

    model, tok = build_tiny("tiny", seed=0)
    critic = critic_from_policy(model, seed=1)
    save_critic(critic, tmp_path / "vh")
    tok.save_pretrained(tmp_path / "vh")
    rm = load_reward_model(str(tmp_path / "vh"))
    assert rm.head is not None
    ids = tok(["why 1+1=2\nA:2"], return_tensors="pt", add_special_tokens=False)["input_ids"]
    with torch.no_grad():  # the head read at the last token of prompt + completion
        want = critic.head(critic.decoder(input_ids=ids).last_hidden_state[:, -1]).item()
    assert rm.score(["why 1+1=2\n"], ["A:2"])[0] == pytest.approx(want, abs=1e-5)


def test_a_run_without_a_reward_model_directory_is_refused_before_loading():
    from reasonrl.config.train import TrainConfig
    from reasonrl.recipes import get_recipe
    from reasonrl.config.validate import problems

    found = problems(TrainConfig(task="explain"), get_recipe("grlo"))
    assert found == [
        "config key 'rewards.rm.model' is not set: give a reward model directory (train one with "
        "`reasonrl rm train --pairs PAIRS.jsonl --out DIR`, docs/ppo.md)"
    ]
    with pytest.raises(UserError, match="is not set"):
        RMReward().score(["p"], ["c"])


@pytest.mark.slow
def test_bt_training_learns_the_judges_preferences_on_held_out_prompts(tmp_path):
    # 120 prompts x 3 pairs of the task's edits; 80 steps of 16 pairs from a fresh tiny model: the held-out
    # pairwise accuracy (66 pairs of prompts never trained on) rises above chance. Measured (seeds 0-5 of this
    # set-up, before -> after): .47->.65, .55->.72, .42->.60, .42->.50, .30->.64, .54->.72; seed 0 is the
    # one run here. 0.65 of 66 is 2.4 binomial sigmas above 0.5: a weak but real signal from a model this small.
    from reasonrl.loop.rm_train import RMConfig, train_rm

    _, pairs = _pairs_file(tmp_path / "p.jsonl", n_prompts=120)
    random.Random(0).shuffle(pairs)
    res = train_rm(
        [{**p, "margin": 0.0} for p in pairs],
        RMConfig(model="tiny:tiny", steps=80, batch_size=16, lr=1e-3, eval_frac=0.2),
        tmp_path / "rm",
    )
    assert res["heldout_pairs"] == 66
    assert res["heldout_accuracy"] > 0.6 and res["heldout_accuracy"] - res["heldout_accuracy_before"] > 0.15
