"""policy_loss extensions: GSPO-token ratio, CISPO trust region, extra token mask.

Same convention as tests/test_losses.py: ``old_logp = 0`` and ``logp = log(rho)``.
"""

import math

import pytest
import torch

from reasonrl.losses import AGG_MODES, RATIO_LEVELS, TRUST_REGIONS, policy_loss
from reasonrl.losses.policy import _log_ratio

D = torch.float64
LN2 = math.log(2.0)


def t(rows):
    return torch.tensor(rows, dtype=D)


def loss_and_grad(logp_rows, adv, mask=None, **kw):
    logp = t(logp_rows).requires_grad_()
    mask = torch.ones_like(logp) if mask is None else mask
    loss, m = policy_loss(logp, torch.zeros_like(logp), adv, mask, **kw)
    (g,) = torch.autograd.grad(loss, logp)
    return loss.item(), g, m


def test_registries():
    assert RATIO_LEVELS == ("token", "sequence", "sequence-token")
    assert TRUST_REGIONS == ("clip", "cispo")


# --- GSPO / GSPO-token (spec 1.4) --------------------------------------------------------------


def test_gspo_ratio_is_the_geometric_mean_of_token_ratios():
    # token ratios [2, 4, 0.5] -> geometric mean (2*4*0.5)^(1/3) = 4^(1/3) = 1.5874011
    # (the arithmetic mean would be 2.1666667); both sequence levels report it at every token
    logp = [[LN2, math.log(4.0), -LN2]]
    for level in ("sequence", "sequence-token"):
        _, _, m = loss_and_grad(logp, t([1.0]), ratio=level, clip_low=0.9, clip_high=9.0)
        assert m["loss/ratio_mean"] == pytest.approx(4 ** (1 / 3)) == m["loss/ratio_max"]
        assert m["loss/ratio_mean"] == pytest.approx(1.5874011, abs=1e-7)


def test_gspo_token_spec_value_equals_s_at_every_token():
    # spec vector: log-ratios [0.001, 0.003] -> s = e^0.002 = 1.002002 at both tokens
    # A=+1 with band [1-3e-4, 1+4e-4] -> clipped at 1.0004 like GSPO; A=-1 -> -1.002002
    logp = t([[0.001, 0.003]])
    mask = torch.ones(1, 2)
    log_s = _log_ratio(logp, torch.zeros_like(logp), mask, "sequence-token")
    assert torch.allclose(log_s, t([[0.002, 0.002]]), atol=1e-15)
    for adv, expected in ((1.0, -1.0004), (-1.0, math.exp(0.002))):
        loss, _ = policy_loss(
            logp,
            torch.zeros_like(logp),
            t([adv]),
            mask,
            ratio="sequence-token",
            clip_low=3e-4,
            clip_high=4e-4,
            agg="seq-mean-token-mean",
        )
        assert loss.item() == pytest.approx(expected, abs=1e-12)


def test_gspo_token_log_ratio_gradient_is_the_identity():
    # spec: d log s_{i,t} / d l_{i,t'} = 1 if t = t' else 0 (each token keeps its own gradient)
    # GSPO instead: d log s_i / d l_t' = 1/|y_i| for every token -> rows of 1/3
    logp = t([[0.3, -0.2, 0.1]])
    mask = torch.ones(1, 3)
    jac_tok = torch.autograd.functional.jacobian(
        lambda lp: _log_ratio(lp, torch.zeros_like(lp), mask, "sequence-token"), logp
    )  # (1,3,1,3)
    assert torch.allclose(jac_tok[0, :, 0, :], torch.eye(3, dtype=D), atol=1e-15)
    jac_seq = torch.autograd.functional.jacobian(
        lambda lp: _log_ratio(lp, torch.zeros_like(lp), mask, "sequence"), logp
    )
    assert torch.allclose(jac_seq[0, :, 0, :], torch.full((3, 3), 1 / 3, dtype=D), atol=1e-15)


@pytest.mark.parametrize("agg", AGG_MODES)
def test_gspo_token_equals_gspo_with_one_advantage_per_response(agg):
    # spec: with a constant advantage per response GSPO-token's value and gradient equal GSPO's
    g = torch.Generator().manual_seed(0)
    mask = (torch.arange(5)[None, :] < torch.tensor([5, 3, 1, 4])[:, None]).to(D)
    logp = (0.2 * torch.randn(4, 5, generator=g, dtype=D)).requires_grad_()
    adv = torch.randn(4, generator=g, dtype=D)
    kw = dict(agg=agg, norm_len=5, clip_low=0.1, clip_high=0.1)
    seq, _ = policy_loss(logp, torch.zeros_like(logp), adv, mask, ratio="sequence", **kw)
    tok, _ = policy_loss(logp, torch.zeros_like(logp), adv, mask, ratio="sequence-token", **kw)
    (g_seq,) = torch.autograd.grad(seq, logp)
    (g_tok,) = torch.autograd.grad(tok, logp)
    assert tok.item() == pytest.approx(seq.item(), abs=1e-12)
    assert torch.allclose(g_tok, g_seq, atol=1e-12)
    assert g_seq.abs().sum() > 0


def test_gspo_token_per_token_advantages_differ_from_gspo():
    # ratios [2, 0.5] -> s = 1 (unclipped); A = [+1, -1]; token-mean over 2 tokens
    # GSPO-token: S_t = s_t A_t with d s_t / d l_t = s = 1 -> dL/dl = -A_t s / 2 = [-0.5, +0.5]
    # GSPO: S = s A_t, d s / d l_t = s/2 for both -> dL/dl_k = -(1/2)(A_0 + A_1) s/2 = 0
    _, g_tok, _ = loss_and_grad([[LN2, -LN2]], t([[1.0, -1.0]]), ratio="sequence-token")
    _, g_seq, _ = loss_and_grad([[LN2, -LN2]], t([[1.0, -1.0]]), ratio="sequence")
    assert torch.allclose(g_tok, t([[-0.5, 0.5]]), atol=1e-12)
    assert torch.allclose(g_seq, t([[0.0, 0.0]]), atol=1e-12)


# --- CISPO -------------------------------------------------------------------------------------


def test_cispo_clipped_token_keeps_its_gradient_with_the_clip_bound_as_weight():
    # rho = 1.5 > 1.2, A = +1. PPO-clip: min(1.5, 1.2) = 1.2 -> gradient 0.
    # CISPO: S = sg[clip(1.5)] A l = 1.2 * ln 1.5 = 0.4865581 -> loss -0.4865581, dL/dl = -1.2
    loss, g, m = loss_and_grad([[math.log(1.5)]], t([1.0]), trust_region="cispo")
    assert loss == pytest.approx(-1.2 * math.log(1.5)) and loss == pytest.approx(-0.4865581, abs=1e-7)
    assert g.item() == pytest.approx(-1.2)
    assert m["loss/clip_frac_high"] == 1.0 and m["loss/clip_frac_low"] == 0.0
    _, g_ppo, _ = loss_and_grad([[math.log(1.5)]], t([1.0]))
    assert g_ppo.item() == 0.0
    # rho = 0.5 < 0.8, A = -1: PPO clipped (gradient 0); CISPO weight 0.8 -> dL/dl = -0.8*(-1) = 0.8
    _, g, m = loss_and_grad([[-LN2]], t([-1.0]), trust_region="cispo")
    assert g.item() == pytest.approx(0.8) and m["loss/clip_frac_low"] == 1.0
    assert loss_and_grad([[-LN2]], t([-1.0]))[1].item() == 0.0


def test_cispo_counts_clipping_whatever_the_sign_of_the_advantage():
    # rho = 1.5 with A = -1: PPO's min picks the unclipped branch (no clip counted); CISPO still
    # clips the weight to 1.2 -> clip_frac_high = 1 and dL/dl = -1.2*(-1) = 1.2 (PPO: -A rho = 1.5)
    _, g, m = loss_and_grad([[math.log(1.5)]], t([-1.0]), trust_region="cispo")
    assert m["loss/clip_frac_high"] == 1.0 and g.item() == pytest.approx(1.2)
    _, g_ppo, m_ppo = loss_and_grad([[math.log(1.5)]], t([-1.0]))
    assert m_ppo["loss/clip_frac_high"] == 0.0 and g_ppo.item() == pytest.approx(1.5)


def test_cispo_inside_the_band_has_the_ppo_gradient():
    # rho = [1.1, 0.9], A = [+1, -2], token-mean over 2. Unclipped PPO: dL/dl = -A rho / 2
    # = [-0.55, 0.9]; CISPO: -sg[rho] A / 2 -- the same numbers (d rho/dl = rho = the weight)
    logp = [[math.log(1.1), math.log(0.9)]]
    adv = t([[1.0, -2.0]])
    _, g_cispo, m = loss_and_grad(logp, adv, trust_region="cispo")
    _, g_ppo, _ = loss_and_grad(logp, adv)
    assert torch.allclose(g_cispo, t([[-0.55, 0.9]]), atol=1e-12)
    assert torch.allclose(g_cispo, g_ppo, atol=1e-12)
    assert m["loss/clip_frac_high"] == 0.0 and m["loss/clip_frac_low"] == 0.0


def test_cispo_rejects_dual_clip_and_unknown_trust_region():
    x, m, a = torch.zeros(2, 3), torch.ones(2, 3), torch.zeros(2)
    with pytest.raises(ValueError, match="dual_clip"):
        policy_loss(x, x, a, m, trust_region="cispo", dual_clip=3.0)
    with pytest.raises(ValueError, match="clip, cispo"):
        policy_loss(x, x, a, m, trust_region="ppo")
    with pytest.raises(ValueError, match="token, sequence, sequence-token"):
        policy_loss(x, x, a, m, ratio="seq")
    with pytest.raises(ValueError, match="token_mask"):
        policy_loss(x, x, a, m, token_mask=torch.ones(2, 2))


# --- token_mask --------------------------------------------------------------------------------


def test_token_mask_keeps_the_normalisers():
    # ratios 1, A = [+1] on 3 tokens, mask [1, 1, 1], token_mask [1, 0, 1]
    # token-mean: -(1 + 0 + 1)/3 = -2/3 (not -2/2); seq-mean-token-mean: same, |y| = 3
    # gradient: -A rho / 3 = -1/3 on kept tokens, 0 on the masked one
    for agg in ("token-mean", "seq-mean-token-mean"):
        loss, g, m = loss_and_grad([[0.0, 0.0, 0.0]], t([1.0]), token_mask=t([[1, 0, 1]]), agg=agg)
        assert loss == pytest.approx(-2 / 3)
        assert torch.allclose(g, t([[-1 / 3, 0.0, -1 / 3]]), atol=1e-12)
        assert m["loss/ratio_mean"] == 1.0  # metrics ignore the extra mask


def test_token_mask_of_ones_changes_nothing():
    logp = t([[0.1, -0.3], [0.2, 0.05]])
    adv, mask = t([1.0, -0.5]), t([[1, 1], [1, 0]])
    for level in RATIO_LEVELS:
        for region in TRUST_REGIONS:
            a, _ = policy_loss(logp, torch.zeros_like(logp), adv, mask, ratio=level, trust_region=region)
            b, _ = policy_loss(
                logp, torch.zeros_like(logp), adv, mask, ratio=level, trust_region=region, token_mask=torch.ones(2, 2)
            )
            assert a.item() == b.item()


# --- NaN safety and micro-batching of the new knobs ---------------------------------------------


@pytest.mark.parametrize("agg", AGG_MODES)
def test_new_knobs_ignore_garbage_padding(agg):
    logp = t([[-0.5, float("-inf")], [float("nan"), float("-inf")]]).requires_grad_()
    mask = t([[1, 0], [0, 0]])
    for level, region in (("sequence-token", "clip"), ("token", "cispo"), ("sequence-token", "cispo")):
        loss, m = policy_loss(
            logp,
            torch.zeros(2, 2, dtype=D),
            t([1.0, 1.0]),
            mask,
            ratio=level,
            trust_region=region,
            agg=agg,
            norm_len=2,
            token_mask=t([[1, 1], [1, 1]]),
        )
        (g,) = torch.autograd.grad(loss, logp)
        assert torch.isfinite(loss) and torch.isfinite(g).all(), (level, region)
        assert all(math.isfinite(v) for v in m.values())
        assert g[1].abs().sum() == 0 and g[0, 1] == 0 and g[0, 0] != 0


@pytest.mark.parametrize("level, region", [("sequence-token", "clip"), ("token", "cispo")])
def test_new_knobs_micro_batches_sum_to_the_full_batch(level, region):
    g = torch.Generator().manual_seed(1)
    mask = (torch.arange(5)[None, :] < torch.tensor([5, 3, 1, 4])[:, None]).to(D)
    logp = (-torch.rand(4, 5, generator=g, dtype=D)).requires_grad_()
    old = logp.detach() + 0.3 * torch.randn(4, 5, generator=g, dtype=D)
    adv = torch.randn(4, generator=g, dtype=D)
    kw = dict(ratio=level, trust_region=region, agg="token-mean")
    full, _ = policy_loss(logp, old, adv, mask, **kw)
    micro = sum(
        policy_loss(
            logp[i : i + 1], old[i : i + 1], adv[i : i + 1], mask[i : i + 1], n_tokens=mask.sum(), n_seqs=4, **kw
        )[0]
        for i in range(4)
    )
    (g_full,) = torch.autograd.grad(full, logp)
    (g_micro,) = torch.autograd.grad(micro, logp)
    assert micro.item() == pytest.approx(full.item(), abs=1e-9)
    assert torch.allclose(g_micro, g_full, atol=1e-9) and g_full.abs().sum() > 0
