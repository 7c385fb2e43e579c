"""TGPO / RKL-OPD / KDRL maths (losses/teacher.py): the spec's section 3 (d) values by hand, and
the sign conventions of the module docstring."""

import math

import pytest
import torch

from reasonrl.advantages import grpo
from reasonrl.losses.teacher import (
    kdrl_loss,
    rkl_opd_advantages,
    teacher_agreement,
    teacher_coef,
    tgpo_adv_advantages,
    tgpo_reg_loss,
)

# log-softmax([1, 0, 2]): logsumexp = log(e + 1 + e^2) = log(11.107338) = 2.407606,
# so [1 - 2.407606, 0 - 2.407606, 2 - 2.407606] = [-1.407606, -2.407606, -0.407606]
LOGITS = [1.0, 0.0, 2.0]


def _student_logp_at(teacher_id: int):
    logits = torch.tensor([LOGITS], requires_grad=True)  # (T=1, V=3)
    logp = logits.log_softmax(-1)  # (1, 3)
    return logits, logp, logp[:, teacher_id][None]  # (1, 1) l^T


def test_spec_log_softmax_and_reg_term_values():
    _, logp, _ = _student_logp_at(2)
    torch.testing.assert_close(logp[0].detach(), torch.tensor([-1.407606, -2.407606, -0.407606]), atol=1e-5, rtol=0)
    for teacher_id, nll in ((2, 0.407606), (1, 2.407606)):
        _, _, lt = _student_logp_at(teacher_id)
        loss, m = tgpo_reg_loss(lt, torch.ones(1, 1), coef=0.002)
        assert float(loss) == pytest.approx(0.002 * nll, abs=1e-8)  # the reg term is lambda * (-l^T)
        assert m["teacher/tgpo_nll"] == pytest.approx(nll, abs=1e-5)
        assert m["teacher/tgpo_prob"] == pytest.approx(math.exp(-nll), abs=1e-6)


def test_spec_gradient_is_softmax_minus_onehot():
    # softmax([1, 0, 2]) = [0.244728, 0.090031, 0.665241]; minus onehot(2) -> [0.2447, 0.0900, -0.3348]
    logits, _, lt = _student_logp_at(2)
    loss, _ = tgpo_reg_loss(lt, torch.ones(1, 1), coef=1.0)
    loss.backward()
    torch.testing.assert_close(logits.grad[0], torch.tensor([0.244728, 0.090031, -0.334759]), atol=1e-5, rtol=0)


def test_spec_decay_schedule():
    # reg: 0.002 - (k - 1) 1e-5: k=1 -> 0.002, k=101 -> 0.002 - 0.001 = 0.001, k=250 -> max(-0.00049, 0) = 0
    assert teacher_coef(1, 0.002, 1e-5) == pytest.approx(0.002)
    assert teacher_coef(101, 0.002, 1e-5) == pytest.approx(0.001)
    assert teacher_coef(201, 0.002, 1e-5) == pytest.approx(0.0, abs=1e-15)  # reaches 0 at step 201
    assert teacher_coef(250, 0.002, 1e-5) == 0.0
    # adv: 0.02 - 50 * 1e-4 = 0.015 at step 51; a floor holds
    assert teacher_coef(51, 0.02, 1e-4) == pytest.approx(0.015)
    assert teacher_coef(1000, 0.02, 1e-4, min_coef=0.001) == 0.001
    with pytest.raises(ValueError, match="from 1"):
        teacher_coef(0, 0.002, 1e-5)


def test_spec_grpo_advantages_unbiased_std():
    # rewards [1, 0, 0, 0]: mean 0.25, unbiased var (0.75^2 + 3 * 0.25^2) / 3 = 0.25, std 0.5
    adv = grpo(torch.tensor([[1.0, 0.0, 0.0, 0.0]]))
    torch.testing.assert_close(adv[0], torch.tensor([1.5, -0.5, -0.5, -0.5]), atol=1e-5, rtol=0)


def test_reg_term_is_normalised_by_the_global_token_count():
    # two rows, 3 + 1 tokens; l^T = log 0.5 everywhere: token-mean over n_tokens=8 (a larger minibatch)
    lt = torch.full((2, 3), math.log(0.5))
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    loss, m = tgpo_reg_loss(lt, mask, coef=0.5, n_tokens=8)
    assert float(loss) == pytest.approx(0.5 * 4 * math.log(2) / 8)  # 4 real tokens of -log 0.5 each
    # seq-mean-token-mean: each row's mean is log 2, averaged over n_seqs = 2
    loss2, _ = tgpo_reg_loss(lt, mask, coef=1.0, agg="seq-mean-token-mean", n_seqs=2)
    assert float(loss2) == pytest.approx(math.log(2))
    assert m["teacher/tgpo_term"] == pytest.approx(0.5 * 4 * math.log(2) / 8)


def test_tgpo_adv_bonus_by_hand():
    # A = [1.5, -0.5]; old p(teacher token) = [[0.5, 0.2], [1.0, pad]]; lambda 0.02
    # -> [[1.5 + 0.01, 1.5 + 0.004], [-0.5 + 0.02, 0]]
    old = torch.log(torch.tensor([[0.5, 0.2], [1.0, 0.3]]))
    mask = torch.tensor([[1, 1], [1, 0]])
    out = tgpo_adv_advantages(torch.tensor([1.5, -0.5]), old, mask, coef=0.02)
    torch.testing.assert_close(out, torch.tensor([[1.51, 1.504], [-0.48, 0.0]]), atol=1e-6, rtol=0)
    assert (out - torch.tensor([[1.5, 1.5], [-0.5, 0.0]]) >= 0).all()  # the bonus is never negative


def test_rkl_opd_sign_and_grpo_merge():
    # teacher likes token 0 more than the student (-0.5 vs -1.5): +1; token 1 less (-3 vs -1): -2
    teacher = torch.tensor([[-0.5, -3.0, -1.0]])
    old = torch.tensor([[-1.5, -1.0, -1.0]])
    mask = torch.tensor([[1, 1, 0]])
    torch.testing.assert_close(rkl_opd_advantages(teacher, old, mask), torch.tensor([[1.0, -2.0, 0.0]]))
    # grpo_merge_rkl: A + 0.002 (log pi_T - log pi_old) = 1.5 + [0.002, -0.004]
    out = rkl_opd_advantages(teacher, old, mask, coef=0.002, seq_adv=torch.tensor([1.5]), grpo_weight=1.0)
    torch.testing.assert_close(out, torch.tensor([[1.502, 1.496, 0.0]]))
    with pytest.raises(ValueError, match="seq_adv"):
        rkl_opd_advantages(teacher, old, mask, grpo_weight=1.0)


def test_rkl_opd_mean_is_minus_the_reverse_kl():
    # exact expectation over the student's distribution p = [0.5, 0.5] with teacher q = [0.8, 0.2]:
    # E_p[log q - log p] = 0.5 log(1.6) + 0.5 log(0.4) = -KL(p || q) = -0.223144
    p, q = torch.tensor([0.5, 0.5]), torch.tensor([0.8, 0.2])
    adv = rkl_opd_advantages(q.log()[None], p.log()[None], torch.ones(1, 2))
    assert float((p * adv[0]).sum()) == pytest.approx(-0.223144, abs=1e-6)


def test_kdrl_value_and_that_a_step_lowers_the_kl():
    # k2: 0.5 (log pi - log pi_T)^2 = 0.5 (-1 - -2)^2 = 0.5; beta 0.002 -> 0.001
    loss, m = kdrl_loss(torch.tensor([[-1.0]]), torch.tensor([[-2.0]]), torch.ones(1, 1), coef=0.002)
    assert float(loss) == pytest.approx(0.001) and m["teacher/kdrl_kl"] == pytest.approx(0.5)
    # sign: minimising the term moves the student's log-prob of the sampled token toward the teacher's
    logits = torch.tensor([[0.0, 0.0, 0.0]], requires_grad=True)  # log p(token 0) = log 1/3 = -1.0986
    teacher = torch.tensor([[math.log(0.8)]])  # -0.2231: the teacher likes token 0 more
    kl_before = None
    for _ in range(2):
        logp = logits.log_softmax(-1)[:, :1]  # (1, 1)
        loss, m = kdrl_loss(logp, teacher, torch.ones(1, 1), coef=1.0)
        kl_before = m["teacher/kdrl_kl"] if kl_before is None else kl_before
        logits.grad = None
        loss.backward()
        with torch.no_grad():
            logits -= 0.5 * logits.grad
    assert m["teacher/kdrl_kl"] < kl_before  # 0.5 (1.0986 - 0.2231)^2 = 0.3833 before
    assert kl_before == pytest.approx(0.5 * (math.log(3) - 0.223144) ** 2, abs=1e-5)
    k1, _ = kdrl_loss(torch.tensor([[-1.0]]), torch.tensor([[-2.0]]), torch.ones(1, 1), coef=1.0, estimator="k1")
    assert float(k1) == pytest.approx(1.0)  # k1 = log pi - log pi_T


def test_teacher_agreement():
    ids = torch.tensor([[3, 4, 5], [1, 2, 0]])
    comp = torch.tensor([[3, 9, 5], [1, 7, 7]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    assert teacher_agreement(ids, comp, mask) == pytest.approx(3 / 5)  # matches at (0,0), (0,2), (1,0)
    assert teacher_agreement(ids, comp, torch.zeros(2, 3)) == 0.0
