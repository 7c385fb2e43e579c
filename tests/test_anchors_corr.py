"""SAGE shaped-anchor KL (spec section 6) and CorR-PO correlation bonus (spec section 5);
every expectation worked by hand in a comment."""

import math

import pytest
import torch
import torch.nn.functional as F

from reasonrl.losses import (
    branch_guide,
    corr_po_bonus,
    cyclic_cosine,
    hidden_grad_norm,
    inversion_score,
    kl_penalty,
    logit_grad_norm,
    pearson_per_row,
    random_guide,
    sage_guide,
    sage_kl_loss,
    shaped_kl,
    spearman_per_row,
    surprisal_weights,
    token_guide,
    token_stats,
)

D = torch.float64
L02 = math.log(0.2)


def t(rows):
    return torch.tensor(rows, dtype=D)


# --- SAGE guides ---------------------------------------------------------------------------------


def test_branch_guide_spec_values_and_padding():
    # H = 2.2 -> 1 + 0.3*(2.2-1.2) = 1.3; H = 0.5 -> relu(-0.7) = 0 -> 1; H = 5.0 -> 2.14 -> clamp 1.4
    # H = 0.1 -> 1 (the floor 0.6 only matters for ratio < 0); padding (H = 9) -> exactly 1
    q = branch_guide(t([[2.2, 0.5, 5.0, 0.1, 9.0]]), t([[1, 1, 1, 1, 0]]))
    assert torch.allclose(q, t([[1.3, 1.0, 1.4, 1.0, 1.0]]), atol=1e-12)
    assert q[0, 4].item() == 1.0
    # custom knobs: ratio 0.5, threshold 1 -> H = 2.2 gives 1.6 -> clamp at q_max 2.0? no: 1.6
    q = branch_guide(t([[2.2]]), t([[1]]), ratio=0.5, threshold=1.0, q_max=2.0)
    assert q.item() == pytest.approx(1.6)


def test_branch_guide_carries_no_gradient():
    ent = t([[2.2, 3.0]]).requires_grad_()
    assert not branch_guide(ent, t([[1, 1]])).requires_grad


def test_cyclic_cosine_by_hand():
    # max_steps 16, 8 cycles -> cycle length 2. step 0: upper (0.3, 0.25).
    # step 1: anneal 0.5(1 + cos(pi/2)) = 0.5 -> 0.1 + 0.2*0.5 = 0.2; 0.1 + 0.15*0.5 = 0.175
    # step 2: cycle 1, upper x 0.9 -> (0.27, 0.225)
    # step 15: cycle 7, upper 0.3*0.9^7 = 0.14348907, anneal 0.5 -> 0.1 + 0.04348907/2 = 0.12174454
    # step 16: the decay stops at the last cycle; anneal 1 again -> 0.14348907
    kw = dict(max_steps=16, upper=(0.3, 0.25), lower=(0.1, 0.1))
    assert cyclic_cosine(0, **kw) == pytest.approx((0.3, 0.25))
    assert cyclic_cosine(1, **kw) == pytest.approx((0.2, 0.175))
    assert cyclic_cosine(2, **kw) == pytest.approx((0.27, 0.225))
    assert cyclic_cosine(15, **kw)[0] == pytest.approx(0.12174454, abs=1e-8)
    assert cyclic_cosine(16, **kw)[0] == pytest.approx(0.3 * 0.9**7)
    with pytest.raises(ValueError, match="n_cycles"):
        cyclic_cosine(0, max_steps=16, upper=(1, 1), lower=(0, 0), n_cycles=0)


def test_surprisal_weights_by_hand():
    # surprisal s = -l = [1, 2, 3, 4, 5]; torch.quantile interpolates: q05 = 1 + 0.05*4 = 1.2,
    # q95 = 4.8 -> clipped [1.2, 2, 3, 4, 4.8] -> minmax (s - 1.2)/3.6 = [0, 2/9, 1/2, 7/9, 1]
    # rank: [0, 1, 2, 3, 4]/4; zscore: sigmoid((s - 3)/sqrt(2)) -> 1/(1 + e^1.4142136) = 1/5.1132504 = 0.1955703
    logp = t([[-1.0, -2.0, -3.0, -4.0, -5.0, 7.0]])
    mask = t([[1, 1, 1, 1, 1, 0]])
    assert torch.allclose(surprisal_weights(logp, mask), t([[0, 2 / 9, 0.5, 7 / 9, 1, 0]]), atol=1e-12)
    assert torch.allclose(surprisal_weights(logp, mask, "rank"), t([[0, 0.25, 0.5, 0.75, 1, 0]]), atol=1e-12)
    z = surprisal_weights(logp, mask, "zscore")
    assert z[0, 0].item() == pytest.approx(0.1955703, abs=1e-7) and z[0, 2].item() == pytest.approx(0.5)
    with pytest.raises(ValueError, match="minmax, rank, zscore"):
        surprisal_weights(logp, mask, "softmax")


def test_token_guide_by_hand_and_noise_vanishes_at_zero_weight():
    # sigma = 0: q = 1 + 0.3 w = [1, 1.0666667, 1.15, 1.2333333, 1.3]; padding 1
    logp = t([[-1.0, -2.0, -3.0, -4.0, -5.0, 7.0]])
    mask = t([[1, 1, 1, 1, 1, 0]])
    q = token_guide(logp, mask, alpha=0.3, sigma=0.0)
    assert torch.allclose(q, t([[1, 1 + 0.3 * 2 / 9, 1.15, 1 + 0.3 * 7 / 9, 1.3, 1]]), atol=1e-12)
    # sigma > 0: the noise is sigma*w*N(0,1), so the w = 0 token stays exactly 1; reproducible by seed
    q1 = token_guide(logp, mask, alpha=0.3, sigma=0.25, generator=torch.Generator().manual_seed(5))
    q2 = token_guide(logp, mask, alpha=0.3, sigma=0.25, generator=torch.Generator().manual_seed(5))
    assert torch.equal(q1, q2) and q1[0, 0].item() == 1.0 and q1[0, 5].item() == 1.0
    assert not torch.allclose(q1, q)
    assert bool(((q1 >= 0.6) & (q1 <= 1.4)).all())


def test_random_guide():
    mask = t([[1, 1, 1, 0]])
    # eps = 0: nothing perturbed -> all ones
    assert torch.equal(random_guide(mask, eps=0.0, sigma=0.15), torch.ones(1, 4))
    # eps = 1: every trainable token perturbed (a draw of exactly 1 has probability 0), padding 1
    q = random_guide(mask, eps=1.0, sigma=0.15, generator=torch.Generator().manual_seed(0))
    assert bool((q[0, :3] != 1).all()) and q[0, 3].item() == 1.0
    assert bool(((q >= 0.6) & (q <= 1.4)).all())


def test_sage_guide_dispatch_and_errors():
    logp, mask = t([[-1.0, -2.0, -3.0]]), t([[1, 1, 1]])
    q = sage_guide("branch", logp, logp, t([[2.2, 0.0, 0.0]]), mask)
    assert torch.allclose(q, t([[1.3, 1, 1]]))
    # token guide at step 0 of 8: alpha 0.3; surprisal [1, 2, 3] -> minmax after the quantile clip
    # [1.1, 2, 2.9] -> w = [0, 0.5, 1]; noise drawn, so only check the zero-weight token
    q = sage_guide("token", logp, logp, None, mask, max_steps=8, generator=torch.Generator().manual_seed(0))
    assert q[0, 0].item() == 1.0 and q[0, 2].item() != 1.0
    with pytest.raises(ValueError, match="entropies"):
        sage_guide("branch", logp, logp, None, mask)
    with pytest.raises(ValueError, match="max_steps"):
        sage_guide("random", logp, logp, None, mask)
    with pytest.raises(ValueError, match="branch, token, random"):
        sage_guide("uniform", logp, logp, None, mask)
    with pytest.raises(ValueError, match="q_min"):
        branch_guide(t([[1.0]]), t([[1]]), q_min=1.5, q_max=1.4)


# --- SAGE loss ---------------------------------------------------------------------------------


def test_shaped_kl_spec_values():
    # pi = pi_ref = 0.2: q = 1.3 -> u = ln 1.3 -> KL = 1.3 - ln 1.3 - 1 = 0.0376357; q = 1 -> 0
    logp = t([[L02, L02]])
    kl = shaped_kl(logp, logp, t([[1.3, 1.0]]))
    assert kl[0, 0].item() == pytest.approx(1.3 - math.log(1.3) - 1) == pytest.approx(0.037636, abs=1e-6)
    assert kl[0, 1].item() == 0.0
    # q = 1 is exactly the plain k3 KL
    other = t([[-1.0, -0.3]])
    assert torch.allclose(shaped_kl(other, logp, torch.ones(1, 2, dtype=D)), kl_penalty(other, logp), atol=1e-15)


def test_sage_gradient_is_zero_at_the_shaped_anchor():
    # dKL/dl = 1 - q pi_ref / pi. pi_ref = 0.2, H = 2.2 -> q = 1.3:
    # pi = 0.2 -> 1 - 1.3 = -0.3 (push pi up); pi = 0.26 = q pi_ref -> 0 and KL = 0
    ref = t([[L02, L02]])
    logp = t([[L02, math.log(0.26)]]).requires_grad_()
    q = branch_guide(t([[2.2, 2.2]]), t([[1, 1]]))
    kl = shaped_kl(logp, ref, q)
    kl.sum().backward()
    assert torch.allclose(logp.grad, t([[-0.3, 0.0]]), atol=1e-12)
    assert kl[0, 1].item() == pytest.approx(0.0, abs=1e-15)
    # autograd agrees with the closed form at an arbitrary point: pi = 0.5 -> 1 - 1.3*0.2/0.5 = 0.48
    x = t([[math.log(0.5)]]).requires_grad_()
    shaped_kl(x, t([[L02]]), t([[1.3]])).sum().backward()
    assert x.grad.item() == pytest.approx(0.48)


def test_sage_kl_loss_by_hand():
    # two rows, pi = pi_ref = 0.2 everywhere. row 0: H = [2.2, 0.5] -> q [1.3, 1] -> KL [0.0376357, 0]
    # row 1: H = [5.0, pad] -> q [1.4, 1] -> KL [1.4 - ln 1.4 - 1 = 0.0635275, -]
    # seq-mean-token-mean: (0.0376357/2 + 0.0635275)/2 = 0.0411727; coef 0.05 -> 0.0020586
    # token-mean: (0.0376357 + 0.0635275)/3 = 0.0337211
    # gradient (token-mean, coef 1): (1 - q)/3 = [-0.1, 0], [-0.1333333, 0]
    k13, k14 = 1.3 - math.log(1.3) - 1, 1.4 - math.log(1.4) - 1
    logp = torch.full((2, 2), L02, dtype=D).requires_grad_()
    ent, mask = t([[2.2, 0.5], [5.0, 9.0]]), t([[1, 1], [1, 0]])
    loss, m = sage_kl_loss(logp, logp.detach(), ent, mask, coef=0.05)
    assert loss.item() == pytest.approx(0.05 * (k13 / 2 + k14) / 2) == pytest.approx(0.0020586, abs=1e-7)
    assert m["loss/kl"] == pytest.approx((k13 + k14) / 3) and m["loss/kl_term"] == loss.item()
    assert m["sage/q_mean"] == pytest.approx((1.3 + 1 + 1.4) / 3)
    assert (m["sage/q_min"], m["sage/q_max"]) == (pytest.approx(1.0), pytest.approx(1.4))
    assert m["sage/frac_shaped"] == pytest.approx(2 / 3)
    loss, _ = sage_kl_loss(logp, logp.detach(), ent, mask, coef=1.0, agg="token-mean")
    loss.backward()
    assert loss.item() == pytest.approx((k13 + k14) / 3)
    assert torch.allclose(logp.grad, t([[-0.1, 0.0], [-0.4 / 3, 0.0]]), atol=1e-12)


def test_sage_kl_loss_without_shaping_is_the_plain_kl_and_ignores_garbage():
    # H below the threshold everywhere -> q = 1 -> zero loss at pi = pi_ref; padding holds -inf/nan
    logp = t([[L02, float("-inf")], [float("nan"), float("nan")]]).requires_grad_()
    ref = t([[L02, float("nan")], [float("-inf"), 0.0]])
    loss, m = sage_kl_loss(logp, ref, t([[0.1, 0.1], [0.1, 0.1]]), t([[1, 0], [0, 0]]), coef=0.05)
    (g,) = torch.autograd.grad(loss, logp)
    assert loss.item() == 0.0 and torch.isfinite(g).all() and all(math.isfinite(v) for v in m.values())
    # a precomputed q is used as given (q = 1.3 on the real token), garbage still ignored
    loss, m = sage_kl_loss(
        logp, ref, None, t([[1, 0], [0, 0]]), coef=1.0, q=t([[1.3, 5.0], [5.0, 5.0]]), agg="token-mean"
    )
    assert loss.item() == pytest.approx(1.3 - math.log(1.3) - 1) and m["sage/q_max"] == pytest.approx(1.3)


def test_sage_kl_loss_micro_batches_and_errors():
    g = torch.Generator().manual_seed(2)
    logp = (-torch.rand(4, 5, generator=g, dtype=D) - 0.5).requires_grad_()
    ref = logp.detach() + 0.2 * torch.randn(4, 5, generator=g, dtype=D)
    ent = 3 * torch.rand(4, 5, generator=g, dtype=D)
    mask = (torch.arange(5)[None, :] < torch.tensor([5, 3, 1, 4])[:, None]).to(D)
    full = sage_kl_loss(logp, ref, ent, mask, coef=0.05)[0]
    micro = sum(
        sage_kl_loss(logp[i : i + 1], ref[i : i + 1], ent[i : i + 1], mask[i : i + 1], coef=0.05, n_seqs=4)[0]
        for i in range(4)
    )
    assert micro.item() == pytest.approx(full.item(), abs=1e-12) and full.item() > 0
    with pytest.raises(ValueError, match="unknown SAGE guide options"):
        sage_kl_loss(logp, ref, ent, mask, coef=0.05, ratioo=0.3)
    with pytest.raises(ValueError, match="entropy"):
        sage_kl_loss(logp, ref, ent[:, :2], mask, coef=0.05)
    with pytest.raises(ValueError, match="valid values"):
        sage_kl_loss(logp, ref, ent, mask, coef=0.05, agg="sum")


# --- CorR-PO -----------------------------------------------------------------------------------

SPEC_P = [[0.5, 0.5], [0.9, 0.1], [0.99, 0.01]]
SPEC_Y = [[0, 0, 1]]


def spec_stats():
    return token_stats(torch.log(t([SPEC_P])), torch.tensor(SPEC_Y))


def test_token_stats_and_logit_grad_norm_spec_values():
    # H: ln 2 = 0.693147; -(.9 ln .9 + .1 ln .1) = 0.325083; -(.99 ln .99 + .01 ln .01) = 0.056002
    # g = sqrt(1 - 2 p_y + sum p^2): sqrt(1 - 1 + .5) = 0.707107; sqrt(1 - 1.8 + .82) = 0.141421;
    #     sqrt(1 - .02 + .9802) = 1.400071
    ent, p_y, sum_p2 = spec_stats()
    assert torch.allclose(ent, t([[0.693147, 0.325083, 0.056002]]), atol=1e-6)
    assert torch.allclose(p_y, t([[0.5, 0.9, 0.01]]), atol=1e-12)
    assert torch.allclose(sum_p2, t([[0.5, 0.82, 0.9802]]), atol=1e-12)
    assert torch.allclose(logit_grad_norm(p_y, sum_p2), t([[0.707107, 0.141421, 1.400071]]), atol=1e-6)


def test_corr_po_spec_correlation_and_reward():
    # Pearson(H, g) = -0.472797; r' = r + bonus = 1 - 0.1 * (-0.472797) = 1.047280
    ent, p_y, sum_p2 = spec_stats()
    c, bonus, m = corr_po_bonus(ent, logit_grad_norm(p_y, sum_p2), torch.ones(1, 3))
    assert c.item() == pytest.approx(-0.472797, abs=1e-6)
    assert 1.0 + bonus.item() == pytest.approx(1.047280, abs=1e-6)
    assert m["corr/mean"] == pytest.approx(-0.472797, abs=1e-6)
    assert (m["corr/frac_defined"], m["corr/frac_negative"]) == (1.0, 1.0)
    # the other sign convention flips the bonus
    _, bonus_align, _ = corr_po_bonus(ent, logit_grad_norm(p_y, sum_p2), torch.ones(1, 3), sign="alignment")
    assert bonus_align.item() == pytest.approx(-bonus.item())


def test_logit_grad_norm_matches_autograd():
    # ||d log softmax(z)_y / dz|| computed by autograd equals sqrt(1 - 2 p_y + sum p^2)
    g = torch.Generator().manual_seed(0)
    z = torch.randn(3, 4, 7, generator=g, dtype=D)
    y = torch.randint(0, 7, (3, 4), generator=g)
    ent, p_y, sum_p2 = token_stats(z, y)
    closed = logit_grad_norm(p_y, sum_p2)
    zz = z.clone().requires_grad_()
    F.log_softmax(zz, -1).gather(-1, y.unsqueeze(-1)).sum().backward()  # tokens are independent
    assert torch.allclose(zz.grad.norm(dim=-1), closed, atol=1e-12)
    assert torch.allclose(ent, -(F.softmax(z, -1) * F.log_softmax(z, -1)).sum(-1), atol=1e-12)


def test_hidden_grad_norm_matches_autograd():
    # logits z = W h with W (V=6, d=4): d log p_y / d h = W^T (e_y - p)
    g = torch.Generator().manual_seed(1)
    w = torch.randn(6, 4, generator=g, dtype=D)
    h = torch.randn(2, 3, 4, generator=g, dtype=D).requires_grad_()
    y = torch.randint(0, 6, (2, 3), generator=g)
    z = h @ w.T  # (2, 3, 6)
    F.log_softmax(z, -1).gather(-1, y.unsqueeze(-1)).sum().backward()
    assert torch.allclose(hidden_grad_norm(z.detach(), y, w), h.grad.norm(dim=-1), atol=1e-12)
    with pytest.raises(ValueError, match="unembed"):
        hidden_grad_norm(z.detach(), y, w.T)


def test_pearson_by_hand_and_degenerate_rows():
    # x = [1, 2, 3], y = [2, 4, 7]: dx = [-1, 0, 1], dy = [-7/3, -1/3, 8/3]; cov 5, var_x 2,
    # var_y 114/9 -> c = 5 / sqrt(2 * 114/9) = 0.9933993
    # row 1: constant x -> 0; row 2: only 2 real tokens -> 0; padding garbage (nan) ignored
    x = t([[1, 2, 3, float("nan")], [0.5, 0.5, 0.5, 0.5], [1, 2, 9, 9]])
    y = t([[2, 4, 7, float("inf")], [1, 2, 3, 4], [3, 1, 9, 9]])
    mask = t([[1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 0, 0]])
    c = pearson_per_row(x, y, mask)
    assert torch.allclose(c, t([5 / math.sqrt(2 * 114 / 9), 0.0, 0.0]), atol=1e-12)
    assert c[0].item() == pytest.approx(0.9933993, abs=1e-7)
    # with min_tokens = 2 the 2-token row is defined: [1, 2] vs [3, 1] -> -1
    assert pearson_per_row(x, y, mask, min_tokens=2)[2].item() == pytest.approx(-1.0)


def test_spearman_by_hand_with_ties():
    # spec tokens: H ranks [2, 1, 0], g ranks [1, 0, 2] -> dx [1, 0, -1], dy [0, -1, 1] -> -1/2
    ent, p_y, sum_p2 = spec_stats()
    grad = logit_grad_norm(p_y, sum_p2)
    assert inversion_score(ent, grad, torch.ones(1, 3), method="spearman").item() == pytest.approx(-0.5)
    # ties: x = [1, 1, 2, 3] -> ranks [0.5, 0.5, 2, 3]; y ranks [0, 1, 2, 3]
    # dx = [-1, -1, .5, 1.5], dy = [-1.5, -.5, .5, 1.5]: cov 4.5, var 4.5 and 5 -> 4.5/sqrt(22.5) = 0.9486833
    c = spearman_per_row(t([[1, 1, 2, 3]]), t([[1, 2, 3, 4]]), torch.ones(1, 4))
    assert c.item() == pytest.approx(0.9486833, abs=1e-7)


def test_corr_po_constant_entropy_correct_only_and_no_gradient():
    # row 0: the spec tokens (c = -0.472797); row 1: constant entropy -> c = 0, bonus 0
    ent, p_y, sum_p2 = spec_stats()
    grad = logit_grad_norm(p_y, sum_p2)
    ent2 = torch.cat([ent, torch.full_like(ent, 0.3)]).requires_grad_()
    grad2 = torch.cat([grad, grad])
    c, bonus, m = corr_po_bonus(ent2, grad2, torch.ones(2, 3))
    assert c[1].item() == 0.0 and bonus[1].item() == 0.0
    assert not bonus.requires_grad  # a reward: nothing flows back through c
    assert (m["corr/frac_defined"], m["corr/mean"]) == (0.5, pytest.approx(-0.472797, abs=1e-6))
    # correct_only: row 0 wrong -> its bonus is dropped too
    _, bonus, _ = corr_po_bonus(ent2, grad2, torch.ones(2, 3), correct=torch.tensor([0, 1]), correct_only=True)
    assert torch.equal(bonus, torch.zeros(2, dtype=D))
    _, bonus, _ = corr_po_bonus(ent2, grad2, torch.ones(2, 3), correct=torch.tensor([1, 1]), correct_only=True)
    assert bonus[0].item() == pytest.approx(0.0472797, abs=1e-7)


def test_corr_po_errors():
    x = torch.ones(1, 3)
    with pytest.raises(ValueError, match="inversion, alignment"):
        corr_po_bonus(x, x, x, sign="negative")
    with pytest.raises(ValueError, match="pearson, spearman"):
        corr_po_bonus(x, x, x, method="kendall")
    with pytest.raises(ValueError, match="correct_only"):
        corr_po_bonus(x, x, x, correct_only=True)
    with pytest.raises(ValueError, match=r"\(N, T\)"):
        pearson_per_row(x, torch.ones(1, 4), x)
    with pytest.raises(ValueError, match="temperature"):
        token_stats(torch.zeros(1, 3, 2), torch.zeros(1, 3, dtype=torch.long), temperature=0.0)
