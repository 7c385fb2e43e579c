"""VPD maths (arXiv 2605.15113; spec shared/specs/distill-and-data.md section 4 (d)), by hand.

The spec's examples (posterior, its KL, a tabular E-step converging to it, the controller, an
M-step on identical distributions) and our own: the k3 / k1 estimates, the exact token KL's gradient
going to the teacher only, the sampled M-step estimate's gradient, the row token mean.
"""

import math

import pytest
import torch

from reasonrl.losses.vpd import (
    adapt_beta,
    categorical_kl,
    elbo,
    exact_token_kl,
    k3_token_kl,
    m_step_token_loss,
    optimal_posterior,
    row_token_mean,
    sampled_kl,
)

PI = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
R = torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64)


def test_spec_posterior_closed_form():
    # q* ∝ pi exp(R / beta), beta = 1: (0.5, 0.3 e, 0.2) / Z, Z = 0.5 + 0.815485 + 0.2 = 1.515485
    q = optimal_posterior(PI, R, 1.0)
    assert q.tolist() == pytest.approx([0.5 / 1.515485, 0.815485 / 1.515485, 0.2 / 1.515485], abs=1e-6)
    assert q.tolist() == pytest.approx([0.3299, 0.5381, 0.1320], abs=5e-5)  # the spec's rounding
    # KL(q* || pi) = E_q*[R] / beta - log Z = 0.538101 - log 1.515485 = 0.538101 - 0.415735 = 0.12237
    assert float(categorical_kl(q, PI)) == pytest.approx(0.12237, abs=5e-6)


def test_posterior_sharpens_as_beta_falls():
    # beta = 0.5: (0.5, 0.3 e^2, 0.2) / (0.7 + 2.216717) -> the rewarded outcome gets 0.760019
    q = optimal_posterior(PI, R, 0.5)
    assert float(q[1]) == pytest.approx(2.216717 / 2.916717, abs=1e-6)
    with pytest.raises(ValueError):
        optimal_posterior(PI, R, 0.0)


def test_spec_tabular_e_step_with_exact_kl_converges_to_the_posterior():
    # gradient ascent on the teacher's logits of E_q[R] - beta KL(q || pi), from q = pi
    logits = PI.log().clone().requires_grad_(True)
    opt = torch.optim.SGD([logits], lr=1.0)
    for _ in range(2000):
        opt.zero_grad()
        (-elbo(logits, PI, R, 1.0)).backward()
        opt.step()
    q = logits.detach().softmax(-1)
    assert q.tolist() == pytest.approx(optimal_posterior(PI, R, 1.0).tolist(), abs=1e-6)
    # at q*, the ELBO equals beta log Z = log 1.515485 = 0.415735 (its maximum)
    assert float(elbo(logits.detach(), PI, R, 1.0)) == pytest.approx(math.log(1.515485), abs=1e-6)


def test_spec_controller_values():
    assert adapt_beta(0.1, 0.1, 0.05) == pytest.approx(0.2)  # 0.1 > 1.5 * 0.05 = 0.075
    assert adapt_beta(0.1, 0.02, 0.05) == pytest.approx(0.05)  # 0.02 < 0.05 / 1.5 = 0.0333
    assert adapt_beta(0.1, 0.05, 0.05) == 0.1  # inside the band: unchanged


def test_controller_band_edges_and_bad_settings():
    assert adapt_beta(0.1, 0.075, 0.05) == 0.1  # exactly 1.5 delta: not above it
    assert adapt_beta(0.1, 0.034, 0.05) == 0.1  # just above delta / 1.5 = 0.03333
    assert adapt_beta(0.4, 1.0, 0.05, factor=3.0) == pytest.approx(1.2)
    with pytest.raises(ValueError):
        adapt_beta(0.0, 0.1, 0.05)
    with pytest.raises(ValueError):
        adapt_beta(0.1, 0.1, 0.05, factor=0.5)


def test_spec_m_step_on_identical_distributions_is_zero():
    logits = torch.randn(2, 3, 5)
    for kind in ("reverse_kl", "forward_kl"):
        assert torch.allclose(
            m_step_token_loss(kind, student_logits=logits, teacher_logits=logits.clone()), torch.zeros(2, 3), atol=1e-6
        )
    lp = torch.randn(2, 3)
    assert torch.equal(m_step_token_loss("sampled", student_logp=lp, teacher_logp=lp.clone()), torch.zeros(2, 3))


def test_m_step_reverse_kl_value_and_gradient_to_the_student_only():
    # p_S = (0.8, 0.2), p_T = (0.5, 0.5): KL(p_S || p_T) = 0.8 ln 1.6 + 0.2 ln 0.4 = 0.376003 - 0.183258 = 0.192745
    s = torch.tensor([[[math.log(0.8), math.log(0.2)]]], requires_grad=True)
    t = torch.tensor([[[0.0, 0.0]]], requires_grad=True)
    loss = m_step_token_loss("reverse_kl", student_logits=s, teacher_logits=t)
    assert float(loss.detach()) == pytest.approx(0.192745, abs=1e-5)
    loss.sum().backward()
    assert t.grad is None and s.grad is not None
    # d/ds_v KL(p_S || p_T) = p_S,v (log p_S,v - log p_T,v - KL) = 0.8 (0.470004 - 0.192745) = 0.221807
    assert s.grad[0, 0].tolist() == pytest.approx([0.221807, -0.221807], abs=1e-5)


def test_m_step_sampled_estimate_gradient_is_the_log_ratio():
    # d/d log pi of sg(log pi - log q) log pi = log pi - log q = -0.5 - (-1.5) = 1.0 per token
    s = torch.tensor([[-0.5, -2.0]], requires_grad=True)
    q = torch.tensor([[-1.5, -1.0]])
    m_step_token_loss("sampled", student_logp=s, teacher_logp=q).sum().backward()
    assert s.grad.tolist() == [[1.0, -1.0]]
    with pytest.raises(ValueError):
        m_step_token_loss("jsd", student_logp=s, teacher_logp=q)


def test_exact_token_kl_trains_the_teacher_against_a_fixed_student():
    # q = (0.8, 0.2), pi = (0.5, 0.5): KL(q || pi) = 0.192745, and the gradient reaches the teacher only
    q = torch.tensor([[[math.log(0.8), math.log(0.2)]]], requires_grad=True)
    pi = torch.tensor([[[0.0, 0.0]]], requires_grad=True)
    kl = exact_token_kl(q, pi)
    assert kl.shape == (1, 1) and float(kl.detach()) == pytest.approx(0.192745, abs=1e-5)
    kl.sum().backward()
    assert pi.grad is None and q.grad is not None


def test_k3_and_k1_estimates():
    # log q = -1, log pi = -2: r = e^-1, k3 = e^-1 - 1 + 1 = 0.367879; k1 = 1
    tq, sp = torch.tensor([[-1.0, -0.5]]), torch.tensor([[-2.0, -0.5]])
    assert k3_token_kl(tq, sp).tolist()[0] == pytest.approx([math.exp(-1.0), 0.0], abs=1e-6)
    # k1 over the mask: (1 + 0) / 2 = 0.5; the second token masked out: 1.0
    assert sampled_kl(tq, sp, torch.ones(1, 2)) == pytest.approx(0.5)
    assert sampled_kl(tq, sp, torch.tensor([[1.0, 0.0]])) == pytest.approx(1.0)


def test_row_token_mean_ignores_padding_and_empty_rows():
    v = torch.tensor([[1.0, 3.0, 100.0], [5.0, 0.0, 0.0]])
    m = torch.tensor([[1, 1, 0], [0, 0, 0]])
    assert row_token_mean(v, m).tolist() == [2.0, 0.0]
