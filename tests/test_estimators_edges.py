"""Edges of the advantage estimators (issue 45: mutation survivors of ``advantages/estimators.py``): eps added (not
subtracted), the batch scale's biased std, groups of one computed without an undefined std, the default eps of
REINFORCE++-baseline and the type error's message. Numbers are worked out in the comments."""

from __future__ import annotations

import re
import warnings

import pytest
import torch

from reasonrl.advantages.estimators import _batch_std, grpo, reinforce_pp_group


def t(rows):
    return torch.tensor(rows, dtype=torch.float64)


def test_grpo_eps_is_added_to_the_std():
    # [1, 0, 0, 0]: centred [0.75, -0.25 x3], N-1 std 0.5 (see test_advantages) -> / (0.5 + 0.5) = [0.75, -0.25 x3]
    # (std - eps would divide by 0 and give inf)
    assert grpo(t([[1, 0, 0, 0]]), eps=0.5).tolist() == [[0.75, -0.25, -0.25, -0.25]]


def test_grpo_batch_scale_with_the_biased_std():
    # rows [1, 0] and [3, 1]: group means 0.5 and 2 -> centred [[0.5, -0.5], [1, -1]]
    # one N std over 1, 0, 3, 1: mean 1.25, squared deviations 0.0625 + 1.5625 + 3.0625 + 0.0625 = 4.75
    #   -> N var 4.75 / 4 = 1.1875, std 1.0897247 (the N-1 std would be sqrt(4.75 / 3) = 1.2583057)
    adv = grpo(t([[1, 0], [3, 1]]), scale="batch", eps=0.0, unbiased=False)
    assert adv.flatten().tolist() == pytest.approx([0.4588315, -0.4588315, 0.9176629, -0.9176629], abs=1e-6)


def test_grpo_groups_of_one_take_no_undefined_std():
    # G = 1 (and B*G = 1 for the batch scale): the N-1 std of one value is undefined (torch warns and gives NaN);
    # every such group is constant, so the advantage is 0 without ever taking that std
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert grpo(t([[3.0], [5.0]])).tolist() == [[0.0], [0.0]]
        assert grpo(t([[3.0]]), scale="batch").tolist() == [[0.0]]


def test_batch_std_is_none_for_one_value_with_the_unbiased_form():
    assert _batch_std(t([[3.0]]), unbiased=True) is None
    # the N form of one value is 0; two values 1, 3: N-1 std sqrt((1 + 1) / 1) = 1.4142136
    assert _batch_std(t([[3.0]]), unbiased=False).item() == 0.0
    assert _batch_std(t([[1.0, 3.0]]), unbiased=True).item() == pytest.approx(1.4142136, abs=1e-6)


def test_reinforce_pp_baseline_default_eps_and_eps_added():
    # r = [[1, 0], [3, 1]] -> centred [[0.5, -0.5], [1, -1]], batch N-1 std of those sqrt(2.5 / 3) = 0.9128709
    # default eps 1e-6: 0.5 / 0.9128719 = 0.5477220 (eps = 1 would give 0.5 / 1.91 = 0.26)
    r = t([[1, 0], [3, 1]])
    assert reinforce_pp_group(r)[0].tolist() == pytest.approx([0.5477220, -0.5477220], abs=1e-6)
    assert torch.equal(reinforce_pp_group(r), reinforce_pp_group(r, eps=1e-6, unbiased=True))
    # eps 0.5: 0.5 / 1.4128709 = 0.3538893, 1 / 1.4128709 = 0.7077785 (std - eps: 0.5 / 0.41 = 1.22)
    adv = reinforce_pp_group(r, eps=0.5)
    assert adv.flatten().tolist() == pytest.approx([0.3538893, -0.3538893, 0.7077785, -0.7077785], abs=1e-6)


def test_reinforce_pp_baseline_of_a_single_reward_is_zero():
    # one reward: centred 0, and the N-1 std of one value does not exist: the all-zero batch returns before it
    assert reinforce_pp_group(t([[4.0]])).tolist() == [[0.0]]


def test_rewards_that_are_not_a_tensor_are_refused_by_type():
    msg = "rewards must be a torch.Tensor of shape (B, G), got list"
    with pytest.raises(TypeError, match=f"^{re.escape(msg)}$"):
        grpo([[1.0, 0.0]])
