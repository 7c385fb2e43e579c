"""Edges of the clipped policy loss (losses/policy.py) by hand: whole error messages, the smallest valid
clip_low / clip_high / dual_clip, the log-ratio's sign and its +-20 bound, the dual clip on positive and
large negative advantages, and the loss's dtype with float64 inputs (issue 45's mutation survivors)."""

import math

import pytest
import torch

from reasonrl.losses.policy import policy_loss


def one(rho, adv, **kw):
    """One token with ratio ``rho`` (old log-prob 0) and advantage ``adv`` -> (loss, metrics)."""
    logp = torch.tensor([[math.log(rho)]])
    return policy_loss(logp, torch.zeros(1, 1), torch.tensor([adv]), torch.ones(1, 1), **kw)


def raised(**kw) -> str:
    x = kw.pop("logp", torch.zeros(1, 3))
    args = {"old_logp": x, "advantages": torch.zeros(1), "mask": torch.ones_like(x), **kw}
    with pytest.raises(ValueError) as e:
        policy_loss(x, args.pop("old_logp"), args.pop("advantages"), args.pop("mask"), **args)
    return str(e.value)


def test_error_messages_in_full():
    assert raised(trust_region="cispo", dual_clip=3.0) == (
        "dual_clip only applies to trust_region='clip'; CISPO's clipped weight is already bounded"
    )
    assert raised(logp=torch.zeros(3), mask=torch.ones(3)) == "logp must be (N, T), got (3,)"
    assert raised(old_logp=torch.zeros(1, 2)) == "old_logp must have the shape of logp (1, 3), got (1, 2)"
    assert raised(mask=torch.ones(1, 2)) == "mask must have the shape of logp (1, 3), got (1, 2)"
    assert raised(advantages=torch.zeros(2)) == "advantages must be (N,) = (1,) or (N, T) = (1, 3), got (2,)"


def test_the_smallest_valid_clip_settings_are_accepted():
    # clip_low 0: band [1, 1.2]; rho 0.5, A = -1: min(-0.5, 1 * -1) = -1 -> loss 1
    assert one(0.5, -1.0, clip_low=0.0)[0].item() == pytest.approx(1.0)
    # clip_high 0: band [0.8, 1]; rho 1.5, A = 1: min(1.5, 1) = 1 -> loss -1
    assert one(1.5, 1.0, clip_high=0.0)[0].item() == pytest.approx(-1.0)
    # dual_clip 1.5 (> 1, below the usual 3): rho 2, A = -1: min(-2, -1.2) = -2, floored at 1.5 * -1 -> loss 1.5
    assert one(2.0, -1.0, dual_clip=1.5)[0].item() == pytest.approx(1.5)


def test_the_log_ratio_is_new_minus_old():
    # logp = log 0.5, old = log 0.25: rho = 2 (not 0.5 * 0.25); A = 1 -> min(2, 1.2) = 1.2 -> loss -1.2
    logp, old = torch.tensor([[math.log(0.5)]]), torch.tensor([[math.log(0.25)]])
    loss, m = policy_loss(logp, old, torch.ones(1), torch.ones(1, 1))
    assert loss.item() == pytest.approx(-1.2)
    assert m["loss/ratio_mean"] == pytest.approx(2.0)


def test_the_log_ratio_is_bounded_at_plus_and_minus_20():
    # log-ratio +30 is cut to 20: ratio_max e^20 = 4.851652e8 (not e^30 = 1.07e13)
    _, m = policy_loss(torch.tensor([[30.0]]), torch.zeros(1, 1), torch.ones(1), torch.ones(1, 1))
    assert m["loss/ratio_max"] == pytest.approx(math.exp(20.0), rel=1e-6)
    # log-ratio -30 is cut to -20: approx_kl = e^u - 1 - u at u = 20 = 4.851652e8 - 21 (not e^30 - 31)
    _, m = policy_loss(torch.tensor([[-30.0]]), torch.zeros(1, 1), torch.ones(1), torch.ones(1, 1))
    assert m["loss/approx_kl"] == pytest.approx(math.expm1(20.0) - 20.0, rel=1e-6)


def test_dual_clip_leaves_positive_advantages_alone():
    # A = 0.5 > 0, rho 1: s = 0.5 (the floor 3 * 0.5 = 1.5 only applies to A < 0) -> loss -0.5
    assert one(1.0, 0.5, dual_clip=3.0)[0].item() == pytest.approx(-0.5)


def test_dual_clip_floor_is_c_times_a():
    # A = -2, rho 4, c = 3: min(4 * -2, 1.2 * -2) = -8, floor 3 * -2 = -6 -> s = -6, loss 6
    # (c / A = -1.5 would give 1.5)
    assert one(4.0, -2.0, dual_clip=3.0)[0].item() == pytest.approx(6.0)


@pytest.mark.parametrize("which", ["advantages", "token_mask", "mask"])
def test_float64_side_inputs_keep_the_float32_loss(which):
    # rho 1, A = 1: s = 1, loss -1, in float32 whatever the dtype of the advantages, token mask or mask
    # (the mask with GSPO's sequence ratio, where it enters the mean log-ratio)
    logp, adv, mask = torch.zeros(1, 2), torch.ones(1), torch.ones(1, 2)
    kw = {"ratio": "sequence"}
    if which == "advantages":
        adv = adv.double()
    elif which == "token_mask":
        kw["token_mask"] = torch.ones(1, 2, dtype=torch.float64)
    else:
        mask = mask.double()
    loss, _ = policy_loss(logp, logp.clone(), adv, mask, **kw)
    assert loss.dtype == torch.float32 and loss.item() == pytest.approx(-1.0)
