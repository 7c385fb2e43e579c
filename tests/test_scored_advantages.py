"""Advantages with unscored rows (a failed judge, issue 41): each group's advantages from its scored rows
alone, 0 for the unscored ones, and the neutral value an unscored row shows in the reward tensor."""

import math

import pytest
import torch

from reasonrl.advantages.scored import fill_unscored, scored_advantages
from reasonrl.parts import Advantage

T, F = True, False


def test_fill_unscored_is_the_groups_scored_mean():
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.5, 0.0, 0.0, 0.0]])
    scored = torch.tensor([[T, T, F, T], [F, F, F, F]])
    # group 0: (1 + 0 + 1) / 3 = 2/3 where unscored; group 1: nothing scored -> 0
    assert fill_unscored(rewards, scored).flatten().tolist() == pytest.approx([1, 0, 2 / 3, 1, 0, 0, 0, 0])


def test_rloo_over_the_scored_rows():
    rewards = torch.tensor([[1.0, 0.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]])
    scored = torch.tensor([[T, T, T, F], [T, T, T, T]])
    out = scored_advantages(Advantage("rloo"), rewards, scored)
    # group 0 on {1, 0, 1}: 1 - (0 + 1)/2 = 0.5, 0 - (1 + 1)/2 = -1, 1 - 0.5 = 0.5; the unscored row 0
    # group 1 complete: 1 - (1 + 0 + 0)/3 = 2/3 twice, 0 - (1 + 1 + 0)/3 = -2/3 twice
    assert out.flatten().tolist() == pytest.approx([0.5, -1.0, 0.5, 0.0, 2 / 3, 2 / 3, -2 / 3, -2 / 3])


def test_grpo_over_the_scored_rows_and_a_group_with_one():
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [1.0, 0.0, 1.0, 0.0]])
    scored = torch.tensor([[T, T, F, T], [F, F, T, F]])
    out = scored_advantages(Advantage("grpo"), rewards, scored)
    # group 0 on {1, 0, 1}: mean 2/3, N-1 std sqrt(1/3): 1/3 / 0.57735 = 0.57735, -2/3 / 0.57735 = -1.15470
    # group 1: one scored row has nothing to compare with: 0 everywhere
    s = math.sqrt(1 / 3)
    assert out.flatten().tolist() == pytest.approx([1 / 3 / s, -2 / 3 / s, 0.0, 1 / 3 / s, 0, 0, 0, 0], abs=1e-5)
    # REINFORCE compares nothing: its one scored row keeps its reward
    out = scored_advantages(Advantage("reinforce"), rewards, scored)
    assert out[1].tolist() == [0.0, 0.0, 1.0, 0.0]


def test_every_row_scored_is_the_estimator_itself():
    rewards = torch.tensor([[1.0, 0.0, 0.5, 0.0]])
    scored = torch.ones(1, 4, dtype=torch.bool)
    assert torch.equal(scored_advantages(Advantage("grpo"), rewards, scored), Advantage("grpo")(rewards))
