"""``role_task_advantages`` (AZR's TRR++, issue 45): one baseline and one scale per bucket of rows, exact 0 for a
bucket with nothing to compare, and the shapes it refuses. Every number is worked out in the comment above it."""

from __future__ import annotations

import re

import pytest
import torch

from reasonrl.advantages.buckets import role_task_advantages

PD, SD = ("propose", "deduction"), ("solve", "deduction")


def test_buckets_by_hand_with_the_defaults():
    # bucket PD holds rows 0 and 2 (rewards 2, 2): constant -> exactly 0 (and it comes first, so a bucket loop
    # that stopped at a constant bucket would leave SD at 0 too)
    # bucket SD holds rows 1 and 3 (rewards 1, 0): mean 0.5, N-1 std sqrt((0.25 + 0.25) / 1) = 0.7071068
    #   -> +-0.5 / (0.7071068 + 1e-6) = +-0.7071058 (the N std would be 0.5 -> +-1; eps = 1 would give +-0.29)
    # bucket "solo" holds row 4 alone: nothing to compare -> exactly 0 (its N-1 std is undefined)
    rewards = torch.tensor([2.0, 1.0, 2.0, 0.0, 7.0])
    out = role_task_advantages(rewards, [PD, SD, PD, SD, "solo"])
    assert out[[0, 2, 4]].tolist() == [0.0, 0.0, 0.0]
    assert out[[1, 3]].tolist() == pytest.approx([0.7071058, -0.7071058], abs=1e-6)
    assert torch.equal(out, role_task_advantages(rewards, [PD, SD, PD, SD, "solo"], eps=1e-6, unbiased=True))


def test_each_bucket_has_its_own_mean_and_scale():
    # bucket a: rows 0, 2 with rewards 10, 0: mean 5, N-1 std sqrt(25 + 25) = 7.0710678 -> +-0.7071068
    # bucket b: rows 1, 3, 4 with rewards 1, 2, 3: mean 2, N-1 std sqrt((1 + 0 + 1) / 2) = 1 -> -1, 0, 1
    # one mean over all five rows (3.2) would give row 1 a negative advantage far from -1
    out = role_task_advantages(torch.tensor([10.0, 1.0, 0.0, 2.0, 3.0]), ["a", "b", "a", "b", "b"], eps=0.0)
    assert out.tolist() == pytest.approx([0.7071068, -1.0, -0.7071068, 0.0, 1.0], abs=1e-6)


def test_biased_std_and_eps():
    # rewards 1, 0 in one bucket: N std sqrt((0.25 + 0.25) / 2) = 0.5 -> +-0.5 / 0.5 = +-1
    assert role_task_advantages(torch.tensor([1.0, 0.0]), ["a", "a"], eps=0.0, unbiased=False).tolist() == [1.0, -1.0]
    # eps 0.5 with the N-1 std 0.7071068: 0.5 / 1.2071068 = 0.4142136 (std - eps would give 0.5 / 0.2071 = 2.414)
    out = role_task_advantages(torch.tensor([1.0, 0.0]), ["a", "a"], eps=0.5)
    assert out.tolist() == pytest.approx([0.4142136, -0.4142136], abs=1e-6)


def test_integer_rewards_give_float_advantages():
    # ints 1, 0 -> the same +-0.5 / 0.7071068 = +-0.7071068 as floats, not truncated to an int 0
    out = role_task_advantages(torch.tensor([1, 0]), ["a", "a"], eps=0.0)
    assert out.dtype == torch.float32
    assert out.tolist() == pytest.approx([0.7071068, -0.7071068], abs=1e-6)


def test_refuses_a_key_count_or_shape_that_does_not_match():
    msg = "role_task_advantages needs (N,) rewards and N keys, got (3,) and 2 keys"
    with pytest.raises(ValueError, match=f"^{re.escape(msg)}$"):
        role_task_advantages(torch.tensor([1.0, 0.0, 1.0]), ["a", "a"])
    # (2, 2) rewards with 2 keys: len() agrees, the rank does not
    msg = "role_task_advantages needs (N,) rewards and N keys, got (2, 2) and 2 keys"
    with pytest.raises(ValueError, match=f"^{re.escape(msg)}$"):
        role_task_advantages(torch.zeros(2, 2), ["a", "b"])
