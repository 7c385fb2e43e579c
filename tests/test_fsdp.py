"""FSDP2 (``dist.strategy=fsdp``): the lockstep padding and the summed, sharded gradient worked by hand
over two gloo ranks, the checkpoint state's single-process format, and the conflicts refused up front.
The whole-run equality with one process and the sharded checkpoint's resume are in test_dist.py (slow)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.multiprocessing as mp

from fsdp_ranks import sharded_step_worker
from reasonrl.config.train import TrainConfig
from reasonrl.dist.fsdp import indexed, named
from reasonrl.dist.group import Single
from reasonrl.dist.choose import make_strategy
from reasonrl.dist.strategy import Replicated
from reasonrl.recipes import get_recipe
from reasonrl.config.sections import Dist, Lora
from reasonrl.config.validate import problems


def test_optimizer_state_by_name_and_by_index_round_trip():
    # parameter 0 is tied (two names), parameter 1 has one; the state keeps its values, only the keys change
    names = [["model.embed.weight", "lm_head.weight"], ["layer.weight"]]
    by_name = {
        "state": {"layer.weight": {"step": 1}, "lm_head.weight": {"step": 2}},
        "param_groups": [{"lr": 0.1, "params": ["model.embed.weight", "layer.weight"]}],
    }
    by_index = indexed(by_name, names)
    assert by_index == {"state": {0: {"step": 2}, 1: {"step": 1}}, "param_groups": [{"lr": 0.1, "params": [0, 1]}]}
    assert named(by_index, names) == {
        "state": {"model.embed.weight": {"step": 2}, "layer.weight": {"step": 1}},
        "param_groups": [{"lr": 0.1, "params": ["model.embed.weight", "layer.weight"]}],
    }


def test_fsdp_in_one_process_is_the_plain_model():
    # nothing to shard: the replicated strategy, so a sharded run's checkpoint resumes in one process
    assert type(make_strategy("fsdp", Single())) is Replicated
    model = torch.nn.Linear(2, 2)
    model.weight.requires_grad_(False)
    s = make_strategy("fsdp", Single())
    assert s.wrap(model) is model and s.trainable == [model.bias]
    live = torch.arange(5)
    assert [(m.tolist(), w) for m, w in s.micro_batches(live, live[:1], 2)] == [
        ([0, 1], 1.0),
        ([2, 3], 1.0),
        ([4], 1.0),
    ]
    assert s.micro_batches(live[:0], live[:1], 2) == []


# ---------------------------------------------------------------- two gloo ranks, worked by hand
def test_two_sharded_ranks_pad_to_equal_passes_and_sum_the_gradient(tmp_path):
    mp.spawn(sharded_step_worker, args=(str(tmp_path / "rdv"), str(tmp_path / "res")), nprocs=2)
    r0, r1 = (torch.load(tmp_path / f"res.{r}", weights_only=False) for r in (0, 1))
    # rank 1 owns one row, rank 0 three: rank 1 adds two zero-weight passes so both run three
    assert r0["passes"] == [1.0, 1.0, 1.0] and r1["passes"] == [1.0, 0.0, 0.0]
    assert r0["total"] == r1["total"] == [4.0]
    # d(sum W x)/dW_i = sum of the rows x = (1+0+2+3, 0+1+2+1) = (6, 4) for both output rows: a sum, not a mean
    assert r0["grad"].tolist() == r1["grad"].tolist() == [[6.0, 4.0], [6.0, 4.0]]
    # AdamW's first step moves each weight by lr * g / |g| = 0.1 (bias-corrected moments, eps aside)
    expected = torch.tensor([[0.9, 1.9], [2.9, 3.9]])
    assert torch.allclose(r0["weights"]["weight"], expected, atol=1e-6) and r1["weights"] is None
    # the optimiser state in one process's format: index keys, moments (1 - beta) g and (1 - beta2) g^2
    state = r0["optim"]["state"][0]
    assert list(r0["optim"]["state"]) == [0] and r0["optim"]["param_groups"][0]["params"] == [0]
    assert torch.allclose(state["exp_avg"], torch.tensor([[0.6, 0.4], [0.6, 0.4]]))
    assert torch.allclose(state["exp_avg_sq"], torch.tensor([[0.036, 0.016], [0.036, 0.016]]))
    single = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2, 2))], lr=0.1, weight_decay=0.0)
    assert set(r0["optim"]["param_groups"][0]) == set(single.state_dict()["param_groups"][0])


# ---------------------------------------------------------------- refused up front, one line each
def _fsdp(**changes) -> TrainConfig:
    return dataclasses.replace(TrainConfig(), dist=Dist(strategy="fsdp"), **changes)


def test_fsdp_is_a_valid_strategy_and_plain_recipes_pass():
    assert problems(_fsdp(), get_recipe("grpo")) == [] and problems(_fsdp(), get_recipe("dapo")) == []
    bad = dataclasses.replace(TrainConfig(), dist=Dist(strategy="zero3"))
    assert problems(bad, get_recipe("grpo")) == [
        "config key 'dist.strategy' = 'zero3' is out of range: must be one of ddp, fsdp"
    ]


def test_fsdp_refuses_lora_in_one_line():
    found = problems(_fsdp(lora=Lora(r=8)), get_recipe("grpo"))
    assert len(found) == 1 and found[0].startswith("config key 'lora.r' = 8 with dist.strategy=fsdp")


@pytest.mark.parametrize("recipe, key", [("nudgerl", "hints"), ("ssopd", "ssopd"), ("fest", "fest")])
def test_fsdp_refuses_parts_that_run_the_policy_in_their_loss(recipe, key):
    found = problems(_fsdp(), get_recipe(recipe))
    assert found == [
        f"recipe part {key!r} runs the policy inside its loss term a data-dependent number of times, and "
        "dist.strategy=fsdp needs every rank to run the same forwards: use dist.strategy=ddp"
    ]
    assert problems(TrainConfig(), get_recipe(recipe)) == []  # ddp holds them


def test_fsdp_refuses_a_part_that_adds_modules_naming_each_conflict():
    found = problems(_fsdp(lora=Lora(r=8)), get_recipe("vpd"))
    assert [line.split(":")[0] for line in found] == [
        "config key 'lora.r' = 8 with dist.strategy=fsdp",
        "recipe part 'vpd' adds modules to the model (setup_model), which dist.strategy=fsdp does not shard",
        "recipe part 'vpd' runs the policy inside its loss term a data-dependent number of times, and "
        "dist.strategy=fsdp needs every rank to run the same forwards",
    ]
