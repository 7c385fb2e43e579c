"""Advantage estimators, every expectation worked by hand in the comment next to it."""

import math

import pytest
import torch

from reasonrl.advantages import (
    ESTIMATORS,
    dr_grpo,
    get_estimator,
    grpo,
    reinforce_pp,
    reinforce_pp_group,
    rloo,
)


def t(rows):
    return torch.tensor(rows, dtype=torch.float64)


def test_grpo_spec_vector_unbiased_std():
    # r = [1,0,0,0]: mean 0.25; unbiased var = (0.75² + 3·0.25²)/3 = 0.75/3 = 0.25 -> std 0.5
    # A = (r - 0.25) / 0.5 = [1.5, -0.5, -0.5, -0.5] (eps 1e-6 moves it by ~3e-6)
    adv = grpo(t([[1, 0, 0, 0]]))
    assert torch.allclose(adv, t([[1.5, -0.5, -0.5, -0.5]]), atol=1e-5)
    assert torch.allclose(grpo(t([[1, 0, 0, 0]]), eps=0.0), t([[1.5, -0.5, -0.5, -0.5]]), atol=1e-12)


def test_grpo_biased_std():
    # biased var = 0.75/4 = 0.1875 -> std sqrt(0.1875) = 0.4330127
    # A = [0.75, -0.25, -0.25, -0.25] / 0.4330127 = [1.7320508, -0.5773503 ×3] (i.e. [√3, -1/√3 ×3])
    adv = grpo(t([[1, 0, 0, 0]]), unbiased=False, eps=0.0)
    s3 = math.sqrt(3)
    assert torch.allclose(adv, t([[s3, -1 / s3, -1 / s3, -1 / s3]]), atol=1e-12)


def test_grpo_zero_variance_group_gives_exactly_zero():
    # all-equal groups: r - mean = 0 and std = 0; the result must be exactly 0, not residue/eps.
    # 0.1 is not exact in binary, so the mean of [0.1]*3 may differ from 0.1 by an ulp
    r = t([[0.1, 0.1, 0.1], [1, 1, 1], [1, 0, 0]])
    for scale in ("group", "batch", "none"):
        adv = grpo(r, scale=scale)
        assert torch.equal(adv[:2], torch.zeros(2, 3, dtype=torch.float64)), scale
        assert adv[2, 0] > 0
    assert torch.equal(dr_grpo(r)[:2], torch.zeros(2, 3, dtype=torch.float64))
    assert torch.equal(rloo(r)[:2], torch.zeros(2, 3, dtype=torch.float64))
    # float32 as well
    assert torch.equal(grpo(torch.full((1, 7), 0.1)), torch.zeros(1, 7))


def test_grpo_single_sample_group_is_zero_not_nan():
    # G = 1: the N-1 std is NaN, but a one-sample group is constant -> 0
    for scale in ("group", "batch"):
        assert torch.equal(grpo(t([[3.0], [5.0]]), scale=scale), torch.zeros(2, 1, dtype=torch.float64))


def test_grpo_batch_scale_uses_one_std_with_group_means():
    # rows [1,0,0,0] (mean .25) and [2,2,0,0] (mean 1); centred: [.75,-.25,-.25,-.25], [1,1,-1,-1]
    # one std over all 8 values 1,0,0,0,2,2,0,0: mean 5/8 = 0.625; squared deviations:
    #   (1-.625)² = .140625; five zeros: 5 × .390625 = 1.953125; two 2s: 2 × 1.890625 = 3.78125
    #   total 5.875 -> unbiased var 5.875/7 = 0.8392857 -> std 0.9161254
    std = math.sqrt(5.875 / 7)
    adv = grpo(t([[1, 0, 0, 0], [2, 2, 0, 0]]), scale="batch", eps=0.0)
    expected = t([[0.75, -0.25, -0.25, -0.25], [1, 1, -1, -1]]) / std
    assert torch.allclose(adv, expected, atol=1e-12)
    # per-group scale would instead give row 2 std = sqrt(4/3): [0.8660254, ...] -- different
    assert not torch.allclose(grpo(t([[2, 2, 0, 0]]), eps=0.0), expected[1:], atol=1e-3)


def test_grpo_scale_none_equals_dr_grpo():
    r = torch.rand(3, 5, dtype=torch.float64)
    assert torch.equal(grpo(r, scale="none"), dr_grpo(r))


def test_dr_grpo_spec_vector():
    # r - mean = [1,0,0,0] - 0.25
    assert torch.allclose(dr_grpo(t([[1, 0, 0, 0]])), t([[0.75, -0.25, -0.25, -0.25]]), atol=1e-12)


def test_rloo_by_hand():
    # i=0: 1 - mean(0,0,0) = 1; i>0: 0 - mean(1,0,0) = -1/3
    assert torch.allclose(rloo(t([[1, 0, 0, 0]])), t([[1, -1 / 3, -1 / 3, -1 / 3]]), atol=1e-12)
    # G = 2: [3, 1] -> [3-1, 1-3] = [2, -2]
    assert torch.allclose(rloo(t([[3, 1]])), t([[2, -2]]), atol=1e-12)


def test_rloo_is_rescaled_dr_grpo():
    # r_i - (S - r_i)/(G-1) = (G r_i - S)/(G-1) = G/(G-1) (r_i - mean)
    r = torch.rand(4, 6, dtype=torch.float64)
    assert torch.allclose(rloo(r), dr_grpo(r) * 6 / 5, atol=1e-12)


def test_rloo_needs_two_samples():
    with pytest.raises(ValueError, match="G >= 2"):
        rloo(t([[1.0], [0.0]]))


def test_integer_rewards_are_accepted():
    assert torch.allclose(dr_grpo(torch.tensor([[1, 0, 0, 0]])), torch.tensor([[0.75, -0.25, -0.25, -0.25]]))


def test_invalid_arguments():
    with pytest.raises(ValueError, match="group, batch, none"):
        grpo(t([[1, 0]]), scale="prompt")
    with pytest.raises(ValueError, match=r"\(B, G\)"):
        grpo(t([1, 0]))


def test_registry():
    assert set(ESTIMATORS) == {"grpo", "dr_grpo", "rloo", "reinforce", "reinforce_pp", "reinforce_pp_baseline"}
    assert get_estimator("rloo") is rloo
    assert get_estimator("reinforce_pp") is reinforce_pp
    assert get_estimator("reinforce_pp_baseline") is reinforce_pp_group
    with pytest.raises(ValueError, match="dr_grpo, grpo, reinforce, reinforce_pp, reinforce_pp_baseline, rloo"):
        get_estimator("ppo")


# --- REINFORCE++ ---------------------------------------------------------------------------------


def test_reinforce_pp_by_hand_uses_one_batch_baseline():
    # all 4 rewards 1,0,0,0: batch mean 0.25, unbiased std 0.5 -> (r - 0.25)/0.5
    # = [[1.5, -0.5], [-0.5, -0.5]]: the constant group [0, 0] is NOT zero (no group baseline)
    adv = reinforce_pp(t([[1, 0], [0, 0]]), eps=0.0)
    assert torch.allclose(adv, t([[1.5, -0.5], [-0.5, -0.5]]), atol=1e-12)
    # eps=1e-6 in the denominator: 0.75/0.500001 = 1.4999970
    assert reinforce_pp(t([[1, 0], [0, 0]]))[0, 0].item() == pytest.approx(1.499997, abs=1e-6)


def test_reinforce_pp_second_vector_and_biased_std():
    # values 1,0,0,0,2,2,0,0: mean 0.625; squared deviations sum 5.875 (see the grpo batch test)
    # unbiased std sqrt(5.875/7) = 0.9161254; biased sqrt(5.875/8) = 0.8569568
    r = t([[1, 0, 0, 0], [2, 2, 0, 0]])
    assert torch.allclose(reinforce_pp(r, eps=0.0), (r - 0.625) / math.sqrt(5.875 / 7), atol=1e-12)
    assert torch.allclose(reinforce_pp(r, eps=0.0, unbiased=False), (r - 0.625) / math.sqrt(5.875 / 8), atol=1e-12)
    # differs from grpo's per-group centring: row 1's mean is 1, not 0.625
    assert not torch.allclose(reinforce_pp(r, eps=0.0), grpo(r, scale="batch", eps=0.0), atol=1e-3)


def test_reinforce_pp_constant_batch_is_exactly_zero():
    assert torch.equal(reinforce_pp(torch.full((2, 3), 0.1)), torch.zeros(2, 3))
    assert torch.equal(reinforce_pp(t([[4.0]])), torch.zeros(1, 1, dtype=torch.float64))


def test_reinforce_pp_baseline_by_hand():
    # r = [[1, 0], [3, 1]] -> centred c = [[0.5, -0.5], [1, -1]]; batch std of c (mean 0):
    # (0.25 + 0.25 + 1 + 1)/3 = 0.8333333 -> std 0.9128709
    # A = c / 0.9128709 = [[0.5477226, -0.5477226], [1.0954451, -1.0954451]]
    adv = reinforce_pp_group(t([[1, 0], [3, 1]]), eps=0.0)
    assert torch.allclose(adv, t([[0.5477226, -0.5477226], [1.0954451, -1.0954451]]), atol=1e-7)
    # grpo(scale="batch") divides by the std of the raw rewards 1,0,3,1 (4.75/3 -> 1.2583057): different
    assert grpo(t([[1, 0], [3, 1]]), scale="batch", eps=0.0)[0, 0].item() == pytest.approx(0.5 / 1.2583057)


def test_reinforce_pp_baseline_constant_group_is_exactly_zero():
    # [0.1]*3 centres to exact 0 (forced), the other group still gets a signal
    adv = reinforce_pp_group(t([[0.1, 0.1, 0.1], [1, 0, 0]]))
    assert torch.equal(adv[0], torch.zeros(3, dtype=torch.float64)) and adv[1, 0] > 0
    assert torch.equal(reinforce_pp_group(t([[1, 1], [0, 0]])), torch.zeros(2, 2, dtype=torch.float64))


def test_reinforce_is_the_reward_itself_and_allows_groups_of_one():
    # REINFORCE without a baseline: A = r, even in a constant group (a critic supplies the baseline)
    from reasonrl.advantages import group_relative
    from reasonrl.advantages.estimators import reinforce

    assert reinforce(t([[1, 1], [0, 2]])).tolist() == [[1.0, 1.0], [0.0, 2.0]]
    assert not group_relative("reinforce") and group_relative("grpo")
