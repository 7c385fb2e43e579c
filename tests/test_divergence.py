"""Token divergences, numbers worked by hand (natural logs)."""

from __future__ import annotations

import math

import pytest
import torch

from reasonrl.losses import per_token_divergence, token_divergence


def logits(*probs: float) -> torch.Tensor:  # a distribution as (1, 1, V) logits
    return torch.tensor(probs).log()[None, None, :]


P_T, P_S = logits(0.8, 0.2), logits(0.5, 0.5)
ONE = torch.ones(1, 1)


@pytest.mark.parametrize(
    "kind,beta,expected",
    [
        # KL(T||S) = 0.8 ln(0.8/0.5) + 0.2 ln(0.2/0.5) = 0.8(0.470004) + 0.2(-0.916291) = 0.192745
        ("forward_kl", 0.5, 0.192745),
        # KL(S||T) = 0.5 ln(0.5/0.8) + 0.5 ln(0.5/0.2) = 0.5(-0.470004) + 0.5(0.916291) = 0.223144
        ("reverse_kl", 0.5, 0.223144),
        # beta 0.5: M = (0.65, 0.35); KL(T||M) = 0.8 ln(0.8/0.65) + 0.2 ln(0.2/0.35) = 0.166111 - 0.111923 = 0.054188;
        # KL(S||M) = 0.5 ln(0.5/0.65) + 0.5 ln(0.5/0.35) = -0.131182 + 0.178337 = 0.047155; mean: 0.050672
        ("jsd", 0.5, 0.050672),
        # beta 0.25: M = 0.25 T + 0.75 S = (0.575, 0.425); KL(T||M) = 0.264194 - 0.150754 = 0.113439;
        # KL(S||M) = -0.069881 + 0.081260 = 0.011379; 0.25 * 0.113439 + 0.75 * 0.011379 = 0.036894
        ("jsd", 0.25, 0.036894),
        ("jsd", 0.0, 0.192745),  # beta 0 is defined as forward KL (TRL's GKD convention)
        ("jsd", 1.0, 0.223144),  # beta 1 as reverse KL
    ],
)
def test_divergences_on_a_two_token_vocabulary(kind, beta, expected):
    loss, m = token_divergence(P_S, P_T, ONE, kind=kind, beta=beta)
    assert float(loss) == pytest.approx(expected, abs=1e-6) and m["distill/divergence"] == pytest.approx(
        expected, abs=1e-6
    )


def test_the_forward_kl_gradient_in_the_student_logits_is_p_s_minus_p_t():
    # d/dz_S KL(T || softmax(z_S)) = softmax(z_S) - p_T = (0.5 - 0.8, 0.5 - 0.2) = (-0.3, +0.3); at temperature 2
    # the same logits give p_S = (0.5, 0.5) still and p_T = softmax(ln(0.8, 0.2) / 2) = (2/3, 1/3), gradient
    # ((0.5 - 2/3) / 2, (0.5 - 1/3) / 2) = (-1/12, +1/12)
    student = P_S.clone().requires_grad_(True)
    teacher = P_T.clone().requires_grad_(True)
    token_divergence(student, teacher, ONE)[0].backward()
    assert torch.allclose(student.grad[0, 0], torch.tensor([-0.3, 0.3]), atol=1e-6)
    assert teacher.grad is None  # the teacher is a target: no gradient reaches it
    student.grad = None
    token_divergence(student, teacher, ONE, temperature=2.0)[0].backward()
    assert torch.allclose(student.grad[0, 0], torch.tensor([-1 / 12, 1 / 12]), atol=1e-6)


def test_top_k_restricts_both_distributions_to_the_teachers_top_tokens():
    # p_T = (0.5, 0.3, 0.2), p_S = (0.2, 0.2, 0.6), k = 2: support {0, 1}, renormalised p_T = (0.625, 0.375),
    # p_S = (0.5, 0.5); KL = 0.625 ln 1.25 + 0.375 ln 0.75 = 0.139465 - 0.107881 = 0.031584
    loss, _ = token_divergence(logits(0.2, 0.2, 0.6), logits(0.5, 0.3, 0.2), ONE, top_k=2)
    assert float(loss) == pytest.approx(0.031584, abs=1e-6)
    full, _ = token_divergence(logits(0.2, 0.2, 0.6), logits(0.5, 0.3, 0.2), ONE, top_k=3)  # k = V: untruncated
    # 0.5 ln 2.5 + 0.3 ln 1.5 + 0.2 ln(1/3) = 0.458145 + 0.121640 - 0.219722 = 0.360063
    assert float(full) == pytest.approx(0.360063, abs=1e-6)


def test_the_mask_and_the_clip():
    # two positions: (T, S) as above (0.192745) and identical distributions (0); the second is masked out
    s = torch.cat([P_S, P_T], 1)  # (1, 2, 2)
    t = torch.cat([P_T, P_T], 1)
    loss, m = token_divergence(s, t, torch.tensor([[1.0, 0.0]]))
    assert float(loss) == pytest.approx(0.192745, abs=1e-6) and m["distill/tokens"] == 1.0
    loss, m = token_divergence(s, t, torch.ones(1, 2))  # both: (0.192745 + 0) / 2
    assert float(loss) == pytest.approx(0.096372, abs=1e-6)
    s = s.clone().requires_grad_(True)
    loss, m = token_divergence(s, t, torch.ones(1, 2), clip=0.1)  # position 0 clipped to 0.1: (0.1 + 0) / 2
    assert float(loss.detach()) == pytest.approx(0.05, abs=1e-7) and m["distill/clip_frac"] == 0.5
    loss.backward()
    assert torch.all(s.grad[0, 0] == 0)  # a clipped token gives no gradient


def test_per_token_values_and_bad_arguments():
    d = per_token_divergence(torch.cat([P_S, P_T], 1), torch.cat([P_T, P_T], 1), kind="reverse_kl")
    assert d.shape == (1, 2) and float(d[0, 0]) == pytest.approx(0.223144, abs=1e-6) and abs(float(d[0, 1])) < 1e-7
    with pytest.raises(ValueError, match="unknown divergence 'kl'"):
        per_token_divergence(P_S, P_T, kind="kl")
    with pytest.raises(ValueError, match="differ in shape"):
        per_token_divergence(P_S, logits(0.5, 0.3, 0.2))
    with pytest.raises(ValueError, match="beta must be in"):
        per_token_divergence(P_S, P_T, kind="jsd", beta=1.5)
    assert math.isfinite(float(per_token_divergence(logits(1.0, 1e-30), P_T).sum()))  # near-zero probabilities
