"""Every task-bound recipe trains end to end on its task with the tiny model: a few steps, finite
metrics, and the method's own metrics logged."""
import dataclasses
import json
import math

import pytest

from reasonrl.config import TrainConfig
from reasonrl.recipes import get_recipe
from reasonrl.run import train_run

# recipe -> (task, task options, metric keys the method must log at every step)
CASES = {
    "tempo": ("temporal", {}, ["reward/tempo/leak_rate", "reward/tempo/task_score", "reward/tempo/performance_mode_frac"]),
    "sspo": ("diagnosis", {}, ["reward/sspo/format_rate", "reward/sspo/set_score", "reward/sspo/exact_rate"]),
    "vspo": ("arithmetic", {"spaced_rate": 0.05}, ["reward/spaced/mean", "reward/correct/mean"]),
    "codethinker": ("code", {}, ["reward/consistency/c_mean", "beam/branches", "beam/prefix_tokens_mean"]),
    "sapo": ("recommend", {}, ["steps/reward_level0", "steps/reward_level2", "steps/token_coverage"]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_task_recipe_trains_end_to_end(name, tiny_dir, tmp_path):
    task, options, keys = CASES[name]
    cfg = TrainConfig(model=str(tiny_dir), out=str(tmp_path / "run"), recipe=name, task=task, task_options=options,
                      steps=2, prompts_per_step=2, eval_every=2, eval_problems=4, final_eval_problems=4,
                      final_eval_k=0, save_every=0)
    recipe = dataclasses.replace(get_recipe(name), group_size=4)
    if recipe.steering is not None:  # the test model is the 2-layer tiny size; vspo steers layer 2 of the small one
        recipe = dataclasses.replace(recipe, steering=dataclasses.replace(recipe.steering, layer=1))
    summary = train_run(cfg, recipe)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        assert all(math.isfinite(v) for v in r.values() if isinstance(v, float)), r
        assert set(keys) <= set(r), set(keys) - set(r)
    assert math.isfinite(summary["after"]["pass@1"])


def test_a_task_diagnostic_reaches_the_evaluation_summary(tiny_dir, tmp_path):
    # the temporal task reports the leak rate of greedy held-out outputs beside pass@1, for any recipe
    cfg = TrainConfig(model=str(tiny_dir), out=str(tmp_path / "run"), task="temporal", steps=1, prompts_per_step=2,
                      eval_every=0, final_eval_problems=4, final_eval_k=0, save_every=0)
    summary = train_run(cfg, dataclasses.replace(get_recipe("grpo"), group_size=2))
    assert 0.0 <= summary["before"]["leak_rate"] <= 1.0 and "leak_frac" in summary["after"]


def test_a_zero_task_weight_leaves_only_the_method_reward(tiny_dir, tmp_path):
    # tempo's reward replaces the verifier's: reward/mean must equal the TEMPO reward's own mean
    cfg = TrainConfig(model=str(tiny_dir), out=str(tmp_path / "run"), recipe="tempo", task="temporal", steps=1,
                      prompts_per_step=2, eval_every=0, final_eval_problems=0, save_every=0)
    train_run(cfg, dataclasses.replace(get_recipe("tempo"), group_size=2))
    row = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert row["reward/mean"] == pytest.approx(row["reward/tempo/mean"], abs=1e-6)
