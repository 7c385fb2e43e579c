"""Trajectory balance (FlowRL, DISA, TraFL): the pure maths of reasonrl.losses.balance, checked against
numbers worked out by hand (spec shared/specs/objectives.md sections 1.5, 7 (d) and 8 (d))."""

import math

import pytest
import torch

from reasonrl.losses.balance import (
    draw_masks,
    elbo_estimate,
    ess,
    log_partition_is,
    sequence_weight,
    token_mean,
    trajectory_balance,
)


def test_disa_hand_example_log_z_hat_and_loss_and_no_gradient_to_log_z():
    # spec 7 (d): lbar_ref = [-1,-1,-2,-2], lbar_mu = [-1,-1,-1,-1], r = [1,0,1,0], beta = 1.
    # exponents L_ref - L_mu + beta r = [0+1, 0+0, -1+1, -1+0] = [1, 0, 0, -1]
    # sum of exp: e + 1 + 1 + 1/e = 2.718282 + 2 + 0.367879 = 5.086161; ln 5.086161 = 1.626523
    # (ln 5 = 1.609438, ln(5.086161 / 5) = ln 1.017232 = 0.017085); minus ln 4 = 1.386294 -> 0.240229
    log_z, diag = log_partition_is(
        torch.tensor([-1.0, -1.0, -2.0, -2.0]),
        torch.tensor([-1.0, -1.0, -1.0, -1.0]),
        torch.tensor([1.0, 0.0, 1.0, 0.0]),
        beta=1.0,
    )
    assert log_z == pytest.approx(0.240229, abs=1e-6)
    # IS weights pi_ref/mu = [1, 1, 1/e, 1/e]: sum 2.735759, sum of squares 2 + 2/e^2 = 2.270671,
    # ESS = 2.735759^2 / 2.270671 = 7.484377 / 2.270671 = 3.296108
    assert diag["ess"] == pytest.approx(3.296108, abs=1e-4)
    # the summed terms [e, 1, 1, 1/e]: sum 5.086161, squares e^2 + 2 + e^-2 = 7.389056 + 2 + 0.135335 = 9.524391,
    # ESS = 25.869034 / 9.524391 = 2.716082
    assert diag["ess_tilted"] == pytest.approx(2.716082, abs=1e-4)
    # the policy rollout: lbar_theta = -0.5, lbar_ref = -0.6, r = 1, w = 1:
    # delta = 0.240229 - 0.5 + 0.6 - 1 = -0.659771, loss = 0.659771^2 = 0.435298
    frozen = torch.tensor([log_z])  # the table's value: no grad
    lbar = torch.tensor([-0.5], requires_grad=True)
    loss, m = trajectory_balance(
        frozen, lbar, torch.tensor([-0.6]), torch.tensor([1.0]), torch.ones(1), beta=1.0, n_seqs=1
    )
    assert float(loss.detach()) == pytest.approx(0.435298, abs=1e-6)
    assert m["balance/delta_term"] == pytest.approx(-0.659771, abs=1e-6)
    loss.backward()
    assert float(lbar.grad) == pytest.approx(2 * -0.659771, abs=1e-6)  # d delta^2 / d lbar = 2 delta
    # log Z enters delta with coefficient +1, so a log Z with grad (a head's) would get the same 2 delta; the
    # DISA part passes the table's value as a constant (tests/test_balance_residual.py checks the gradient
    # reaches the policy's log-probs only)
    z = torch.tensor([log_z], requires_grad=True)
    trajectory_balance(
        z, torch.tensor([-0.5]), torch.tensor([-0.6]), torch.tensor([1.0]), torch.ones(1), beta=1.0, n_seqs=1
    )[0].backward()
    assert float(z.grad) == pytest.approx(2 * -0.659771, abs=1e-6)


def test_trafl_hand_example_surrogate_loss_and_gradient_to_log_z():
    # spec 8 (d): a length-4 response, t = 0.5, positions {1, 3} masked; the policy's log-probs there -0.2, -0.6
    # (the other positions hold values that must not count). l_hat = (1/0.5)(-0.2 - 0.6) = -1.6, lbar = -1.6/4 = -0.4;
    # the reference's [-0.3, -0.5] give the same -0.4.
    masked = torch.tensor([[[False, True, False, True]]])  # (N=1, K=1, L=4)
    t, scored = torch.tensor([[0.5]]), torch.ones(1, 4)
    pol = elbo_estimate(torch.tensor([[[-9.0, -0.2, -9.0, -0.6]]]), masked, t, scored)
    ref = elbo_estimate(torch.tensor([[[-7.0, -0.3, -7.0, -0.5]]]), masked, t, scored)
    assert float(pol) == pytest.approx(-0.4) and float(ref) == pytest.approx(-0.4)
    # log Z = 0.5, beta = 1, r_hat = 1, w = 1: delta = 0.5 - 0.4 + 0.4 - 1 = -0.5, loss 0.25,
    # d loss / d log Z = 2 delta = -1
    log_z = torch.tensor([0.5], requires_grad=True)
    loss, _ = trajectory_balance(log_z, pol, ref, torch.tensor([1.0]), torch.ones(1), beta=1.0, n_seqs=1)
    assert float(loss.detach()) == pytest.approx(0.25)
    loss.backward()
    assert float(log_z.grad) == pytest.approx(-1.0)


def test_elbo_ignores_positions_outside_the_response_and_averages_draws():
    # L = 3 positions, the response is the first 2 (n = 2); two draws: t = 0.5 masking {0, 2}, t = 1 masking all.
    # draw 1: only position 0 counts (2 is outside): -1 / 0.5 = -2; draw 2: (-1 - 2) / 1 = -3; mean -2.5, / n -> -1.25
    logp = torch.tensor([[[-1.0, -2.0, -4.0], [-1.0, -2.0, -4.0]]])  # (1, 2, 3)
    masked = torch.tensor([[[True, False, True], [True, True, True]]])
    out = elbo_estimate(logp, masked, torch.tensor([[0.5, 1.0]]), torch.tensor([[1, 1, 0]]))
    assert float(out) == pytest.approx(-1.25)


def test_d1_one_step_is_the_t_equals_one_case_the_token_mean():
    # t = 1 masks every position: l_hat = sum log p, lbar = the plain token mean (d1's one-step estimate)
    g = torch.Generator().manual_seed(0)
    levels, masks = draw_masks(2, 1, 5, g, t=1.0)
    assert bool(masks.all()) and float(levels.min()) == 1.0
    logp = torch.tensor([[-1.0, -2.0, -3.0, 0.0, 0.0], [-0.5, -0.5, 0.0, 0.0, 0.0]])
    scored = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 0, 0, 0]])
    got = elbo_estimate(logp[:, None, :], masks, levels, scored)
    assert torch.allclose(got, token_mean(logp, scored))  # [-2, -0.5]
    assert torch.allclose(got, torch.tensor([-2.0, -0.5]))


def test_draw_masks_is_seeded_and_levels_lie_in_the_llada_range():
    a = draw_masks(3, 2, 8, torch.Generator().manual_seed(7))
    b = draw_masks(3, 2, 8, torch.Generator().manual_seed(7))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    levels = draw_masks(500, 1, 4, torch.Generator().manual_seed(0), t_min=0.1)[0]
    assert float(levels.min()) >= 0.1 and float(levels.max()) <= 1.0


def test_sequence_weight_variants_by_hand():
    # row 0: token log-ratios 0.1 + 0.2 = 0.3 -> exp 1.349859; row 1: -0.5 -> 0.606531 (its padding, 9, is masked out)
    logp = torch.tensor([[0.1, 0.2], [-0.5, 9.0]])
    old, mask = torch.zeros(2, 2), torch.tensor([[1, 1], [1, 0]])
    raw = sequence_weight(logp, old, mask, "none")
    assert torch.allclose(raw, torch.tensor([1.349859, 0.606531]), atol=1e-6)
    assert torch.allclose(sequence_weight(logp, old, mask, "clip"), torch.tensor([1.2, 0.8]))  # [0.8, 1.2]
    assert torch.allclose(sequence_weight(logp, old, mask, "clip", 0.2, 0.28), torch.tensor([1.28, 0.8]))
    assert torch.allclose(sequence_weight(logp, old, mask, "cap", cap=1.3), torch.tensor([1.3, 0.606531]), atol=1e-6)
    assert torch.equal(sequence_weight(logp, old, mask, "one"), torch.ones(2))
    with pytest.raises(ValueError, match="unknown importance weight"):
        sequence_weight(logp, old, mask, "tis")


def test_trajectory_balance_is_invariant_to_micro_batching():
    # four rows in one pass (n_seqs = 4) or as two micro-batches of two (each normalised by the global 4):
    # the summed losses and the accumulated gradients are the same
    torch.manual_seed(0)
    log_z, lbar, ref, r, w = torch.randn(4), torch.randn(4), torch.randn(4), torch.randn(4), torch.rand(4) + 0.5
    whole_z, whole_l = log_z.clone().requires_grad_(), lbar.clone().requires_grad_()
    full, _ = trajectory_balance(whole_z, whole_l, ref, r, w, beta=15.0, n_seqs=4)
    full.backward()
    split_z, split_l = log_z.clone().requires_grad_(), lbar.clone().requires_grad_()
    total = 0.0
    for idx in (torch.tensor([0, 3]), torch.tensor([1, 2])):
        part, _ = trajectory_balance(split_z[idx], split_l[idx], ref[idx], r[idx], w[idx], beta=15.0, n_seqs=4)
        part.backward()
        total += float(part.detach())
    assert total == pytest.approx(float(full.detach()), rel=1e-6)
    assert torch.allclose(split_z.grad, whole_z.grad) and torch.allclose(split_l.grad, whole_l.grad)


def test_trajectory_balance_metrics_by_hand():
    # two rows: delta = [0 + 0 - 0 - 2 * 1, 1 + 0 - 0 - 2 * 0] = [-2, 1]; w = [1, 0.5] -> loss (4 + 0.5) / 2 = 2.25
    loss, m = trajectory_balance(
        torch.tensor([0.0, 1.0]),
        torch.zeros(2),
        torch.zeros(2),
        torch.tensor([1.0, 0.0]),
        torch.tensor([1.0, 0.5]),
        beta=2.0,
        n_seqs=2,
    )
    assert float(loss.detach()) == pytest.approx(2.25)
    assert m["balance/delta_term"] == pytest.approx(-0.5) and m["balance/delta_abs_term"] == pytest.approx(1.5)
    assert m["balance/log_z_term"] == pytest.approx(0.5) and m["balance/w_term"] == pytest.approx(0.75)
    assert m["balance/delta_std"] == pytest.approx(
        math.sqrt(4.5)
    )  # unbiased std of [-2, 1]: sqrt(((-1.5)^2 + 1.5^2) / 1)


def test_ess_of_equal_weights_is_n_and_of_one_dominant_weight_is_one():
    assert ess(torch.zeros(8)) == pytest.approx(8.0)
    assert ess(torch.tensor([0.0, -80.0, -80.0])) == pytest.approx(1.0)


def test_log_partition_is_rejects_unequal_shapes():
    with pytest.raises(ValueError, match="three"):
        log_partition_is(torch.zeros(3), torch.zeros(2), torch.zeros(3), 1.0)


# ------------------------------------------------------------------ cases the mutation run found untested (issue 45)


def test_token_mean_and_elbo_of_one_token_rows():
    # a row of one token is its own mean (-3 / 1), not halved; the ELBO of a 1-token response at t = 1 likewise
    assert torch.allclose(
        token_mean(torch.tensor([[-3.0, 5.0], [-1.0, -2.0]]), torch.tensor([[1, 0], [1, 1]])),
        torch.tensor([-3.0, -1.5]),
    )
    got = elbo_estimate(
        torch.tensor([[[-3.0, 5.0]]]), torch.tensor([[[True, True]]]), torch.ones(1, 1), torch.tensor([[1, 0]])
    )
    assert float(got) == pytest.approx(-3.0)


def test_log_partition_is_reports_n_and_the_reward_mean_and_rejects_a_2d_input():
    # the spec 7 (d) example above: N = 4 proposals, rewards [1, 0, 1, 0] -> mean 0.5
    _, diag = log_partition_is(
        torch.tensor([-1.0, -1.0, -2.0, -2.0]),
        torch.tensor([-1.0, -1.0, -1.0, -1.0]),
        torch.tensor([1.0, 0.0, 1.0, 0.0]),
        beta=1.0,
    )
    assert diag["n"] == 4.0 and diag["reward_mean"] == 0.5
    with pytest.raises(ValueError, match="three"):  # equal shapes, but (2, 2): not one prompt's N proposals
        log_partition_is(torch.zeros(2, 2), torch.zeros(2, 2), torch.zeros(2, 2), 1.0)


def test_draw_masks_default_range_shapes_and_independent_rows():
    levels, masks = draw_masks(400, 3, 64, torch.Generator().manual_seed(0))  # t_min = 1e-3: t in (0.001, 1]
    assert levels.shape == (400, 3) and masks.shape == (400, 3, 64)
    assert float(levels.min()) > 1e-3 and float(levels.max()) <= 1.0
    # a fixed t = 0.5 still draws each row's positions on their own: two rows of 64 coincide with probability 2^-128
    _, fixed = draw_masks(2, 1, 64, torch.Generator().manual_seed(0), t=0.5)
    assert not torch.equal(fixed[0], fixed[1])


def test_sequence_weight_defaults_bounds_and_refusal():
    logp, old, mask = torch.tensor([[0.1, 0.2]]), torch.zeros(1, 2), torch.ones(1, 2)
    assert torch.allclose(sequence_weight(logp, old, mask), torch.tensor([1.2]))  # the default is clip: 1.35 -> 1.2
    # the default cap is 10: a log-ratio of 3 gives exp(3) = 20.09 -> 10
    assert float(sequence_weight(torch.tensor([[3.0]]), torch.zeros(1, 1), torch.ones(1, 1), "cap")) == 10.0
    # the log-ratio is clamped to +-20 before exp (raw mode: no cap applies): 25 -> exp(20), -25 -> exp(-20)
    w = sequence_weight(torch.tensor([[25.0], [-25.0]]), torch.zeros(2, 1), torch.ones(2, 1), "none")
    assert torch.allclose(w.log(), torch.tensor([20.0, -20.0]), atol=1e-4)
    one = sequence_weight(torch.zeros(3, 2, dtype=torch.float64), torch.zeros(3, 2), torch.ones(3, 2), "one")
    assert one.dtype == torch.float64 and torch.equal(one, torch.ones(3, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"unknown importance weight 'tis'; valid: clip, cap, none, one"):
        sequence_weight(logp, old, mask, "tis")


def test_trajectory_balance_loss_and_gap_terms_and_one_row_std():
    # rows lbar (-1, -2), lbar_ref (-1.5, -1), log Z 0, r 0, w 1, n_seqs 4: delta (0.5, -1), loss (0.25 + 1) / 4
    # = 0.3125; logp gap (0.5 - 1) / 4 = -0.125
    loss, m = trajectory_balance(
        torch.zeros(2),
        torch.tensor([-1.0, -2.0]),
        torch.tensor([-1.5, -1.0]),
        torch.zeros(2),
        torch.ones(2),
        beta=1.0,
        n_seqs=4,
    )
    assert m["balance/loss_term"] == pytest.approx(0.3125) and m["balance/logp_gap_term"] == pytest.approx(-0.125)
    _, one = trajectory_balance(
        torch.zeros(1), torch.tensor([-1.0]), torch.tensor([-1.5]), torch.zeros(1), torch.ones(1), beta=1.0, n_seqs=1
    )
    assert one["balance/delta_std"] == 0.0  # one row: no spread (the unbiased std of one value is undefined)
