"""The last survivors of the advantages/ mutation run (issue 45), by hand."""

from __future__ import annotations

import warnings

import torch

from reasonrl.advantages.scored import fill_unscored
from reasonrl.advantages.steps import step_advantages
from reasonrl.advantages.subgroups import harmless_advantage

T, F = True, False


def test_fill_unscored_is_per_group_with_several_groups_scored():
    rewards = torch.tensor([[1.0, 3.0, 7.0], [2.0, 5.0, 4.0], [9.0, 9.0, 9.0]])
    scored = torch.tensor([[T, T, F], [F, T, F], [F, F, F]])
    # group 0: the mean of 1 and 3 is 2; group 1: one scored row, 5, fills both others (a single scored value is
    # already a mean: not 0, not 5 / 2); group 2: none scored, so 0 (its 9s are never read)
    out = fill_unscored(rewards, scored)
    assert out.tolist() == [[1.0, 3.0, 2.0], [5.0, 5.0, 5.0], [0.0, 0.0, 0.0]]
    assert fill_unscored(rewards.double(), scored).dtype == torch.float64


def test_step_advantages_of_groups_of_one_warn_nothing():
    # G = 1 with the N-1 std: torch.std of one value would warn "degrees of freedom <= 0" and give NaN; the
    # function returns the (all zero) centred rewards before any std
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = step_advantages(torch.tensor([[[0.5, 1.0]], [[0.0, 0.25]]]))  # (B=2, G=1, K=2)
    assert out.tolist() == [[[0.0, 0.0]], [[0.0, 0.0]]]


def test_harmless_advantage_is_in_the_default_dtype():
    # r(y') - b with b = 0.25: [1 - 0.25, 0 - 0.25 -> clipped to 0]; float64 rewards come back in the default dtype
    out = harmless_advantage(torch.tensor([1.0, 0.0], dtype=torch.float64), 0.25)
    assert out.dtype == torch.get_default_dtype() and out.tolist() == [0.75, 0.0]
