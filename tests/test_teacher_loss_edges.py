"""Edges of losses/teacher.py that test_teacher_losses.py leaves open: the global counts (norm_len,
n_tokens, n_seqs) reach the aggregation of TGPO-reg and KDRL, whole error messages, metric keys,
dtypes that follow the log-probs, and teacher_agreement's denominator. Numbers by hand."""

import math
import re

import pytest
import torch

from reasonrl.losses.teacher import (
    kdrl_loss,
    rkl_opd_advantages,
    teacher_agreement,
    tgpo_adv_advantages,
    tgpo_reg_loss,
)

# two rows, 3 + 1 real tokens
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])


def raises(msg: str):
    return pytest.raises(ValueError, match=f"^{re.escape(msg)}$")


def test_tgpo_reg_passes_norm_len_and_n_seqs():
    # l^T = log 0.5 everywhere: 4 real tokens of nll ln 2 each, sum 4 ln 2 = 2.772589
    lt = torch.full((2, 3), math.log(0.5))
    # Dr. GRPO: sum / (n_seqs * norm_len) = 4 ln 2 / (2 * 4) = ln 2 / 2 = 0.346574
    loss, _ = tgpo_reg_loss(lt, MASK, coef=1.0, agg="seq-mean-token-sum-norm", norm_len=4)
    assert float(loss) == pytest.approx(math.log(2) / 2)
    # seq-mean-token-sum over a global n_seqs = 4 (this micro-batch has 2): 4 ln 2 / 4 = ln 2
    loss, _ = tgpo_reg_loss(lt, MASK, coef=1.0, agg="seq-mean-token-sum", n_seqs=4)
    assert float(loss) == pytest.approx(math.log(2))
    with raises("tgpo_reg_loss: shapes differ (2, 2) vs (2, 3)"):
        tgpo_reg_loss(lt[:, :2], MASK, coef=1.0)


def test_kdrl_passes_every_count_and_reports_its_term():
    # logp - teacher = 1 on every token: k2 = 0.5 * 1^2 = 0.5, over 4 real tokens: sum 2.0
    logp, teacher = torch.zeros(2, 3), torch.full((2, 3), -1.0)
    loss, m = kdrl_loss(logp, teacher, MASK, coef=1.0, n_tokens=8)  # token-mean: 2 / 8 (local 2 / 4)
    assert float(loss) == pytest.approx(0.25)
    assert m["teacher/kdrl_term"] == pytest.approx(0.25) and m["teacher/kdrl_kl"] == pytest.approx(0.5)
    loss, _ = kdrl_loss(logp, teacher, MASK, coef=1.0, agg="seq-mean-token-sum", n_seqs=4)  # 2 / 4 (local 2 / 2)
    assert float(loss) == pytest.approx(0.5)
    loss, _ = kdrl_loss(logp, teacher, MASK, coef=1.0, agg="seq-mean-token-sum-norm", norm_len=4)  # 2 / (2 * 4)
    assert float(loss) == pytest.approx(0.25)


def test_token_advantages_take_the_log_probs_dtype():
    # float32 log-probs, float64 sequence advantages / mask: the advantages stay float32
    a64 = torch.tensor([1.5, -0.5], dtype=torch.float64)
    old = torch.log(torch.tensor([[0.5, 0.25], [1.0, 1.0]]))
    out = tgpo_adv_advantages(a64, old, MASK[:, :2], coef=0.02)  # [[1.5 + 0.01, 1.5 + 0.005], [-0.5 + 0.02, 0]]
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, torch.tensor([[1.51, 1.505], [-0.48, 0.0]]))
    teacher, old = torch.tensor([[-0.5, -3.0]]), torch.tensor([[-1.5, -1.0]])
    m64 = torch.ones(1, 2, dtype=torch.float64)
    adv = rkl_opd_advantages(teacher, old, m64)  # [1, -2]
    assert adv.dtype == torch.float32 and torch.equal(adv, torch.tensor([[1.0, -2.0]]))
    adv = rkl_opd_advantages(teacher, old, m64, seq_adv=torch.tensor([1.0], dtype=torch.float64), grpo_weight=1.0)
    assert adv.dtype == torch.float32 and torch.equal(adv, torch.tensor([[2.0, -1.0]]))  # + 1 * A = 1
    with raises("rkl_opd_advantages: grpo_weight != 0 needs the sequence advantages seq_adv"):
        rkl_opd_advantages(teacher, old, m64, grpo_weight=1.0)


def test_teacher_agreement_denominator_and_mask_dtype():
    # one real token, a match: 1 / 1 = 1
    assert teacher_agreement(torch.tensor([[3, 4]]), torch.tensor([[3, 9]]), torch.tensor([[1, 0]])) == 1.0
    # 3 matches of 5 real tokens: the same float for a bool, an int and a float64 mask
    ids, comp = torch.tensor([[3, 4, 5], [1, 2, 0]]), torch.tensor([[3, 9, 5], [1, 7, 7]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    values = {teacher_agreement(ids, comp, mask.to(d)) for d in (torch.bool, torch.long, torch.float64)}
    assert len(values) == 1 and values.pop() == pytest.approx(3 / 5)
