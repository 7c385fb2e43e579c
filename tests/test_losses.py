"""Policy loss, aggregation, KL and entropy terms; every expectation worked by hand in a comment.

Convention in these tests: ``old_logp = 0`` and ``logp = log(rho)``, so the token ratio is rho,
and dS/dl = rho * A on the unclipped branch (d rho / d l = rho).
"""

import math

import pytest
import torch

from reasonrl.losses import (
    AGG_MODES,
    aggregate,
    entropy_bonus,
    kl_loss,
    kl_penalty,
    masked_mean,
    policy_loss,
)

D = torch.float64
LN2 = math.log(2.0)


def t(rows):
    return torch.tensor(rows, dtype=D)


def one_token(rho, adv, **kw):
    """Loss and dloss/dlogp for a single token with ratio rho and advantage adv (token-mean)."""
    logp = t([[math.log(rho)]]).requires_grad_()
    loss, metrics = policy_loss(logp, t([[0.0]]), t([adv]), t([[1.0]]), **kw)
    (grad,) = torch.autograd.grad(loss, logp)
    return loss.item(), grad.item(), metrics


# --- surrogate values and gradients (spec 1.1, 1.3) --------------------------------------------


@pytest.mark.parametrize(
    "rho, adv, lo, hi, objective, grad",
    [
        # min(1.3*1.5=1.95, 1.2*1.5=1.8) = 1.8: clipped branch, gradient 0
        (1.3, 1.5, 0.2, 0.2, 1.8, 0.0),
        # min(-0.65, 1.2*-0.5=-0.6) = -0.65: unclipped; dL/dl = -A*rho = 0.5*1.3 = 0.65
        (1.3, -0.5, 0.2, 0.2, -0.65, 0.65),
        # min(0.7*-0.5=-0.35, 0.8*-0.5=-0.4) = -0.4: clipped, gradient 0
        (0.7, -0.5, 0.2, 0.2, -0.4, 0.0),
        # clip-higher: 1.25 < 1.28 so min(1.25, 1.25) = 1.25 unclipped; dL/dl = -1*1.25
        (1.25, 1.0, 0.2, 0.28, 1.25, -1.25),
        # symmetric 0.2: min(1.25, 1.2) = 1.2 clipped, gradient 0
        (1.25, 1.0, 0.2, 0.2, 1.2, 0.0),
    ],
)
def test_surrogate_spec_values(rho, adv, lo, hi, objective, grad):
    loss, g, _ = one_token(rho, adv, clip_low=lo, clip_high=hi)
    assert loss == pytest.approx(-objective, abs=1e-12)
    assert g == pytest.approx(grad, abs=1e-12)


def test_dual_clip_by_hand():
    # A=-1, rho=5, c=3: PPO min(-5, -1.2) = -5, dual max(-5, -3) = -3 -> loss 3, gradient 0
    loss, g, m = one_token(5.0, -1.0, dual_clip=3.0)
    assert (loss, g) == (pytest.approx(3.0), 0.0)
    assert m["loss/clip_frac_dual"] == 1.0
    # rho=2: min(-2, -1.2) = -2, max(-2, -3) = -2 -> loss 2, dL/dl = -A*rho = 2
    loss, g, m = one_token(2.0, -1.0, dual_clip=3.0)
    assert (loss, g) == (pytest.approx(2.0), pytest.approx(2.0))
    assert m["loss/clip_frac_dual"] == 0.0
    # without dual-clip rho=5 is unbounded: loss 5, gradient 5
    loss, g, m = one_token(5.0, -1.0)
    assert (loss, g) == (pytest.approx(5.0), pytest.approx(5.0))
    assert m["loss/clip_frac_dual"] == 0.0
    # dual-clip never touches A > 0: rho=5, A=+1 -> clipped at 1.2 as usual
    assert one_token(5.0, 1.0, dual_clip=3.0)[0] == pytest.approx(-1.2)


def test_token_mean_gradient_by_hand():
    # rows: ratios [1.1, 0.9] A=+1 and [1.0, pad] A=-2; token-mean over 3 tokens
    # S = [1.1, 0.9], [-2.0]; nothing clipped -> loss = -(1.1 + 0.9 - 2)/3 = 0
    # dL/dl = -A*rho/3: [-1.1/3, -0.9/3], [2/3, 0]
    logp = t([[math.log(1.1), math.log(0.9)], [0.0, 0.0]]).requires_grad_()
    mask = t([[1, 1], [1, 0]])
    loss, _ = policy_loss(logp, torch.zeros_like(logp), t([1.0, -2.0]), mask)
    loss.backward()
    assert loss.item() == pytest.approx(0.0, abs=1e-12)
    assert torch.allclose(logp.grad, t([[-1.1 / 3, -0.9 / 3], [2 / 3, 0.0]]), atol=1e-12)


def test_per_token_advantages():
    # A = [[+1, -1]], rho = [1.1, 1.1]: S = [1.1, -1.1] (both inside [0.8, 1.2]) -> loss 0
    # dL/dl = -A*rho/2 = [-0.55, +0.55]
    logp = t([[math.log(1.1)] * 2]).requires_grad_()
    loss, _ = policy_loss(logp, torch.zeros_like(logp), t([[1.0, -1.0]]), t([[1, 1]]))
    loss.backward()
    assert loss.item() == pytest.approx(0.0, abs=1e-12)
    assert torch.allclose(logp.grad, t([[-0.55, 0.55]]), atol=1e-12)
    # a constant (N, T) advantage is the same as the (N,) one
    logp2 = t([[0.3, -0.2]])
    a, _ = policy_loss(logp2, torch.zeros_like(logp2), t([0.7]), t([[1, 1]]))
    b, _ = policy_loss(logp2, torch.zeros_like(logp2), t([[0.7, 0.7]]), t([[1, 1]]))
    assert a.item() == b.item()


def test_metrics_by_hand():
    # 5 real tokens. row 0 (A=+1): rho [1.5, 1.0, 0.5]; row 1 (A=-1): rho [0.5, 4.0, pad]
    # high: A>0 & rho>1.2 -> row0 tok0: 1/5; low: A<0 & rho<0.8 -> row1 tok0: 1/5;
    # dual (c=3): A<0 & rho>3 -> row1 tok1: 1/5
    # ratio_mean = (1.5+1+0.5+0.5+4)/5 = 1.5; ratio_max = 4 (the pad's e^10 is ignored)
    # S: row0 [min(1.5,1.2)=1.2, 1, min(0.5,0.8)=0.5]; row1 [min(-0.5,-0.8)=-0.8, max(min(-4,-1.2),-3)=-3]
    #   sum = 1.2+1+0.5-0.8-3 = -1.1 -> loss = 1.1/5 = 0.22
    # approx_kl: u = old - l = -ln rho, k3 = 1/rho + ln rho - 1:
    #   1.5: 0.0721318, 1: 0, 0.5: 0.3068528 (×2), 4: 0.6362944 -> sum 1.3221318 / 5 = 0.2644264
    logp = t([[math.log(1.5), 0.0, -LN2], [-LN2, math.log(4.0), 10.0]])
    mask = t([[1, 1, 1], [1, 1, 0]])
    loss, m = policy_loss(logp, torch.zeros_like(logp), t([1.0, -1.0]), mask, dual_clip=3.0)
    assert all(type(v) is float for v in m.values())
    assert m["loss/policy"] == pytest.approx(0.22) == loss.item()
    assert m["loss/clip_frac_high"] == pytest.approx(0.2)
    assert m["loss/clip_frac_low"] == pytest.approx(0.2)
    assert m["loss/clip_frac_dual"] == pytest.approx(0.2)
    assert m["loss/ratio_mean"] == pytest.approx(1.5)
    assert m["loss/ratio_max"] == pytest.approx(4.0)
    k3 = lambda r: 1 / r + math.log(r) - 1  # noqa: E731
    assert m["loss/approx_kl"] == pytest.approx((k3(1.5) + 2 * k3(0.5) + k3(4.0)) / 5)
    assert m["loss/approx_kl"] == pytest.approx(0.2644264, abs=1e-7)


# --- GSPO (spec 1.4) ---------------------------------------------------------------------------


def gspo(logp, adv, mask=None, **kw):
    mask = torch.ones_like(logp) if mask is None else mask
    kw.setdefault("agg", "seq-mean-token-mean")
    return policy_loss(logp, torch.zeros_like(logp), adv, mask, ratio="sequence", **kw)


def test_gspo_spec_values():
    # log-ratios [0.001, 0.003] -> mean 0.002 -> s = e^0.002 = 1.002002
    # A=+1, band [1-3e-4, 1+4e-4]: min(1.002002, 1.0004) = 1.0004 at both tokens -> loss -1.0004
    # A=-1: min(-1.002002, -1.0004) = -1.002002 -> loss 1.002002
    logp = t([[0.001, 0.003]])
    loss, m = gspo(logp, t([1.0]), clip_low=3e-4, clip_high=4e-4)
    assert loss.item() == pytest.approx(-1.0004, abs=1e-12)
    assert m["loss/ratio_mean"] == pytest.approx(math.exp(0.002)) == m["loss/ratio_max"]
    assert m["loss/clip_frac_high"] == 1.0
    loss, _ = gspo(logp, t([-1.0]), clip_low=3e-4, clip_high=4e-4)
    assert loss.item() == pytest.approx(math.exp(0.002), abs=1e-12)
    assert math.exp(0.002) == pytest.approx(1.002002, abs=1e-6)


def test_gspo_ratio_is_geometric_mean_and_gradient_flows_through_the_mean():
    # token ratios 2 and 0.5: s = exp((ln2 - ln2)/2) = sqrt(2*0.5) = 1; A=+1 -> S = 1 (unclipped)
    # L = -S per row (seq-mean-token-mean, one row) -> dL/dl_t = -A*s/|y| = -0.5 for both tokens,
    # even the token whose own ratio 2 would be clipped at token level
    logp = t([[LN2, -LN2]]).requires_grad_()
    loss, m = gspo(logp, t([1.0]))
    loss.backward()
    assert loss.item() == pytest.approx(-1.0)
    assert m["loss/ratio_mean"] == pytest.approx(1.0) and m["loss/ratio_max"] == pytest.approx(1.0)
    assert torch.allclose(logp.grad, t([[-0.5, -0.5]]), atol=1e-12)
    # token level, token-mean: tok0 min(2, 1.2) clipped -> 0; tok1 min(0.5, 0.8) = 0.5 -> -0.5/2
    logp.grad = None
    tok, _ = policy_loss(logp, torch.zeros_like(logp), t([1.0]), t([[1, 1]]))
    tok.backward()
    assert torch.allclose(logp.grad, t([[0.0, -0.25]]), atol=1e-12)


def test_gspo_sequence_clipping_zeroes_gradient_of_whole_row():
    # row 0: token ratios [2, 1] -> s = sqrt(2) = 1.414 > 1.2, A=+1 -> S = 1.2, no gradient at all,
    #   though token 1 alone (ratio 1) would get gradient at token level
    # row 1: ratios [1.1, pad] -> s = 1.1, A=+1, unclipped: dL/dl = -s/(N*|y|) = -1.1/2
    logp = t([[LN2, 0.0], [math.log(1.1), 5.0]]).requires_grad_()
    loss, m = gspo(logp, t([1.0, 1.0]), t([[1, 1], [1, 0]]))
    loss.backward()
    assert loss.item() == pytest.approx(-(1.2 + 1.1) / 2)
    assert torch.allclose(logp.grad, t([[0.0, 0.0], [-0.55, 0.0]]), atol=1e-12)
    # clip fraction is token-averaged: row 0's two tokens of 3 -> 2/3
    assert m["loss/clip_frac_high"] == pytest.approx(2 / 3)
    logp.grad = None
    tok, _ = policy_loss(logp, torch.zeros_like(logp), t([1.0, 1.0]), t([[1, 1], [1, 0]]))
    tok.backward()
    assert logp.grad[0, 1].item() != 0.0


def test_gspo_ignores_padding_in_the_mean():
    # [ln2, -ln2, pad=7] with mask [1,1,0]: s = 1, not exp(7/3)
    _, m = gspo(t([[LN2, -LN2, 7.0]]), t([1.0]), t([[1, 1, 0]]))
    assert m["loss/ratio_max"] == pytest.approx(1.0)


# --- aggregation (spec 0, 1.1-1.3) -------------------------------------------------------------

VALS = t([[1, 1, 0, 0], [0, 0, 0, 0]])
MASK = t([[1, 1, 0, 0], [1, 1, 1, 1]])


def test_aggregation_spec_values():
    # seq-mean-token-mean: (2/2 + 0/4)/2 = 0.5; token-mean: 2/6; token-sum: (2+0)/2 = 1
    # Dr. GRPO: (2+0)/(2 seqs * 4) = 0.25
    assert aggregate(VALS, MASK, "seq-mean-token-mean").item() == pytest.approx(0.5)
    assert aggregate(VALS, MASK, "token-mean").item() == pytest.approx(1 / 3)
    assert aggregate(VALS, MASK, "seq-mean-token-sum").item() == pytest.approx(1.0)
    assert aggregate(VALS, MASK, "seq-mean-token-sum-norm", norm_len=4).item() == pytest.approx(0.25)
    # doubling the first response to [1,1,1,1]: Dr. GRPO 4/8 = 0.5 (doubles), GRPO stays 0.5
    long_mask = t([[1, 1, 1, 1], [1, 1, 1, 1]])
    long_vals = t([[1, 1, 1, 1], [0, 0, 0, 0]])
    assert aggregate(long_vals, long_mask, "seq-mean-token-sum-norm", norm_len=4).item() == pytest.approx(0.5)
    assert aggregate(long_vals, long_mask, "seq-mean-token-mean").item() == pytest.approx(0.5)


def test_dr_grpo_policy_loss_spec_value():
    # rho = 1, A = [1, 0]: S = 1 on row 0's two tokens, 0 elsewhere -> L = -(2+0)/(2*4) = -0.25
    logp = torch.zeros(2, 4, dtype=D)
    loss, _ = policy_loss(logp, logp, t([1.0, 0.0]), MASK, agg="seq-mean-token-sum-norm", norm_len=4)
    assert loss.item() == pytest.approx(-0.25)


def test_aggregation_with_global_counts():
    # token-mean with n_tokens=12: 2/12; seq modes with n_seqs=8: 0.5*2/8, 2/8, 2/(8*4)
    assert aggregate(VALS, MASK, "token-mean", n_tokens=12).item() == pytest.approx(2 / 12)
    assert aggregate(VALS, MASK, "seq-mean-token-mean", n_seqs=8).item() == pytest.approx(1 / 8)
    assert aggregate(VALS, MASK, "seq-mean-token-sum", n_seqs=8).item() == pytest.approx(2 / 8)
    assert aggregate(VALS, MASK, "seq-mean-token-sum-norm", norm_len=4, n_seqs=8).item() == pytest.approx(2 / 32)
    assert aggregate(VALS, MASK, "token-mean", n_tokens=torch.tensor(12.0)).item() == pytest.approx(2 / 12)


def batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    n, length = 4, 5
    mask = (torch.arange(length)[None, :] < torch.tensor([5, 3, 1, 4])[:, None]).to(D)  # (4, 5)
    logp = (-torch.rand(n, length, generator=g, dtype=D)).requires_grad_()
    old = logp.detach() + 0.3 * torch.randn(n, length, generator=g, dtype=D)
    adv = torch.randn(n, generator=g, dtype=D)
    return logp, old, adv, mask


@pytest.mark.parametrize("agg", AGG_MODES)
@pytest.mark.parametrize("ratio", ["token", "sequence"])
def test_micro_batches_with_global_counts_sum_to_the_full_batch(agg, ratio):
    # 4 micro-batches of 1 row with the global n_tokens (13) and n_seqs (4) = 1 batch of 4
    logp, old, adv, mask = batch()
    kw = dict(ratio=ratio, agg=agg, norm_len=5, dual_clip=3.0)
    full, _ = policy_loss(logp, old, adv, mask, **kw)
    (g_full,) = torch.autograd.grad(full, logp)
    n_tokens, n_seqs = mask.sum(), 4
    micro = sum(
        policy_loss(
            logp[i : i + 1], old[i : i + 1], adv[i : i + 1], mask[i : i + 1], n_tokens=n_tokens, n_seqs=n_seqs, **kw
        )[0]
        for i in range(4)
    )
    (g_micro,) = torch.autograd.grad(micro, logp)
    assert micro.item() == pytest.approx(full.item(), abs=1e-6)
    assert torch.allclose(g_micro, g_full, atol=1e-6)
    assert g_full.abs().sum() > 0


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_micro_batches_without_global_counts_differ(agg):
    # the local defaults (n_tokens = own tokens, n_seqs = 1) over-weight each micro-batch:
    # this is the bug the global counts prevent, so the invariant test above can fail
    logp, old, adv, mask = batch()
    full = policy_loss(logp, old, adv, mask, agg=agg)[0].item()
    micro = sum(
        policy_loss(logp[i : i + 1], old[i : i + 1], adv[i : i + 1], mask[i : i + 1], agg=agg)[0].item()
        for i in range(4)
    )
    assert micro != pytest.approx(full, abs=1e-6)


def test_kl_and_entropy_micro_batch_invariance():
    logp, old, _, mask = batch(1)
    ent = old.exp()
    for agg in AGG_MODES:
        kw = dict(agg=agg, norm_len=5)
        full_kl = kl_loss(logp, old, mask, coef=0.1, **kw)[0]
        full_ent = entropy_bonus(ent, mask, coef=0.01, **kw)[0]
        g = dict(n_tokens=mask.sum(), n_seqs=4, **kw)
        micro_kl = sum(kl_loss(logp[i : i + 1], old[i : i + 1], mask[i : i + 1], coef=0.1, **g)[0] for i in range(4))
        micro_ent = sum(entropy_bonus(ent[i : i + 1], mask[i : i + 1], coef=0.01, **g)[0] for i in range(4))
        assert micro_kl.item() == pytest.approx(full_kl.item(), abs=1e-6)
        assert micro_ent.item() == pytest.approx(full_ent.item(), abs=1e-6)


# --- NaN safety --------------------------------------------------------------------------------


@pytest.mark.parametrize("agg", AGG_MODES)
def test_all_zero_mask_row_and_garbage_padding_give_no_nan(agg):
    # row 1 has no trainable token and holds nan/-inf garbage; row 0 alone decides the value
    logp = t([[-0.5, float("-inf")], [float("nan"), float("-inf")]]).requires_grad_()
    mask = t([[1, 0], [0, 0]])
    for ratio in ("token", "sequence"):
        loss, m = policy_loss(logp, torch.zeros(2, 2, dtype=D), t([1.0, 1.0]), mask, ratio=ratio, agg=agg, norm_len=2)
        (g,) = torch.autograd.grad(loss, logp)
        assert torch.isfinite(loss) and torch.isfinite(g).all(), (agg, ratio)
        assert all(math.isfinite(v) for v in m.values())
        assert g[1].abs().sum() == 0 and g[0, 1] == 0 and g[0, 0] != 0
    # the aggregate itself: seq-mean-token-mean of row 0 = 3, row 1 = 0 (not 0/0) -> 3/2
    vals = t([[3.0, float("nan")], [float("inf"), 1.0]])
    assert aggregate(vals, mask, "seq-mean-token-mean").item() == pytest.approx(1.5)


def test_empty_batch_gives_zero_loss_and_zero_metrics():
    logp = torch.zeros(2, 3, dtype=D, requires_grad=True)
    for agg in AGG_MODES:
        loss, m = policy_loss(logp, logp.detach(), t([1.0, -1.0]), torch.zeros(2, 3), agg=agg, norm_len=3)
        assert loss.item() == 0.0 and m["loss/ratio_max"] == 0.0 and m["loss/ratio_mean"] == 0.0


# --- KL and entropy ----------------------------------------------------------------------------


def test_kl_estimators_by_hand():
    # l_ref - l = ln 0.5 -> d = l - l_ref = ln 2 = 0.693147
    # k1 = 0.693147; k2 = 0.693147²/2 = 0.240227; k3 = 0.5 - ln 0.5 - 1 = 0.193147; at d=0 all 0
    logp, ref = t([[LN2, 0.3]]), t([[0.0, 0.3]])
    assert torch.allclose(kl_penalty(logp, ref, "k1"), t([[0.693147, 0.0]]), atol=1e-6)
    assert torch.allclose(kl_penalty(logp, ref, "k2"), t([[0.240227, 0.0]]), atol=1e-6)
    assert torch.allclose(kl_penalty(logp, ref), t([[0.193147, 0.0]]), atol=1e-6)
    assert kl_penalty(logp, ref, "k3")[0, 1].item() == 0.0


def test_k3_gradient_pulls_toward_reference():
    # d k3 / d l = 1 - exp(l_ref - l) = 1 - 0.5 = 0.5 (positive: lowering l lowers the KL)
    logp = t([[LN2]]).requires_grad_()
    ref = t([[0.0]]).requires_grad_()
    kl_penalty(logp, ref).sum().backward()
    assert logp.grad.item() == pytest.approx(0.5)
    assert ref.grad is None  # the reference is a constant target


def test_kl_loss_by_hand():
    # tokens d = [ln2, 0, pad]: k3 = [0.193147, 0]; token mean 0.0965736; coef 0.04 -> 0.00386294
    logp = t([[LN2, 0.0, 9.0]])
    loss, m = kl_loss(logp, torch.zeros_like(logp), t([[1, 1, 0]]), coef=0.04)
    assert m["loss/kl"] == pytest.approx(0.0965736, abs=1e-7)
    assert m["loss/kl_term"] == pytest.approx(0.00386294, abs=1e-8) == loss.item()
    # seq-mean-token-sum-norm with norm_len 4: 0.04 * 0.193147 / (1*4) = 0.00193147
    loss, _ = kl_loss(
        logp, torch.zeros_like(logp), t([[1, 1, 0]]), coef=0.04, agg="seq-mean-token-sum-norm", norm_len=4
    )
    assert loss.item() == pytest.approx(0.00193147, abs=1e-8)


def test_entropy_bonus_by_hand():
    # entropy [1, 2, pad] -> token mean 1.5; loss = -0.01*1.5 = -0.015; dloss/dH = -0.01/2 on real tokens
    ent = t([[1.0, 2.0, 9.0]]).requires_grad_()
    loss, m = entropy_bonus(ent, t([[1, 1, 0]]), coef=0.01)
    loss.backward()
    assert m == {"loss/entropy": pytest.approx(1.5), "loss/entropy_term": pytest.approx(-0.015)}
    assert torch.allclose(ent.grad, t([[-0.005, -0.005, 0.0]]))


def test_masked_mean():
    # (1 + 3) / 2; empty mask -> 0
    assert masked_mean(t([[1.0, 3.0, 100.0]]), t([[1, 1, 0]])).item() == 2.0
    assert masked_mean(t([[1.0]]), t([[0]])).item() == 0.0


# --- validation --------------------------------------------------------------------------------


def test_invalid_arguments():
    x, m, a = torch.zeros(2, 3), torch.ones(2, 3), torch.zeros(2)
    with pytest.raises(ValueError, match="token, sequence"):
        policy_loss(x, x, a, m, ratio="seq")
    with pytest.raises(ValueError, match="token-mean, seq-mean-token-mean"):
        policy_loss(x, x, a, m, agg="mean")
    with pytest.raises(ValueError, match="norm_len"):
        policy_loss(x, x, a, m, agg="seq-mean-token-sum-norm")
    with pytest.raises(ValueError, match="old_logp"):
        policy_loss(x, torch.zeros(2, 4), a, m)
    with pytest.raises(ValueError, match="mask"):
        policy_loss(x, x, a, torch.ones(3, 3))
    with pytest.raises(ValueError, match="advantages"):
        policy_loss(x, x, torch.zeros(3), m)
    with pytest.raises(ValueError, match="dual_clip"):
        policy_loss(x, x, a, m, dual_clip=1.0)
    with pytest.raises(ValueError, match="clip_low"):
        policy_loss(x, x, a, m, clip_low=1.0)
    with pytest.raises(ValueError, match=r"\(N, T\)"):
        aggregate(torch.zeros(3), torch.ones(3), "token-mean")
    with pytest.raises(ValueError, match="k1, k2, k3"):
        kl_penalty(x, x, "k4")
    with pytest.raises(ValueError, match="shape"):
        kl_penalty(x, torch.zeros(2, 4))
    with pytest.raises(ValueError, match="valid values"):
        entropy_bonus(x, m, coef=0.1, agg="sum")
