"""Advantage shapers (EDAS, negative-advantage veto); every expectation worked by hand in a comment."""

import math

import pytest
import torch

from reasonrl.advantages import dr_grpo, edas, grpo, negative_veto_mask
from reasonrl.losses import policy_loss

D = torch.float64


def t(rows):
    return torch.tensor(rows, dtype=D)


SPEC_ANSWERS = [["42", "7", "7", "7", "9"]]
SPEC_CORRECT = torch.tensor([[1, 0, 0, 0, 0]])


# --- EDAS (spec section 3) ---------------------------------------------------------------------


def test_edas_spec_vector_dr_grpo_base_keeps_negative_mass():
    # r = [1,0,0,0,0] -> Dr. GRPO A = [0.8, -0.2 x4]; wrong clusters: '7' x3, '9' x1
    # mean n over W = (3+3+3+1)/4 = 2.5 -> lambda_7 = 3/2.5 = 1.2, lambda_9 = 1/2.5 = 0.4
    # A' = [0.8, -0.24, -0.24, -0.24, -0.08]; negative sum -0.72 - 0.08 = -0.8 = 4 x -0.2
    adv = dr_grpo(t([[1, 0, 0, 0, 0]]))
    shaped, m = edas(adv, SPEC_ANSWERS, SPEC_CORRECT)
    assert torch.allclose(shaped, t([[0.8, -0.24, -0.24, -0.24, -0.08]]), atol=1e-12)
    assert shaped[shaped < 0].sum().item() == pytest.approx(adv[adv < 0].sum().item(), abs=1e-12)
    assert shaped[0, 0] == adv[0, 0]  # the correct rollout is untouched
    # diversity: 2 distinct wrong answers / 4 wrong = 0.5; the largest lambda applied is 1.2
    assert m == {"edas/diversity": 0.5, "edas/lambda_max": pytest.approx(1.2), "edas/frac_groups_shaped": 1.0}


def test_edas_spec_vector_grpo_base():
    # GRPO (unbiased): mean 0.2, std sqrt(0.8/4) = 0.4472136 -> A = [1.78885, -0.44721 x4]
    # x1.2 -> -0.53666, x0.4 -> -0.17889
    shaped, _ = edas(grpo(t([[1, 0, 0, 0, 0]])), SPEC_ANSWERS, SPEC_CORRECT)
    assert torch.allclose(shaped, t([[1.78885, -0.53666, -0.53666, -0.53666, -0.17889]]), atol=1e-5)


def test_edas_gamma_zero_is_exactly_the_identity():
    g = torch.Generator().manual_seed(0)
    adv = torch.randn(3, 5, generator=g, dtype=D)
    answers = [["1", "1", None, "2", None]] * 3
    correct = torch.tensor([[0, 0, 0, 1, 0]] * 3)
    shaped, m = edas(adv, answers, correct, gamma=0.0, lambda_min=2.0)  # the clip must not matter
    assert torch.equal(shaped, adv)
    assert m["edas/frac_groups_shaped"] == 0.0 and m["edas/lambda_max"] == 1.0


def test_edas_gamma_two_by_hand_keeps_mass():
    # n^2 = [9, 9, 9, 1], mean 28/4 = 7 -> lambda_7 = 9/7 = 1.2857143, lambda_9 = 1/7 = 0.1428571
    # A' = [0.8, -0.2571429 x3, -0.0285714]; negative sum -0.7714286 - 0.0285714 = -0.8
    shaped, m = edas(dr_grpo(t([[1, 0, 0, 0, 0]])), SPEC_ANSWERS, SPEC_CORRECT, gamma=2.0)
    assert torch.allclose(shaped, t([[0.8, -1.8 / 7, -1.8 / 7, -1.8 / 7, -0.2 / 7]]), atol=1e-12)
    assert shaped[0, 1:].sum().item() == pytest.approx(-0.8, abs=1e-12)
    assert m["edas/lambda_max"] == pytest.approx(9 / 7)


def test_edas_none_policy_cluster_vs_singleton():
    # answers ['42', None, None, None, '7'], only the first correct, Dr. GRPO A = [0.8, -0.2 x4]
    # cluster: n = [3, 3, 3, 1] as in the spec vector -> [-0.24 x3, -0.08]; diversity 2/4
    # singleton: n = [1, 1, 1, 1] -> every lambda = 1 -> unchanged; diversity 4/4
    adv = dr_grpo(t([[1, 0, 0, 0, 0]]))
    answers = [["42", None, None, None, "7"]]
    shaped, m = edas(adv, answers, SPEC_CORRECT, none_policy="cluster")
    assert torch.allclose(shaped, t([[0.8, -0.24, -0.24, -0.24, -0.08]]), atol=1e-12)
    assert m["edas/diversity"] == 0.5
    shaped, m = edas(adv, answers, SPEC_CORRECT, none_policy="singleton")
    assert torch.equal(shaped, adv)
    assert m == {"edas/diversity": 1.0, "edas/lambda_max": 1.0, "edas/frac_groups_shaped": 0.0}


def test_edas_touches_only_wrong_rollouts_with_negative_advantage():
    # hand-made A = [-1.0, 0.5, -0.2, -0.2]; correct = [1, 0, 0, 0]; answers ['x', 'a', 'a', 'b']
    # W = {1, 2, 3}: n = [2, 2, 1], mean 5/3 -> lambda_a = 1.2, lambda_b = 0.6
    # rollout 0 is correct (its -1.0 stays), rollout 1 has A >= 0 (stays), 2 -> -0.24, 3 -> -0.12
    shaped, m = edas(t([[-1.0, 0.5, -0.2, -0.2]]), [["x", "a", "a", "b"]], torch.tensor([[1, 0, 0, 0]]))
    assert torch.allclose(shaped, t([[-1.0, 0.5, -0.24, -0.12]]), atol=1e-12)
    assert m["edas/lambda_max"] == pytest.approx(1.2)  # rollout 1's 1.2 is not applied, 2's is


def test_edas_lambda_clip():
    # lambda_7 = 1.2 -> capped at 1.1; lambda_9 = 0.4 -> raised to 0.5
    # A' = [0.8, -0.22 x3, -0.1] (the clip breaks the mass conservation: -0.76 != -0.8)
    shaped, m = edas(dr_grpo(t([[1, 0, 0, 0, 0]])), SPEC_ANSWERS, SPEC_CORRECT, lambda_min=0.5, lambda_max=1.1)
    assert torch.allclose(shaped, t([[0.8, -0.22, -0.22, -0.22, -0.1]]), atol=1e-12)
    assert m["edas/lambda_max"] == pytest.approx(1.1)


def test_edas_batch_metrics_and_all_wrong_group():
    # group 0: the spec group (diversity 0.5, shaped). group 1: all correct, W empty (no diversity,
    # unchanged). group 2: all wrong with answers [3, 3, 4, 5, 5] -> GRPO A = 0, nothing to shape;
    # diversity 3/5 = 0.6. diversity mean over groups with W: (0.5 + 0.6)/2 = 0.55; shaped 1 of 3
    r = t([[1, 0, 0, 0, 0], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0]])
    answers = SPEC_ANSWERS + [["42"] * 5, ["3", "3", "4", "5", "5"]]
    correct = r.bool()
    adv = grpo(r)
    shaped, m = edas(adv, answers, correct)
    assert torch.equal(shaped[1:], adv[1:]) and torch.equal(shaped[2], torch.zeros(5, dtype=D))
    assert m["edas/diversity"] == pytest.approx(0.55)
    assert m["edas/frac_groups_shaped"] == pytest.approx(1 / 3)


def test_edas_per_token_advantages():
    # (B, G, T) = (1, 5, 2): every token of rollout i gets lambda_i where its value is < 0
    adv = dr_grpo(t([[1, 0, 0, 0, 0]])).unsqueeze(-1).expand(1, 5, 2).clone()
    adv[0, 4, 1] = 0.3  # a positive token of a wrong rollout stays
    shaped, _ = edas(adv, SPEC_ANSWERS, SPEC_CORRECT)
    assert torch.allclose(shaped[0, :, 0], t([0.8, -0.24, -0.24, -0.24, -0.08]), atol=1e-12)
    assert shaped[0, 4, 1].item() == 0.3 and shaped[0, 1, 1].item() == pytest.approx(-0.24)


def test_edas_invalid_arguments():
    adv = torch.zeros(1, 5)
    with pytest.raises(ValueError, match="answers"):
        edas(adv, [["1"] * 4], SPEC_CORRECT)
    with pytest.raises(ValueError, match="correct"):
        edas(adv, SPEC_ANSWERS, torch.zeros(1, 4))
    with pytest.raises(ValueError, match="gamma"):
        edas(adv, SPEC_ANSWERS, SPEC_CORRECT, gamma=-1.0)
    with pytest.raises(ValueError, match="cluster, singleton"):
        edas(adv, SPEC_ANSWERS, SPEC_CORRECT, none_policy="drop")
    with pytest.raises(ValueError, match="lambda_min"):
        edas(adv, SPEC_ANSWERS, SPEC_CORRECT, lambda_min=2.0, lambda_max=1.0)


# --- negative-advantage veto (spec section 2) --------------------------------------------------

RHO = t([[1.1, 0.9, 2.5, 1.0, 0.8]])
ONES = torch.ones(1, 5, dtype=D)


def test_veto_spec_vectors():
    # band [0.5, 2.0]: 2.5 at index 2 is the first token outside -> [1, 1, 0, 0, 0]
    veto, m = negative_veto_mask(RHO, t([-0.5]), ONES)
    assert torch.equal(veto, t([[1, 1, 0, 0, 0]]))
    assert m == {"veto/frac_tokens": 0.6, "veto/frac_rows": 1.0}
    # the same ratios with A = +1: never vetoed
    veto, m = negative_veto_mask(RHO, t([1.0]), ONES)
    assert torch.equal(veto, ONES) and m == {"veto/frac_tokens": 0.0, "veto/frac_rows": 0.0}
    # low trigger: 0.4 < 0.5 at index 1 -> [1, 0, 0]
    veto, _ = negative_veto_mask(t([[1.1, 0.4, 1.0]]), t([-1.0]), torch.ones(1, 3))
    assert torch.equal(veto, t([[1, 0, 0]]))
    # include_trigger=False keeps the trigger token: [1, 1, 1, 0, 0]
    veto, _ = negative_veto_mask(RHO, t([-0.5]), ONES, include_trigger=False)
    assert torch.equal(veto, t([[1, 1, 1, 0, 0]]))


def test_veto_alternative_triggers():
    # ratio_high tau_hi=1.5: first rho > 1.5 is 2.5 at index 2 -> [1,1,0,0,0]
    # ratio_low tau_lo=0.85: 0.9 is not < 0.85; first is 0.8 at index 4 -> [1,1,1,1,0]
    veto, _ = negative_veto_mask(RHO, t([-1.0]), ONES, trigger="ratio_high", tau_hi=1.5)
    assert torch.equal(veto, t([[1, 1, 0, 0, 0]]))
    veto, _ = negative_veto_mask(RHO, t([-1.0]), ONES, trigger="ratio_low", tau_lo=0.85)
    assert torch.equal(veto, t([[1, 1, 1, 1, 0]]))
    # out_of_band with a custom band [0.85, 1.05]: 1.1 at index 0 already -> all vetoed
    veto, _ = negative_veto_mask(RHO, t([-1.0]), ONES, clip_low=0.15, clip_high=0.05)
    assert torch.equal(veto, torch.zeros(1, 5, dtype=D))


def test_veto_prefix_logratio():
    # rho = [2, 2, 0.25, 1]: prefix log-ratio = [0.693, 1.386, 0, 0]
    # tau_cum = 1.0 -> first |.| > 1 at index 1 -> [1, 0, 0, 0]; tau_cum = 1.5 -> never -> ones
    rho = t([[2.0, 2.0, 0.25, 1.0]])
    veto, _ = negative_veto_mask(rho, t([-1.0]), torch.ones(1, 4), trigger="prefix_logratio", tau_cum=1.0)
    assert torch.equal(veto, t([[1, 0, 0, 0]]))
    veto, _ = negative_veto_mask(rho, t([-1.0]), torch.ones(1, 4), trigger="prefix_logratio", tau_cum=1.5)
    assert torch.equal(veto, torch.ones(1, 4, dtype=D))
    # a masked-out token does not enter the prefix: mask [1, 0, 1, 1] -> prefix [0.693, 0.693, -0.693, -0.693]
    veto, _ = negative_veto_mask(rho, t([-1.0]), t([[1, 0, 1, 1]]), trigger="prefix_logratio", tau_cum=1.0)
    assert torch.equal(veto, torch.ones(1, 4, dtype=D))


def test_veto_only_masked_tokens_trigger_and_garbage_is_ignored():
    # index 1 (rho 5.0) and the padding (nan, inf) are masked out; the first trainable trigger is 0.3
    # at index 3 -> [1, 1, 1, 0, 0, 0]; 3 trainable tokens (0, 2, 3), one vetoed -> 1/3
    rho = t([[1.0, 5.0, 1.2, 0.3, float("nan"), float("inf")]])
    mask = t([[1, 0, 1, 1, 0, 0]])
    veto, m = negative_veto_mask(rho, t([-1.0]), mask)
    assert torch.equal(veto, t([[1, 1, 1, 0, 0, 0]]))
    assert m["veto/frac_tokens"] == pytest.approx(1 / 3)


def test_veto_per_token_advantages_use_the_first_trainable_token():
    # row 0: mask [0, 1, 1, 1], A = [+9, -1, -1, -1] -> first trainable value -1 -> negative;
    #   trigger 2.5 at index 2 -> [1, 1, 0, 0]
    # row 1: A = [-1, +1, +1, +1] with the same mask -> first trainable value +1 -> never vetoed
    rho = t([[1.0, 1.0, 2.5, 1.0], [1.0, 1.0, 2.5, 1.0]])
    mask = t([[0, 1, 1, 1], [0, 1, 1, 1]])
    adv = t([[9, -1, -1, -1], [-1, 1, 1, 1]])
    veto, m = negative_veto_mask(rho, adv, mask)
    assert torch.equal(veto, t([[1, 1, 0, 0], [1, 1, 1, 1]]))
    # 6 trainable tokens, 2 vetoed; 1 of 2 rows
    assert m == {"veto/frac_tokens": pytest.approx(2 / 6), "veto/frac_rows": 0.5}


def test_veto_masks_exactly_the_suffix_from_the_trigger():
    g = torch.Generator().manual_seed(3)
    rho = torch.exp(0.6 * torch.randn(64, 12, generator=g, dtype=D))
    adv = torch.randn(64, generator=g, dtype=D)
    mask = (torch.arange(12)[None, :] < torch.randint(1, 13, (64, 1), generator=g)).to(D)
    veto, m = negative_veto_mask(rho, adv, mask)
    positions = torch.arange(12)
    n_vetoed_rows = 0
    for i in range(64):
        hits = ((rho[i] < 0.5) | (rho[i] > 2.0)) & (mask[i] == 1)
        if adv[i] >= 0 or not hits.any():
            assert torch.equal(veto[i], torch.ones(12, dtype=D))
            continue
        n_vetoed_rows += 1
        t_star = int(hits.nonzero()[0])
        assert torch.equal(veto[i], (positions < t_star).to(D)), i
    assert 0 < n_vetoed_rows < 64  # the sample exercises both branches
    assert m["veto/frac_rows"] == pytest.approx(n_vetoed_rows / 64)
    assert m["veto/frac_tokens"] == pytest.approx(float(((1 - veto) * mask).sum() / mask.sum()))


def test_veto_as_policy_token_mask_drops_suffix_gradient_but_keeps_normaliser():
    # rho = [1.1, 2.5, 1.0], A = -1, relaxed band [0.5, 2.0] for the loss as well
    # veto = [1, 0, 0]; S = min(rho A, clip(rho, .5, 2) A) = [-1.1, -2.5, -1.0] -> masked [-1.1, 0, 0]
    # token-mean keeps n_tokens = 3: loss = 1.1/3; dL/dl = -A rho/3 on token 0 = 1.1/3, 0 elsewhere
    logp = t([[math.log(1.1), math.log(2.5), 0.0]]).requires_grad_()
    mask = torch.ones(1, 3, dtype=D)
    veto, _ = negative_veto_mask(logp.detach().exp(), t([-1.0]), mask)
    assert torch.equal(veto, t([[1, 0, 0]]))
    loss, _ = policy_loss(logp, torch.zeros_like(logp), t([-1.0]), mask, clip_low=0.5, clip_high=1.0, token_mask=veto)
    loss.backward()
    assert loss.item() == pytest.approx(1.1 / 3)
    assert torch.allclose(logp.grad, t([[1.1 / 3, 0.0, 0.0]]), atol=1e-12)


def test_veto_invalid_arguments():
    with pytest.raises(ValueError, match="tau_hi"):
        negative_veto_mask(RHO, t([-1.0]), ONES, trigger="ratio_high")
    with pytest.raises(ValueError, match="tau_lo"):
        negative_veto_mask(RHO, t([-1.0]), ONES, trigger="ratio_low")
    with pytest.raises(ValueError, match="tau_cum"):
        negative_veto_mask(RHO, t([-1.0]), ONES, trigger="prefix_logratio")
    with pytest.raises(ValueError, match="out_of_band, ratio_high"):
        negative_veto_mask(RHO, t([-1.0]), ONES, trigger="kl")
    with pytest.raises(ValueError, match="advantages"):
        negative_veto_mask(RHO, t([-1.0, 1.0]), ONES)
    with pytest.raises(ValueError, match=r"\(N, T\)"):
        negative_veto_mask(RHO, t([-1.0]), torch.ones(1, 4))
    with pytest.raises(ValueError, match="clip_low"):
        negative_veto_mask(RHO, t([-1.0]), ONES, clip_low=1.0)
