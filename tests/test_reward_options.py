"""Extra rewards as configuration: ``rewards.<name>.<option>=value`` (rewards/options.py)."""

import dataclasses

import pytest
import yaml

from reasonrl.config.train import TrainConfig, apply_overrides, dotted_to_nested, resolved_dict, split_config
from reasonrl.recipes import get_recipe
from reasonrl.rewards import ConsistencyReward, SetReward, TempoReward
from reasonrl.rewards.options import apply_reward_overrides, reward_options, rewards_dict


def _overrides(**pairs):
    return split_config(dotted_to_nested(pairs))[1]


def test_dataclass_reward_option_and_weight_from_dotted_keys():
    recipe = apply_overrides(
        get_recipe("codethinker"), _overrides(**{"rewards.consistency.process": "f1", "rewards.consistency.weight": 2})
    )
    ((fn, weight),) = recipe.extra_rewards
    assert isinstance(fn, ConsistencyReward) and fn.process == "f1" and weight == 2.0
    assert fn.tau == 0.5 and fn.lambda_p == 0.5  # untouched options keep the recipe's values
    assert get_recipe("codethinker").extra_rewards[0][0].process == "precision"  # the registry is not mutated


def test_options_method_reward_is_rebuilt_and_validated():
    recipe = apply_overrides(
        get_recipe("tempo"), _overrides(**{"rewards.tempo.min_claims": 1, "rewards.tempo.leak_penalty": "count"})
    )
    fn = recipe.extra_rewards[0][0]
    assert isinstance(fn, TempoReward) and fn.min_claims == 1 and fn.leak_penalty == "count" and fn.k_cap == 5
    with pytest.raises(ValueError, match="min_claims"):  # the constructor's own check still runs
        apply_overrides(get_recipe("tempo"), _overrides(**{"rewards.tempo.min_claims": -2}))


@pytest.mark.parametrize(
    "pairs,needle",
    [
        ({"rewards.consistancy.tau": 0.6}, "no extra reward 'consistancy'.*\\['consistency'\\]"),
        (
            {"rewards.consistency.taus": 0.6},
            "'taus'.*valid: \\['lambda_p', 'mode', 'name', 'process', 'tau', 'trace_key', 'weight'\\]",
        ),
        ({"rewards.consistency.process": "recall"}, "unknown process 'recall'"),
        ({"rewards.consistency.tau": "high"}, "rewards.consistency.tau' must be a number"),
    ],
)
def test_bad_reward_keys_name_the_reward_and_the_valid_options(pairs, needle):
    with pytest.raises(ValueError, match=needle):
        apply_overrides(get_recipe("codethinker"), _overrides(**pairs))


def test_reward_section_must_be_a_mapping_and_unknown_rewards_on_a_plain_recipe():
    with pytest.raises(ValueError, match="rewards' is a section"):
        split_config({"rewards": 3})
    with pytest.raises(ValueError, match="its extra rewards: none"):
        apply_overrides(get_recipe("grpo"), _overrides(**{"rewards.tempo.min_claims": 1}))


def test_a_reward_without_options_is_refused_but_its_weight_can_change():
    class Plain:
        name = "plain"

        def __call__(self, prompts, completions, **columns):
            return [0.0] * len(completions)

    extra = ((Plain(), 1.0),)
    assert apply_reward_overrides(extra, {"plain": {"weight": 0.25}})[0][1] == 0.25
    with pytest.raises(ValueError, match="exposes no options"):
        apply_reward_overrides(extra, {"plain": {"scale": 2}})


def test_config_yaml_records_reward_options_and_round_trips(tmp_path):
    recipe = apply_overrides(get_recipe("sspo"), _overrides(**{"rewards.sspo.metric": "f1", "rewards.sspo.w_fmt": 0}))
    saved = yaml.safe_load(yaml.safe_dump(resolved_dict(TrainConfig(), recipe), sort_keys=False))
    assert saved["rewards"]["sspo"]["metric"] == "f1" and saved["rewards"]["sspo"]["w_fmt"] == 0.0
    assert (
        saved["rewards"]["sspo"]["sections"] == ["R:", "C:", "M:", "I:"] and saved["rewards"]["sspo"]["weight"] == 1.0
    )
    # resuming re-applies the saved section to the named recipe: same options, tuples stay tuples
    _, over = split_config({"rewards": saved["rewards"]})
    again = apply_overrides(get_recipe("sspo"), over).extra_rewards[0][0]
    assert isinstance(again, SetReward) and again.options() == recipe.extra_rewards[0][0].options()
    assert again.sections == ("R:", "C:", "M:", "I:")
    # a callable option (a user's leakage checker) is not written, and a resume keeps it
    judge = lambda completion, meta: (0, 1)  # noqa: E731
    custom = dataclasses.replace(get_recipe("tempo"), extra_rewards=((TempoReward(checker=judge), 1.0),))
    written = rewards_dict(custom.extra_rewards)["tempo"]
    assert "checker" not in written and written["min_claims"] == 0
    kept = apply_reward_overrides(custom.extra_rewards, {"tempo": written})[0][0]
    assert kept.checker is judge and reward_options(kept)["checker"] is judge


@pytest.mark.slow
def test_train_cli_takes_a_reward_option_records_it_and_resumes_with_it(tiny_dir, tmp_path):
    from typer.testing import CliRunner

    from reasonrl.cli import app

    out = tmp_path / "run"
    common = [
        "--recipe",
        "tempo",
        "--task",
        "temporal",
        "--model",
        str(tiny_dir),
        "--out",
        str(out),
        "prompts_per_step=2",
        "group_size=2",
        "eval_every=0",
        "final_eval_problems=0",
        "save_every=1",
    ]
    first = CliRunner().invoke(
        app, ["train", "--steps", "1", *common, "rewards.tempo.min_claims=1", "rewards.tempo.weight=0.5"]
    )
    assert first.exit_code == 0, first.output
    saved = yaml.safe_load((out / "config.yaml").read_text())["rewards"]["tempo"]
    assert saved["min_claims"] == 1 and saved["weight"] == 0.5 and saved["leak_penalty"] == "fraction"
    # the resume reads config.yaml back: the same reward options reach the second step
    again = CliRunner().invoke(app, ["train", "--steps", "2", *common, "--resume"])
    assert again.exit_code == 0, again.output
    resaved = yaml.safe_load((out / "config.yaml").read_text())["rewards"]["tempo"]
    assert resaved == saved
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 2
