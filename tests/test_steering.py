import pytest
import torch

from reasonrl.models import score_completions
from reasonrl.rollout import HFEngine, SamplingParams
from reasonrl.models.steering import add_steering, generate_steered, intensity_grid, steer, steering_vector

PROMPTS = ["12+3=?\n", "5+539=?\n"]


def test_intensity_grid_by_hand():
    # spec: G = 4, alpha_max = 3 -> [0, 1, 2, 3]
    assert intensity_grid(4, 3.0) == [0.0, 1.0, 2.0, 3.0]
    assert intensity_grid(1, 3.0) == [0.0]


def test_hook_math_by_hand():
    # spec: h = [1, 0], v = [0, 2] -> unit [0, 1]; c = 1, alpha = 2 -> h' = [1, 2]
    v = torch.tensor([0.0, 2.0])
    out = add_steering(torch.tensor([[[1.0, 0.0]]]), v / v.norm(), 1.0, torch.tensor([2.0]))
    assert out.tolist() == [[[1.0, 2.0]]]


def test_steering_vector_is_the_unit_mean_activation_difference(sharp_tiny):
    model, tok = sharp_tiny
    unit, scale = steering_vector(model, tok, ["1+1=?\n"], ["999+999=?\n"], layer=0)
    with torch.no_grad():

        def mean_h(text):
            out = model(**tok([text], return_tensors="pt"), output_hidden_states=True)
            return out.hidden_states[1][0].mean(0)

        diff = mean_h("1+1=?\n") - mean_h("999+999=?\n")
    assert torch.allclose(unit, diff / diff.norm(), atol=1e-5) and scale > 0
    with pytest.raises(ValueError, match="identical"):
        steering_vector(model, tok, ["1=?\n"], ["1=?\n"], layer=0)


def test_zero_intensities_reproduce_plain_generation(sharp_tiny):
    # spec: a batch with alpha = [0, 0] is identical to plain generation at the same seed
    model, tok = sharp_tiny
    engine, sp = HFEngine(model, tok, compact_below=0.0), SamplingParams(temperature=1.0, max_new_tokens=10)
    unit, scale = steering_vector(model, tok, ["1+1=?\n"], ["999+999=?\n"], layer=1)
    plain = engine.generate(PROMPTS, 2, sp, generator=torch.Generator().manual_seed(3))
    steered = generate_steered(
        engine,
        PROMPTS,
        sp,
        unit=unit,
        scale=scale,
        layer=1,
        alphas=[0.0, 0.0],
        generator=torch.Generator().manual_seed(3),
        is_correction=True,
    )
    assert steered.texts == plain.texts and torch.equal(steered.logprobs, plain.logprobs)


def test_steered_samples_differ_and_are_rescored_without_the_hook(sharp_tiny):
    model, tok = sharp_tiny
    engine, sp = HFEngine(model, tok), SamplingParams(temperature=0, max_new_tokens=10)
    unit, scale = steering_vector(model, tok, ["1+1=?\n"], ["999+999=?\n"], layer=1)
    ro = generate_steered(engine, PROMPTS, sp, unit=unit, scale=scale, layer=1, alphas=[0.0, 8.0])
    assert ro.texts[0] != ro.texts[1] or ro.texts[2] != ro.texts[3]  # greedy, so only the intensity differs
    # the call kept finished rows (compact_below 0) and gave the engine back its own setting (on a CPU: 1.0)
    assert ro.extras["alpha"].tolist() == [0.0, 8.0, 0.0, 8.0] and engine.compact_below == 1.0
    with torch.no_grad():  # the hook is gone: re-scoring now equals the stored (unhooked) log-probs
        lp, _ = score_completions(model, ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask)
    assert torch.allclose(lp, ro.logprobs, atol=1e-5)
    hooks_before = set(model.model.layers[1]._forward_hooks)  # transformers keeps hooks of its own there
    with pytest.raises(RuntimeError, match="boom"), steer(model, 1, unit, scale, [1.0]):
        raise RuntimeError("boom")
    assert set(model.model.layers[1]._forward_hooks) == hooks_before  # ours removed even after an error


def test_a_steered_recipe_trains_and_logs_from_its_saved_config(tiny_dir, tmp_path):
    # VSPO's rollouts through the trainer: the steering part composes with grpo and survives config.yaml
    import dataclasses
    import json

    import yaml

    from reasonrl.config.train import TrainConfig, apply_overrides, split_config
    from reasonrl.parts import Steering
    from reasonrl.recipes import get_recipe
    from reasonrl.loop.run import train_run

    recipe = dataclasses.replace(
        get_recipe("grpo"),
        group_size=4,
        steering=Steering(layer=1, alpha_max=2.0, positive=("1+1=?\n",), negative=("9+9=?\n",)),
    )
    cfg = TrainConfig(
        model=str(tiny_dir),
        out=str(tmp_path / "run"),
        steps=2,
        prompts_per_step=2,
        eval_every=0,
        final_eval_problems=0,
        save_every=0,
    )
    train_run(cfg, recipe)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2] and all("reward/mean" in r for r in rows)
    saved = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert saved["steering"]["positive"] == ["1+1=?\n"]
    _, over = split_config({"steering": saved["steering"]})
    assert apply_overrides(get_recipe("grpo"), over).steering.alpha_max == 2.0


def test_steering_vector_names_a_layer_the_model_lacks(sharp_tiny):
    from reasonrl.models.steering import steering_vector

    model, tok = sharp_tiny
    with pytest.raises(ValueError, match="out of range"):
        steering_vector(model, tok, ["1+1=?\n"], ["2+2=?\n"], layer=len(model.model.layers))
