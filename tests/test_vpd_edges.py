"""Edges of VPD's maths (losses/vpd.py) by hand: error messages, 0 log 0 and batched rows in the
categorical KL, the controller's exact band edges and smallest valid settings, the temperature reaching
the divergence, and the per-row token mean (issue 45's mutation survivors)."""

import math

import pytest
import torch

from reasonrl.losses.vpd import (
    adapt_beta,
    categorical_kl,
    exact_token_kl,
    m_step_token_loss,
    optimal_posterior,
    row_token_mean,
)


def test_optimal_posterior_message():
    with pytest.raises(ValueError) as e:
        optimal_posterior(torch.tensor([0.5, 0.5]), torch.zeros(2), 0.0)
    assert str(e.value) == "optimal_posterior needs beta > 0, got 0.0"


def test_categorical_kl_is_per_row_with_zero_log_zero():
    # row 0: q = (1, 0), p = (0.5, 0.5): 1 * log(1 / 0.5) + 0 (0 log 0 = 0, not NaN) = log 2 = 0.693147
    # row 1: q = p -> 0
    q = torch.tensor([[1.0, 0.0], [0.3, 0.7]])
    p = torch.tensor([[0.5, 0.5], [0.3, 0.7]])
    kl = categorical_kl(q, p)
    assert kl.shape == (2,)
    assert kl.tolist() == pytest.approx([math.log(2), 0.0], abs=1e-6)


@pytest.mark.parametrize(
    "kw",
    [{"beta": 0.0}, {"target": 0.0}, {"factor": 0.9}, {"band": 0.9}],
)
def test_adapt_beta_refuses_bad_settings_with_all_four_in_the_message(kw):
    args = {"beta": 0.1, "target": 0.05, "factor": 2.0, "band": 1.5, **kw}
    with pytest.raises(ValueError) as e:
        adapt_beta(args["beta"], 0.1, args["target"], factor=args["factor"], band=args["band"])
    assert str(e.value) == (
        "adapt_beta needs beta > 0, target > 0, factor >= 1, band >= 1; "
        f"got beta={args['beta']}, target={args['target']}, factor={args['factor']}, band={args['band']}"
    )


def test_adapt_beta_accepts_the_smallest_valid_factor_and_band():
    # factor 1 (a no-op step) and band 1 are allowed: KL 0.1 > 1 * 0.05 -> 0.1 * 1 = 0.1;
    # factor 1.5 (between 1 and 2): 0.1 * 1.5 = 0.15
    assert adapt_beta(0.1, 0.1, 0.05, factor=1.0, band=1.0) == pytest.approx(0.1)
    assert adapt_beta(0.1, 0.1, 0.05, factor=1.5, band=1.0) == pytest.approx(0.15)


def test_adapt_beta_leaves_beta_at_exactly_the_band_edges():
    # target 0.25, band 2: edges 0.5 and 0.125, both exact in binary; neither is strictly outside
    assert adapt_beta(0.1, 0.5, 0.25, band=2.0) == 0.1
    assert adapt_beta(0.1, 0.125, 0.25, band=2.0) == 0.1
    # just outside: 0.1 * 2 and 0.1 / 2
    assert adapt_beta(0.1, 0.51, 0.25, band=2.0) == pytest.approx(0.2)
    assert adapt_beta(0.1, 0.12, 0.25, band=2.0) == pytest.approx(0.05)


# teacher/student pair: logits (0, 0) = uniform; logits (2 log 3, 0) at temperature 2 -> (log 3, 0) ->
# (0.75, 0.25), at temperature 1 -> (0.9, 0.1).
# KL(uniform || (0.75, 0.25)) = 0.5 log(0.5 / 0.75) + 0.5 log(0.5 / 0.25) = -0.202733 + 0.346574 = 0.143841
# KL(uniform || (0.9, 0.1)) = 0.5 log(0.5 / 0.9) + 0.5 log 5 = -0.293893 + 0.804719 = 0.510826
UNIFORM = torch.zeros(1, 1, 2)
SKEWED = torch.tensor([[[2 * math.log(3.0), 0.0]]])


def test_exact_token_kl_applies_the_temperature():
    assert exact_token_kl(UNIFORM, SKEWED).item() == pytest.approx(0.510826, abs=1e-6)
    assert exact_token_kl(UNIFORM, SKEWED, temperature=2.0).item() == pytest.approx(0.143841, abs=1e-6)


def test_m_step_token_loss_applies_the_temperature():
    # reverse KL(student || teacher) with the uniform student and the skewed teacher
    kw = {"student_logits": UNIFORM, "teacher_logits": SKEWED}
    assert m_step_token_loss("reverse_kl", **kw).item() == pytest.approx(0.510826, abs=1e-6)
    assert m_step_token_loss("reverse_kl", temperature=2.0, **kw).item() == pytest.approx(0.143841, abs=1e-6)


def test_m_step_token_loss_names_the_valid_kinds():
    with pytest.raises(ValueError) as e:
        m_step_token_loss("jsd", student_logp=torch.zeros(1, 1), teacher_logp=torch.zeros(1, 1))
    assert str(e.value) == "unknown M-step divergence 'jsd'; valid: reverse_kl, forward_kl, sampled"


def test_row_token_mean_divides_each_row_by_its_own_length():
    # row 0: (1 + 3) / 2 = 2; row 1: (2 + 4 + 6) / 3 = 4; row 2 one token: 7 / 1 = 7
    v = torch.tensor([[1.0, 3.0, 5.0], [2.0, 4.0, 6.0], [7.0, 9.0, 9.0]])
    m = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0]])
    assert row_token_mean(v, m).tolist() == [2.0, 4.0, 7.0]
    # a float64 mask keeps the values' float32
    assert row_token_mean(v, m.double()).dtype == torch.float32
