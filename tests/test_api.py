"""``reasonrl.train`` (issue 46 item 1): Python objects in, the command line's run out. The training itself is
``train_run`` (tested everywhere else); here: what each argument becomes, and that every recipe builds the same
run through the API as through ``reasonrl train``."""

import json

import pytest

import reasonrl
from reasonrl.api import prepare
from reasonrl.commands.common import checked_run
from reasonrl.config.train import resolved_dict
from reasonrl.config.validate import check_inputs
from reasonrl.errors import UserError
from reasonrl.recipes import RECIPES


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_every_recipe_builds_the_same_run_as_the_command_line(name, tmp_path):
    try:  # what `reasonrl train` checks before loading (cli.train: checked_run, then check_inputs)
        cli_cfg, cli_recipe = checked_run(["optim.lr=2e-5"], name, None, None, 3, tmp_path / "r", False)
        check_inputs(cli_cfg, cli_recipe)
    except UserError as err:  # a recipe that needs a key set (codeact_judge's judge) or a task with an ability its
        # parts need (codethinker's branching, sapo's step rewards): the same line from the API
        with pytest.raises(UserError) as info:
            prepare(None, None, recipe=name, out=tmp_path / "r", steps=3, **{"optim.lr": 2e-5})
        assert str(info.value) == str(err)
        return
    cfg, recipe = prepare(None, None, recipe=name, out=tmp_path / "r", steps=3, **{"optim.lr": 2e-5})
    assert cfg == cli_cfg and resolved_dict(cfg, recipe) == resolved_dict(cli_cfg, cli_recipe)


def test_rows_become_a_file_task_and_a_function_a_weighted_reward(tmp_path):
    rows = [{"prompt": f"{a}+1=", "answer": str(a + 1)} for a in range(20)]

    def brief(completions, **kwargs):
        return [0.0 for _ in completions]

    cfg, recipe = prepare(
        None,
        rows,
        [brief],
        eval_dataset=rows[:4],
        reward_weights=[2.0, 0.5],
        out=tmp_path / "r",
        eval_every=0,
        optim={"lr": 1e-5},
    )
    assert cfg.task == str(tmp_path / "r/data/train.jsonl") and cfg.task_options == {
        "test_path": str(tmp_path / "r/data/test.jsonl")
    }
    assert [json.loads(line) for line in (tmp_path / "r/data/test.jsonl").read_text().splitlines()] == rows[:4]
    assert recipe.task_reward_weight == 2.0 and [(fn.name, w) for fn, w in recipe.extra_rewards] == [("brief", 0.5)]
    assert cfg.eval_every == 0 and recipe.optim.lr == 1e-5


def test_a_loaded_model_is_saved_with_its_tokenizer(tmp_path):
    from reasonrl.models import load_model

    model, tok = load_model()
    cfg, _ = prepare(model, "arithmetic", processing_class=tok, out=tmp_path / "r")
    assert cfg.model == str(tmp_path / "r/start_model") and (tmp_path / "r/start_model/config.json").exists()
    with pytest.raises(UserError, match="a loaded model needs its tokenizer: pass processing_class=tokenizer"):
        prepare(model, "arithmetic", out=tmp_path / "s")


@pytest.mark.parametrize(
    "kwargs,needle",
    [
        ({"stepz": 3}, "unknown config key 'stepz' (did you mean 'steps'?)"),
        ({"reward_funcs": [42]}, "reward_funcs: 42 is neither a function nor 'path/to/file.py:function'"),
        ({"reward_funcs": [print, print], "reward_weights": [1.0]}, "reward_weights has 1 numbers for 3 rewards"),
        ({"recipe": "grpoo"}, "did you mean 'grpo'"),
        ({"train_dataset": [], "out": None}, "expected a task name, a file, a datasets.Dataset or a non-empty list"),
        ({"eval_dataset": [{"prompt": "1+1=", "answer": "2"}]}, "eval_dataset is the held-out split of a dataset"),
    ],
)
def test_bad_arguments_are_one_line_before_anything_is_written(kwargs, needle, tmp_path):
    args = {"model": None, "train_dataset": "arithmetic", "out": tmp_path / "r", **kwargs}
    with pytest.raises(UserError) as info:
        prepare(args.pop("model"), args.pop("train_dataset"), **args)
    assert needle in str(info.value) and "\n" not in str(info.value)
    assert not (tmp_path / "r").exists()


def test_the_package_exposes_train_lazily():
    assert reasonrl.train is reasonrl.api.train and reasonrl.TrainResult._fields == ("summary", "folder")


@pytest.mark.slow
def test_two_weighted_functions_train_from_python_with_their_metrics_and_eval_progress(tiny_dir, tmp_path):
    from reasonrl.loop.run import train_run
    from reasonrl.models import load_model

    model, tok = load_model(str(tiny_dir))
    rows = [{"prompt": f"{a}+{b}=", "answer": str(a + b)} for a in range(6) for b in range(6)]

    def one(completions, **kwargs):
        return [1.0] * len(completions)

    def quarter(prompts, completions, answer, **kwargs):
        return [0.25] * len(completions)

    cfg, recipe = prepare(
        model,
        rows,
        [one, quarter],
        processing_class=tok,
        eval_dataset=rows[:3],
        reward_weights=[0.0, 0.5, 2.0],
        out=tmp_path / "r",
        steps=1,
        prompts_per_step=2,
        group_size=2,
        eval_every=0,
        final_eval_problems=3,
        final_eval_k=2,
        save_every=0,
    )
    seen = []
    summary = train_run(cfg, recipe, on_eval=lambda done, total: seen.append((done, total)))
    m = json.loads((tmp_path / "r/metrics.jsonl").read_text().splitlines()[0])
    # 0 x verifier + 0.5 x 1 + 2 x 0.25 = 1.0 for every completion: mean 1, std 0
    assert (m["reward/one/mean"], m["reward/quarter/mean"], m["reward/mean"], m["reward/std"]) == (1.0, 0.25, 1.0, 0.0)
    assert m["reward/one/std"] == 0.0 and "reward/correct/mean" in m
    # each evaluation (before, after): 3 problems x (1 greedy + 2 samples) = 9 completions, counted from 0
    assert seen[0] == (0, 9) and seen.count((9, 9)) == 2 and all(t == 9 for _, t in seen)
    assert summary["after"]["n_problems"] == 3
