"""Edges of SAPO's step advantages (issue 45: mutation survivors of ``advantages/steps.py``): per-prompt step
statistics with B > 1, exact zeros for constant steps (eps = 0 included), dtypes, the spans' boundary cases
(adjacent, zero-width, a missing step in the middle) and every refusal's whole message. Numbers by hand."""

from __future__ import annotations

import re

import pytest
import torch

from reasonrl.advantages.steps import char_spans_to_token_steps, step_advantages, token_step_advantages


def refuses(msg: str):
    return pytest.raises(ValueError, match=f"^{re.escape(msg)}$")


# (B=2, G=3, K=2), float64. Prompt 0: step 0 is 0.1 three times (constant, but its float mean is off by an ulp;
# 0.1 is neither the batch's max 4 nor its min 0), step 1 is [0, 1, 0]. Prompt 1: step 0 [2, 0, 1], step 1 4 x3.
REWARDS = torch.tensor(
    [[[0.1, 0.0], [0.1, 1.0], [0.1, 0.0]], [[2.0, 4.0], [0.0, 4.0], [1.0, 4.0]]], dtype=torch.float64
)


@pytest.mark.parametrize("eps", [1e-6, 0.0])
def test_step_advantages_of_two_prompts_by_hand(eps):
    adv = step_advantages(REWARDS, eps=eps)
    assert adv.shape == (2, 3, 2) and adv.dtype == torch.float64
    # constant steps: exactly 0 (no residue / eps, and no 0 / 0 when eps = 0)
    assert adv[0, :, 0].tolist() == [0.0, 0.0, 0.0] and adv[1, :, 1].tolist() == [0.0, 0.0, 0.0]
    # prompt 0 step 1 [0, 1, 0]: mean 1/3, N-1 std sqrt((1/9 + 4/9 + 1/9) / 2) = 0.5773503
    #   -> [-1/3, 2/3, -1/3] / 0.5773503 = [-0.5773503, 1.1547005, -0.5773503]
    assert adv[0, :, 1].tolist() == pytest.approx([-0.5773503, 1.1547005, -0.5773503], abs=1e-5)
    # prompt 1 step 0 [2, 0, 1]: mean 1, N-1 std sqrt((1 + 1 + 0) / 2) = 1 -> [1, -1, 0]
    assert adv[1, :, 0].tolist() == pytest.approx([1.0, -1.0, 0.0], abs=1e-5)


def test_step_advantages_eps_is_added():
    # [1, 0] at one step: mean 0.5, N-1 std 0.7071068; eps 0.5 -> 0.5 / 1.2071068 = 0.4142136
    # (std - eps would give 0.5 / 0.2071068 = 2.4142136)
    adv = step_advantages(torch.tensor([[[1.0], [0.0]]]), eps=0.5)
    assert adv.flatten().tolist() == pytest.approx([0.4142136, -0.4142136], abs=1e-6)


def test_step_advantages_refuses_what_is_not_a_3d_tensor():
    with refuses("step_rewards must be a (B, G, K) tensor, got (4, 3)"):
        step_advantages(torch.ones(4, 3))
    with refuses("step_rewards must be a (B, G, K) tensor, got list"):
        step_advantages([[[1.0]]])


def test_token_step_advantages_refusals():
    with refuses("need step_adv (R, K) and token_step (R, T), got (2, 3) and (3, 4)"):
        token_step_advantages(torch.zeros(2, 3), torch.zeros(3, 4, dtype=torch.long))
    with refuses("need step_adv (R, K) and token_step (R, T), got (2,) and (2, 3)"):
        token_step_advantages(torch.zeros(2), torch.zeros(2, 3, dtype=torch.long))
    with refuses("token_step must be a long tensor, got torch.int32"):
        token_step_advantages(torch.zeros(1, 3), torch.zeros(1, 2, dtype=torch.int32))
    # -2 is below the "outside" marker -1
    with refuses("token_step values must lie in [-1, 2], got [-2, 0]"):
        token_step_advantages(torch.zeros(1, 3), torch.tensor([[0, -2]]))
    with refuses("outcome_adv was given but outside='zero' ignores it; pass outside='outcome'"):
        token_step_advantages(torch.zeros(2, 3), torch.zeros(2, 1, dtype=torch.long), "zero", torch.zeros(2))
    # R = 2 rollouts, K = 3 steps: the outcome advantages need one per rollout
    with refuses("outside='outcome' needs outcome_adv of shape (2,), got (3,)"):
        token_step_advantages(torch.zeros(2, 3), torch.zeros(2, 1, dtype=torch.long), "outcome", torch.zeros(3))
    with refuses("outside='outcome' needs outcome_adv of shape (2,), got None"):
        token_step_advantages(torch.zeros(2, 3), torch.zeros(2, 1, dtype=torch.long), "outcome")


def test_outcome_fill_takes_the_step_advantages_dtype():
    step_adv = torch.tensor([[0.5, -1.5, 2.0], [1.0, 0.0, 0.25]])  # float32
    token_step = torch.tensor([[0, -1, 2], [-1, 1, 1]])
    out = token_step_advantages(step_adv, token_step, "outcome", torch.tensor([7.0, 8.0], dtype=torch.float64))
    # inside: step_adv[r, k]; outside (-1): the rollout's outcome advantage
    assert out.dtype == torch.float32
    assert out.tolist() == [[0.5, 7.0, 2.0], [8.0, 0.0, 0.0]]


def test_spans_missing_in_the_middle_adjacent_and_zero_width():
    offsets = [[(i, i + 1) for i in range(5)]]  # one token per character
    # step 1 missing: characters 2 (no step) and 3-4 (step 2) still resolve -> [0, 0, -1, 2, 2]
    steps = char_spans_to_token_steps([[(0, 2), None, (3, 5)]], offsets, 5)
    assert steps.dtype == torch.long and steps.tolist() == [[0, 0, -1, 2, 2]]
    # adjacent spans (step 0 ends where step 2 starts) and a zero-width step 1 at 2 are valid; the zero-width
    # step owns no character: [0, 0, 2, 2, -1]
    assert char_spans_to_token_steps([[(0, 2), (2, 2), (2, 4)]], offsets, 5).tolist() == [[0, 0, 2, 2, -1]]


def test_span_refusals_name_the_row_and_step():
    with refuses("row 1: step 0 span (3, 1) is not a valid (start, end) with 0 <= start <= end"):
        char_spans_to_token_steps([[(0, 1)], [(3, 1)]], [[], []], 2)
    with refuses(
        "row 0: step 1 span (3, 8) overlaps or precedes step 0's span (0, 5); spans must be ordered and disjoint"
    ):
        char_spans_to_token_steps([[(0, 5), (3, 8)]], [[(0, 1)]], 2)
    with refuses("got spans for 2 rows but token offsets for 1"):
        char_spans_to_token_steps([[(0, 1)], [(0, 1)]], [[(0, 1)]], 2)
