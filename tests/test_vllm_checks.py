"""What ``rollout.engine=vllm`` cannot serve is refused before anything loads, one line naming the engine
key and the part, reward, option or model (issue 43); what it serves passes. No vLLM needed."""

import dataclasses
import importlib.util
import json

import pytest

from reasonrl.config.train import TrainConfig
from reasonrl.errors import UserError
from reasonrl.recipes import get_recipe
from reasonrl.rollout.vllm_checks import is_diffusion_name, vllm_problems
from reasonrl.config.sections import RolloutOpts
from reasonrl.config.validate import check_run, problems, run_values

HAS_VLLM = importlib.util.find_spec("vllm") is not None
KEY = "config key 'rollout.engine' = 'vllm'"


def _cfg(**rollout) -> TrainConfig:
    return TrainConfig(rollout=RolloutOpts(engine="vllm", **rollout))


def _lines(cfg: TrainConfig, recipe) -> list[str]:
    return vllm_problems({k: v for k, (v, _) in run_values(cfg, recipe).items()}, recipe)


def _refusals(lines: list[str]) -> list[str]:
    return [line for line in lines if "not installed" not in line]


@pytest.mark.parametrize(
    "recipe, names",
    [
        ("vspo", "recipe part 'steering'"),  # activation steering: forward hooks on the trainer's model
        ("populora", "recipe part 'populora'"),  # adapters switched per row
        ("vpd", "recipe part 'vpd'"),  # the teacher adapter on the trainer's model
        ("corr_po", "reward 'corr_po' reads entropies, sum_p2"),  # token statistics recorded while sampling
    ],
)
def test_what_needs_the_own_decode_loop_is_refused(recipe, names):
    lines = _refusals(_lines(_cfg(), get_recipe(recipe)))
    assert len(lines) == 1 and lines[0].startswith(KEY) and names in lines[0] and "rollout.engine=hf" in lines[0]


def test_corr_pos_hidden_norm_is_named_too():
    r = get_recipe("corr_po")
    bonus = dataclasses.replace(r.extra_rewards[0][0], grad_norm="hidden")
    (line,) = _refusals(_lines(_cfg(), dataclasses.replace(r, extra_rewards=[(bonus, r.extra_rewards[0][1])])))
    assert "reads entropies, sum_p2, hidden_grad_norm" in line


@pytest.mark.parametrize("recipe", ["grpo", "dapo", "codethinker", "stride", "codeact"])
def test_plain_groups_branching_and_episodes_pass(recipe):
    assert _refusals(_lines(_cfg(), get_recipe(recipe))) == []
    assert _lines(TrainConfig(), get_recipe("vspo")) == []  # the own engine: nothing to check


def test_the_own_engines_options_workers_fsdp_and_a_diffusion_model_are_refused(tmp_path):
    grpo = get_recipe("grpo")
    lines = _refusals(_lines(dataclasses.replace(_cfg(static_cache=True, compile=True, workers=2)), grpo))
    assert [line.split(": ")[1][:28] for line in lines] == [
        "rollout.static_cache=true is",
        "rollout.compile=true is an o",
        "rollout.workers=2 runs the o",
    ]
    fsdp = dataclasses.replace(_cfg(), dist=dataclasses.replace(TrainConfig().dist, strategy="fsdp"))
    assert "dist.strategy=fsdp" in _refusals(_lines(fsdp, grpo))[0]
    for name in ("builtin:diffusion", "diffusion:tiny"):
        (line,) = _refusals(_lines(dataclasses.replace(_cfg(), model=name), grpo))
        assert f"model {name!r} is a masked-diffusion LM" in line
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "reasonrl_mdlm"}))
    assert is_diffusion_name(str(tmp_path)) and not is_diffusion_name("base") and not is_diffusion_name(None)
    (tmp_path / "config.json").write_text("{not json")
    assert not is_diffusion_name(str(tmp_path))  # the model check names a broken folder


def test_the_range_rules_and_check_run_report_every_line():
    bad = TrainConfig(rollout=RolloutOpts(engine="vllm", is_cap=0.5, sync_every=0, is_correction="clip"))
    found = problems(bad, get_recipe("vspo"))
    assert any("'rollout.is_cap' = 0.5 is out of range" in p for p in found)
    assert any("'rollout.sync_every' = 0 is out of range" in p for p in found)
    assert any("'rollout.is_correction' = 'clip' is out of range: must be one of none, tis" in p for p in found)
    assert any("recipe part 'steering'" in p for p in found)
    with pytest.raises(UserError, match="recipe part 'steering'"):
        check_run(TrainConfig(rollout=RolloutOpts(engine="vllm")), get_recipe("vspo"))


@pytest.mark.skipif(HAS_VLLM, reason="this environment has vLLM: the missing-install line cannot show")
def test_a_missing_vllm_is_named_with_the_install_command():
    (line,) = _lines(_cfg(), get_recipe("grpo"))
    assert "needs vLLM, which is not installed: pip install 'reasonrl[vllm]'" in line
