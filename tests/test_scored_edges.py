"""Edges of ``scored_advantages`` (issue 45: mutation survivors of ``advantages/scored.py``): the estimator's own
output when every row is scored, the dtype of the result, groups with exactly two or one scored rows, estimators
the module cannot name, and the refusal of a non-(B, G) estimator. Numbers are worked out in the comments."""

from __future__ import annotations

import math
import re

import pytest
import torch

from reasonrl.advantages.scored import scored_advantages
from reasonrl.parts import Advantage

T, F = True, False


def doubled(rewards):
    """An estimator the module cannot name (no ``.estimator``), returning float64 whatever it is given."""
    return (2 * rewards).double()


def test_every_row_scored_returns_the_estimators_output_as_it_is():
    # nothing to leave out: the estimator's (B, G) float64 result, not a float32 copy of it
    rewards = torch.tensor([[1.0, 0.5]])
    out = scored_advantages(doubled, rewards, torch.ones(1, 2, dtype=torch.bool))
    assert out.dtype == torch.float64 and out.tolist() == [[2.0, 1.0]]
    # even an estimator of another shape (one value per group) passes through unchecked
    out = scored_advantages(lambda r: r.sum(-1), rewards, torch.ones(1, 2, dtype=torch.bool))
    assert out.tolist() == [1.5]


def test_an_unnamed_estimator_is_cast_and_treated_as_group_relative():
    rewards = torch.tensor([[1.0, 0.0, 9.0], [3.0, 9.0, 1.0], [5.0, 9.0, 9.0], [9.0, 9.0, 9.0]])
    scored = torch.tensor([[T, T, T], [T, F, T], [T, F, F], [F, F, F]])
    out = scored_advantages(doubled, rewards, scored)
    # row 0 complete: 2 * [1, 0, 9]; row 1 two scored rows: 2 * [3, _, 1]; row 2 one scored row: an unnamed
    # estimator may compare, so it gets nothing; row 3 none scored. float32 like the rewards
    assert out.dtype == torch.float32
    assert out.tolist() == [[2.0, 0.0, 18.0], [6.0, 0.0, 2.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]


def test_float64_rewards_keep_float64_advantages():
    rewards = torch.tensor([[1.0, 0.0, 1.0, 0.5], [3.0, 1.0, 0.0, 0.0]], dtype=torch.float64)
    scored = torch.tensor([[T, T, T, F], [T, T, T, T]])
    out = scored_advantages(Advantage("grpo", eps=0.0), rewards, scored)
    # row 0 on {1, 0, 1}: mean 2/3, N-1 std sqrt((1/9 + 4/9 + 1/9) / 2) = sqrt(1/3) -> 1/3 / sqrt(1/3) = sqrt(1/3),
    #   -2/3 / sqrt(1/3) = -2 sqrt(1/3); row 1 complete [3, 1, 0, 0]: mean 1, N-1 std sqrt((4 + 0 + 1 + 1) / 3) =
    #   sqrt(2) -> [sqrt(2), 0, -1/sqrt(2), -1/sqrt(2)]
    s, r2 = math.sqrt(1 / 3), math.sqrt(2)
    assert out.dtype == torch.float64
    want = [s, -2 * s, s, 0.0, r2, 0.0, -1 / r2, -1 / r2]
    assert out.flatten().tolist() == pytest.approx(want, abs=1e-12)


def test_integer_rewards_give_float_advantages():
    # ints 1, 0, 1 scored: the same sqrt(1/3), -2 sqrt(1/3), sqrt(1/3) = 0.5773503, -1.1547005 (not truncated)
    out = scored_advantages(Advantage("grpo", eps=0.0), torch.tensor([[1, 0, 1, 0]]), torch.tensor([[T, T, T, F]]))
    assert out.dtype == torch.float32
    assert out.flatten().tolist() == pytest.approx([0.5773503, -1.1547005, 0.5773503, 0.0], abs=1e-6)


def test_rloo_group_with_one_scored_row_gets_nothing_instead_of_an_error():
    # rloo refuses groups of one; the lone scored row of row 1 is not handed to it: 0 everywhere in that row
    # row 0 complete [1, 0]: 1 - 0 = 1, 0 - 1 = -1
    rewards = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    out = scored_advantages(Advantage("rloo"), rewards, torch.tensor([[T, T], [T, F]]))
    assert out.tolist() == [[1.0, -1.0], [0.0, 0.0]]


def test_an_estimator_without_per_row_advantages_is_refused():
    msg = "rows without a reward need an estimator with (B, G) advantages, got (1,)"
    with pytest.raises(ValueError, match=f"^{re.escape(msg)}$"):
        scored_advantages(lambda r: r.sum(-1), torch.tensor([[1.0, 0.0, 1.0]]), torch.tensor([[T, T, F]]))
