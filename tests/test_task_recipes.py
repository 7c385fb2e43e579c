"""Every task-bound recipe trains end to end on its task with the tiny model: a few steps, finite
metrics, and the method's own metrics logged."""

import dataclasses
import json
import math

import pytest

from reasonrl.config.train import TrainConfig
from reasonrl.recipes import get_recipe
from reasonrl.loop.run import train_run

# recipe -> (task, task options, metric keys the method must log at every step)
CASES = {
    "tempo": (
        "temporal",
        {},
        [
            "reward/tempo/leak_rate",
            "reward/tempo/task_score",
            "reward/tempo/performance_mode_frac",
            "reward/tempo/leak_frac_mean",
            "reward/tempo/claims_mean",
            "reward/tempo/mean",
        ],
    ),
    "sspo": (
        "diagnosis",
        {},
        [
            "reward/sspo/format_rate",
            "reward/sspo/set_score",
            "reward/sspo/exact_rate",
            "reward/sspo/unparsed_frac",
            "reward/sspo/mean",
        ],
    ),
    "vspo": ("arithmetic", {"spaced_rate": 0.05}, ["reward/spaced/mean", "reward/correct/mean"]),
    "codethinker": (
        "code",
        {},
        [
            "reward/consistency/c_mean",
            "beam/branches",
            "beam/prefix_tokens_mean",
            "beam/budget",
            "beam/completions_per_prompt",
            "beam/prefix_frac_mean",
            "reward/consistency/mean",
            "reward/consistency/recall_mean",
        ],
    ),
    "sapo": (
        "recommend",
        {},
        ["steps/reward_level0", "steps/reward_level1", "steps/reward_level2", "steps/token_coverage"],
    ),
}
# metric families of the optional parts: a recipe logs exactly those of its own parts
FAMILIES = ("dynamic/", "edas/", "veto/", "stage/", "sage/", "corr/", "loss/kl", "steps/", "beam/")
OWN_FAMILIES = {"tempo": set(), "sspo": set(), "vspo": set(), "codethinker": {"beam/"}, "sapo": {"steps/"}}


def _tempo_acted(r):
    # per-response modes (min_claims 0): a response is in performance mode iff it leaks nothing. Its mean is
    # the task score less the leaky rows' task scores (each <= 1) less their leak fractions; the verifier's
    # weight is 0, so the total reward is TEMPO's alone
    t = "reward/tempo/"
    assert r[t + "performance_mode_frac"] == pytest.approx(1.0 - r[t + "leak_rate"], abs=1e-9)
    low = r[t + "task_score"] - r[t + "leak_rate"] - r[t + "leak_frac_mean"]
    assert low - 1e-6 <= r[t + "mean"] <= r[t + "task_score"] - r[t + "leak_frac_mean"] + 1e-6
    assert r["reward/mean"] == pytest.approx(r[t + "mean"], abs=1e-6)


def _sspo_acted(r):
    # R = 1 x format + 1 x Jaccard (no gate), the verifier weighted 0; an exact set has Jaccard 1
    s = "reward/sspo/"
    assert r[s + "mean"] == pytest.approx(r[s + "format_rate"] + r[s + "set_score"], abs=1e-6)
    assert r["reward/mean"] == pytest.approx(r[s + "mean"], abs=1e-6)
    assert 0.0 <= r[s + "exact_rate"] <= r[s + "set_score"] + 1e-9 and 0.0 <= r[s + "unparsed_frac"] <= 1.0


def _vspo_acted(r):
    # reward = task + 0.5 x behaviour (the spaced style)
    assert 0.0 <= r["reward/spaced/mean"] <= 1.0
    assert r["reward/mean"] == pytest.approx(r["reward/correct/mean"] + 0.5 * r["reward/spaced/mean"], abs=1e-6)


def _codethinker_acted(r):
    # G = 4, first_frac 0.5: round(4 * 0.5) = 2 independent samples per prompt and 4 - 2 = 2 branched from
    # min(k_max=2, 2) prefixes: 2 prompts x 2 = 4 branches, 2 + 4 / 2 = 4 completions per prompt = the budget
    assert (r["beam/budget"], r["beam/branches"], r["beam/completions_per_prompt"]) == (4.0, 4.0, 4.0)
    assert 0.0 <= r["beam/prefix_frac_mean"] <= 1.0 and r["beam/prefix_tokens_mean"] >= 0.0
    assert 0.0 <= r["reward/consistency/c_mean"] <= 1.0
    assert r["reward/mean"] == pytest.approx(r["reward/consistency/mean"], abs=1e-6)  # the verifier weighted 0


def _sapo_acted(r):
    # three SID steps per answer (the task's default levels=3), each a position-match rate; some tokens lie
    # inside a step (they carry the per-step advantages), tokens outside (newlines, EOS) get 0
    assert all(0.0 <= r[f"steps/reward_level{k}"] <= 1.0 for k in range(3)) and "steps/reward_level3" not in r
    assert 0.0 < r["steps/token_coverage"] <= 1.0


ACTED = {
    "tempo": _tempo_acted,
    "sspo": _sspo_acted,
    "vspo": _vspo_acted,
    "codethinker": _codethinker_acted,
    "sapo": _sapo_acted,
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_task_recipe_trains_end_to_end(name, tiny_dir, tmp_path):
    task, options, keys = CASES[name]
    cfg = TrainConfig(
        model=str(tiny_dir),
        out=str(tmp_path / "run"),
        recipe=name,
        task=task,
        task_options=options,
        steps=2,
        prompts_per_step=2,
        eval_every=2,
        eval_problems=4,
        final_eval_problems=4,
        final_eval_k=0,
        save_every=0,
    )
    recipe = dataclasses.replace(get_recipe(name), group_size=4)
    if recipe.steering is not None:  # the test model is the 2-layer tiny size; vspo steers layer 2 of the small one
        recipe = dataclasses.replace(recipe, steering=dataclasses.replace(recipe.steering, layer=1))
    summary = train_run(cfg, recipe)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        assert all(math.isfinite(v) for v in r.values() if isinstance(v, float)), r
        assert set(keys) <= set(r), set(keys) - set(r)
        ACTED[name](r)
    assert {f for f in FAMILIES for r in rows for k in r if k.startswith(f)} == OWN_FAMILIES[name]
    assert math.isfinite(summary["after"]["pass@1"])


@pytest.mark.slow
def test_a_task_diagnostic_reaches_the_evaluation_summary(tiny_dir, tmp_path):
    # the temporal task reports the leak rate of greedy held-out outputs beside pass@1, for any recipe
    cfg = TrainConfig(
        model=str(tiny_dir),
        out=str(tmp_path / "run"),
        task="temporal",
        steps=1,
        prompts_per_step=2,
        eval_every=0,
        final_eval_problems=4,
        final_eval_k=0,
        save_every=0,
    )
    summary = train_run(cfg, dataclasses.replace(get_recipe("grpo"), group_size=2))
    assert 0.0 <= summary["before"]["leak_rate"] <= 1.0 and "leak_frac" in summary["after"]


@pytest.mark.slow
def test_a_zero_task_weight_leaves_only_the_method_reward(tiny_dir, tmp_path):
    # tempo's reward replaces the verifier's: reward/mean must equal the TEMPO reward's own mean
    cfg = TrainConfig(
        model=str(tiny_dir),
        out=str(tmp_path / "run"),
        recipe="tempo",
        task="temporal",
        steps=1,
        prompts_per_step=2,
        eval_every=0,
        final_eval_problems=0,
        save_every=0,
    )
    train_run(cfg, dataclasses.replace(get_recipe("tempo"), group_size=2))
    row = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert row["reward/mean"] == pytest.approx(row["reward/tempo/mean"], abs=1e-6)
