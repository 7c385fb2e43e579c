"""The physics_r1 recipe: its parts composed as the spec says (fast), and 3 training steps end to end on
the tiny model warmed up on the multipart task (spec envs-selfplay-eval section 7(b))."""

import copy
import dataclasses
import json
import math

import pytest
import torch

from reasonrl.config.train import TrainConfig
from reasonrl.recipes import get_recipe
from reasonrl.rewards import score_rewards
from reasonrl.loop.run import train_run
from reasonrl.loop.sft import SFTConfig, sft
from reasonrl.tasks import get_task


def test_the_recipe_parts_compose_as_the_spec_says():
    r = get_recipe("physics_r1")
    (match, w_match), (overlong, w_over) = r.extra_rewards
    assert (w_match, w_over, r.task_reward_weight) == (1.0, 1.0, 0.0)
    # budget 100, cache 20%: free up to 80 tokens, then (80 - L) / 20: L = 90 -> -0.5, L = 101 -> -1
    cols = {"answer": ["7; 12"] * 3, "max_new_tokens": 100, "completion_lengths": [50, 90, 101]}
    texts = [r"\boxed{7; 12}", r"\boxed{7; 12}", r"\boxed{7; 13}"]
    got_match = score_rewards(match, ["p"] * 3, texts, cols).values
    got_over = score_rewards(overlong, ["p"] * 3, texts, cols).values
    total = [w_match * a + w_over * b for a, b in zip(got_match, got_over)]
    assert total == pytest.approx([1.0, 0.5, -1.0])
    # dynamic sampling on correctness: a group all right or all wrong is dropped, a mixed one kept
    correct = torch.tensor([[1.0, 1.0], [0.0, 0.0], [1.0, 0.0]])
    assert r.group_filter.keep(torch.tensor(total[:1] * 6).view(3, 2), correct).tolist() == [False, False, True]
    assert (r.loss.ratio, r.loss.clip_low, r.loss.clip_high) == ("sequence", 3e-4, 4e-4)


@pytest.fixture(scope="module")
def multipart_dir(sharp_tiny, tmp_path_factory):
    """The arithmetic-warmed tiny model after a short supervised pass on the multipart task: it writes
    boxes and sometimes the right numbers, so the reward and the group filter both have work."""
    from reasonrl.models import save_model

    model, tok = copy.deepcopy(sharp_tiny[0]), sharp_tiny[1]
    sft(model, tok, get_task("multipart"), SFTConfig(steps=120, batch_size=32, lr=3e-3, warmup=5, eval_every=0))
    model.eval()
    return save_model(model, tok, tmp_path_factory.mktemp("tiny_multipart"))


@pytest.mark.slow
def test_physics_r1_trains_three_steps_on_the_multipart_task(multipart_dir, tmp_path):
    cfg = TrainConfig(
        model=str(multipart_dir),
        out=str(tmp_path / "run"),
        recipe="physics_r1",
        task="multipart",
        steps=3,
        prompts_per_step=2,
        eval_every=3,
        eval_problems=4,
        final_eval_problems=4,
        final_eval_k=0,
        save_every=0,
    )
    summary = train_run(cfg, dataclasses.replace(get_recipe("physics_r1"), group_size=4))
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    pm, ov = "reward/physics_match/", "reward/overlong/"
    for r in rows:
        assert all(math.isfinite(v) for v in r.values() if isinstance(v, float)), r
        # the reward is physics_match + overlong, both weight 1, the verifier weighted 0
        assert r["reward/mean"] == pytest.approx(r[pm + "mean"] + r[ov + "mean"], abs=1e-6)
        # on this task the verifier IS physics_match, so its mean is the accuracy the filter reads
        assert r[pm + "mean"] == pytest.approx(r["accuracy"], abs=1e-6)
        assert 0.0 <= r[pm + "part_acc"] <= 1.0 and 0.0 <= r[pm + "unparsed_frac"] <= 1.0
        assert r[pm + "mcq_frac"] == 0.0  # the multipart golds are numbers
        # dynamic sampling: at most 3 rounds of 2 prompts, kept + dropped = generated, kept <= 2
        assert 1 <= r["dynamic/rounds"] <= 3 and r["dynamic/groups_kept"] <= 2
        assert r["dynamic/groups_kept"] + r["dynamic/groups_dropped"] == r["dynamic/prompts_generated"]
        assert r["dynamic/prompts_generated"] == 2 * r["dynamic/rounds"] or r["dynamic/groups_kept"] == 2
    assert math.isfinite(summary["after"]["pass@1"])


def test_the_dense_reward_is_a_config_option_of_the_recipe():
    from reasonrl.rewards.options import apply_reward_overrides, rewards_dict

    extra = apply_reward_overrides(
        get_recipe("physics_r1").extra_rewards, {"physics_match": {"dense": True, "dense_answer": "fraction"}}
    )
    (match, _), _ = extra
    # one of two parts right: r_ans 0.5 (fraction) + 0.10 box + 0.20 form = 0.8
    assert match([" "], [r"\boxed{7; 13}"], answer=["7; 12"]) == pytest.approx([0.8])
    assert rewards_dict(extra)["physics_match"]["dense"] is True  # recorded in config.yaml
    with pytest.raises(ValueError, match="not an option"):
        apply_reward_overrides(extra, {"physics_match": {"dense_mode": 1}})
