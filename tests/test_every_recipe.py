"""Every registered recipe runs two training steps end to end on the CPU (the tiny model, its task, in
process) and logs its own metrics: the default tier's one short end-to-end test per recipe. What each
recipe runs on and logs is its own ``Recipe.smoke`` (task, options, metric keys, smaller settings), so a
recipe dropped into src/reasonrl/recipes/ is tested here with no edit to this file. The
longer runs of each method (run folders, resumes, several ranks, the readings of its metrics) are
in its own test file, marked ``slow``."""

import copy
import dataclasses
import math

import pytest

from reasonrl.config.train import DataOpts, Lora, TrainConfig, apply_overrides, dotted_to_nested, split_config
from reasonrl.recipes import RECIPES, get_recipe
from reasonrl.rewards.base import reward_name
from reasonrl.tasks import get_task, take_items
from reasonrl.loop.trainer import Trainer
from reasonrl.config.validate import check_run

from fakes import write_drafts


def small(name: str, task, tmp_path) -> tuple:
    """(recipe, run-config changes) for a two-step run on ``task``: groups of 4, short completions, the
    recipe's own smoke changes (``Recipe.smoke.changes``: its parts' smallest settings that still exercise
    them, dotted keys as on the command line), and what a capability needs whatever the recipe: a pool, an
    adapter, a drafts file, an untrained reward model, a judge function."""
    r = get_recipe(name)
    _, over = split_config(dotted_to_nested(dict(r.smoke.changes)))
    r = apply_overrides(r, over)
    changes = {
        "group_size": 1 if r.group_size == 1 else 4,
        "sampling": dataclasses.replace(r.sampling, max_new_tokens=24),
    }
    run = {}
    if r.drafts is not None:
        path = write_drafts(tmp_path / "drafts.jsonl", take_items(task, "train", 8, seed=0), flags=True)
        changes["drafts"] = dataclasses.replace(r.drafts, file=str(path))
    if "pool" in r.needs:
        run["data"] = DataOpts(pool=8)
    if "lora" in r.needs:
        run["lora"] = Lora(r=4, alpha=8.0)
    if any(reward_name(fn) == "rm" for fn, _ in r.extra_rewards):  # an untrained reward model: the plumbing only
        from reasonrl.loop.rm_train import new_reward_model

        rm = new_reward_model("tiny:tiny", seed=0)
        rm.model.save_pretrained(tmp_path / "rm")
        rm.tok.save_pretrained(tmp_path / "rm")
        changes["extra_rewards"] = tuple(
            (dataclasses.replace(fn, model=str(tmp_path / "rm")) if reward_name(fn) == "rm" else fn, w)
            for fn, w in r.extra_rewards
        )
    if any(reward_name(fn) == "judge" for fn, _ in r.extra_rewards):  # a judge function: exact match
        (tmp_path / "judge.py").write_text(
            "def judge(prompts, questions, golds, answers, evidence):\n"
            "    return [a.strip() == g for a, g in zip(answers, golds)]\n"
        )
        changes["extra_rewards"] = tuple(
            (dataclasses.replace(fn, backend=f"{tmp_path / 'judge.py'}:judge") if reward_name(fn) == "judge" else fn, w)
            for fn, w in r.extra_rewards
        )
    return dataclasses.replace(r, **changes), run


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_recipe_runs_two_steps_and_logs_its_own_metrics(name, request, tmp_path):
    smoke = get_recipe(name).smoke
    task_name, options, keys = smoke.task, dict(smoke.task_options), smoke.metrics
    # one-digit sums: the tiny model gets some right, so groups vary and every part has rows to act on
    options = {"max_digits": 1, **options} if task_name == "arithmetic" else options
    base = get_task(task_name, **options)
    recipe, run = small(name, base, tmp_path)
    cfg = TrainConfig(
        recipe=name,
        task=task_name,
        task_options=options,
        steps=2,
        prompts_per_step=2,
        eval_every=0,
        save_every=0,
        final_eval_problems=0,
        micro_batch_size=8,
        max_rows=64,
        **run,
    )
    check_run(cfg, recipe)
    # the diffusion recipes' own model (run_defaults: the shipped masked-diffusion LM), else the warmed-up tiny one
    diffusion = dict(recipe.run_defaults).get("model") == "builtin:diffusion"
    start = request.getfixturevalue("sharp_mdlm" if diffusion else "sharp_tiny")
    model, tok = copy.deepcopy(start[0]).train(), start[1]
    task, setup = recipe.wrap_task(base, tok, cfg.seed)
    trainer = Trainer(model, tok, task, recipe, cfg, tmp_path)
    trainer.setup_metrics.update(setup)  # as the run does (loop/run.py)
    rows = [trainer.train_step() for _ in range(2)]
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        assert all(math.isfinite(v) for v in r.values() if isinstance(v, float)), r
        assert {"reward/mean", "accuracy", "lr", "nonfinite", "time/update"} <= set(r)
        assert set(keys) <= set(r), (r["step"], sorted(set(keys) - set(r)))
