"""Edges of the critic's losses (losses/value.py) by hand: the default clip, the downward clip, the
argument checks and their messages, the global counts passed to the aggregation, the dtype of the loss
and every metric key (issue 45's mutation survivors)."""

import pytest
import torch

from reasonrl.losses.value import bt_loss, value_loss

ONE = torch.ones(1, 1)


def test_value_loss_default_clip_is_verls_half():
    # V = 1, V_old = 0, R = 2. clip 0.5: V clipped to 0.5, (0.5 - 2)^2 = 2.25 > (1 - 2)^2 = 1 -> 0.5 * 2.25 = 1.125.
    # clip 1.5 (a neighbour): |V - V_old| = 1 < 1.5, no clip -> 0.5 * 1 = 0.5.
    v, old, ret = torch.tensor([[1.0]]), torch.zeros(1, 1), torch.tensor([[2.0]])
    assert value_loss(v, old, ret, ONE)[0].item() == pytest.approx(1.125)
    assert value_loss(v, old, ret, ONE, clip=0.5)[0].item() == pytest.approx(1.125)
    assert value_loss(v, old, ret, ONE, clip=1.5)[0].item() == pytest.approx(0.5)


def test_value_loss_clips_a_downward_step_too():
    # V = -1, V_old = 0, R = -2: unclipped (-1 + 2)^2 = 1; V - V_old = -1 clamps to -0.5, so the clipped
    # value is -0.5 and (-0.5 + 2)^2 = 2.25 is the larger error -> loss 0.5 * 2.25 = 1.125, clip_frac 1.
    loss, m = value_loss(torch.tensor([[-1.0]]), torch.zeros(1, 1), torch.tensor([[-2.0]]), ONE, clip=0.5)
    assert loss.item() == pytest.approx(1.125)
    assert m["critic/vf_clip_frac"] == 1.0


@pytest.mark.parametrize("clip", [0.0, -0.5])
def test_value_loss_rejects_a_clip_that_is_not_positive(clip):
    with pytest.raises(ValueError) as e:
        value_loss(ONE, ONE, ONE, ONE, clip=clip)
    assert str(e.value) == f"value clip must be > 0 (verl uses 0.5) or None for none, got {clip}"


def test_value_loss_shape_errors_name_all_four_shapes():
    # one mismatched shape among (N, T) tensors: each of the four shapes is printed in order
    a, b = torch.zeros(1, 2), torch.zeros(1, 3)
    with pytest.raises(ValueError) as e:
        value_loss(a, b, torch.zeros(1, 4), torch.zeros(1, 5))
    assert str(e.value) == (
        "value_loss needs (N, T) values, old values, returns and mask; got (1, 2), (1, 3), (1, 4), (1, 5)"
    )
    # equal shapes but not 2-D are refused by value_loss itself (not later by the aggregation)
    x = torch.zeros(2)
    with pytest.raises(ValueError) as e:
        value_loss(x, x, x, x)
    assert str(e.value) == "value_loss needs (N, T) values, old values, returns and mask; got (2,), (2,), (2,), (2,)"


def test_value_loss_passes_the_global_counts_to_the_aggregation():
    # clip None, V = (1, 1), R = (0, 0), both tokens in the mask: per-token (V - R)^2 = 1, sum 2.
    v, z, mask = torch.ones(1, 2), torch.zeros(1, 2), torch.ones(1, 2)
    # token-mean: local 0.5 * 2 / 2 = 0.5; with the global n_tokens = 4: 0.5 * 2 / 4 = 0.25
    assert value_loss(v, z, z, mask, clip=None)[0].item() == pytest.approx(0.5)
    assert value_loss(v, z, z, mask, clip=None, n_tokens=4)[0].item() == pytest.approx(0.25)
    # seq-mean-token-sum: local 0.5 * 2 / 1 row = 1; with n_seqs = 4: 0.5 * 2 / 4 = 0.25
    kw = {"clip": None, "agg": "seq-mean-token-sum"}
    assert value_loss(v, z, z, mask, **kw)[0].item() == pytest.approx(1.0)
    assert value_loss(v, z, z, mask, n_seqs=4, **kw)[0].item() == pytest.approx(0.25)
    # Dr. GRPO: 0.5 * 2 / (n_seqs 2 * norm_len 4) = 0.125
    loss = value_loss(v, z, z, mask, clip=None, agg="seq-mean-token-sum-norm", norm_len=4, n_seqs=2)[0]
    assert loss.item() == pytest.approx(0.125)


def test_value_loss_keeps_the_dtype_of_the_values():
    # float64 old values or returns (a rollout buffer in double) must not turn the float32 loss into float64:
    # V = 1, V_old = 0, R = 2 gives 1.125 as in the default-clip test, in float32.
    v = torch.tensor([[1.0]])
    old64, ret64 = torch.zeros(1, 1, dtype=torch.float64), torch.tensor([[2.0]], dtype=torch.float64)
    for old, ret in ((old64, ret64.float()), (old64.float(), ret64)):
        loss = value_loss(v, old, ret, ONE)[0]
        assert loss.dtype == torch.float32 and loss.item() == pytest.approx(1.125)


def test_value_loss_vpred_mean_is_the_masked_mean_of_the_values():
    # V = (1, 3, 100), mask (1, 1, 0): (1 + 3) / 2 = 2; value_error with R = 0: (1 + 9) / 2 = 5
    v, z = torch.tensor([[1.0, 3.0, 100.0]]), torch.zeros(1, 3)
    _, m = value_loss(v, z, z, torch.tensor([[1.0, 1.0, 0.0]]), clip=None)
    assert m == {"critic/vf_clip_frac": 0.0, "critic/vpred_mean": 2.0, "critic/value_error": 5.0}


def test_bt_loss_refuses_other_shapes_with_both_shapes_in_the_message():
    with pytest.raises(ValueError) as e:
        bt_loss(torch.zeros(1, 1), torch.zeros(1, 1))  # 2-D though alike
    assert str(e.value) == "bt_loss needs (P,) chosen and rejected rewards; got (1, 1), (1, 1)"
    with pytest.raises(ValueError) as e:
        bt_loss(torch.zeros(2), torch.zeros(3))
    assert str(e.value) == "bt_loss needs (P,) chosen and rejected rewards; got (2,), (3,)"


def test_bt_loss_refuses_a_negative_centring_coefficient():
    with pytest.raises(ValueError) as e:
        bt_loss(torch.zeros(1), torch.zeros(1), center_coef=-0.1)
    assert str(e.value) == "center_coef must be >= 0, got -0.1"


def test_bt_loss_centring_squares_the_sum_of_the_two_rewards():
    # r_c = 1, r_r = 2: -log sigmoid(-1) = log(1 + e) = 1.313262; centring 0.1 * (1 + 2)^2 = 0.9 -> 2.213262
    # (doubling the sum would add 0.6, squaring the difference 0.1)
    loss, m = bt_loss(torch.tensor([1.0]), torch.tensor([2.0]), center_coef=0.1)
    assert loss.item() == pytest.approx(2.213262, abs=1e-6)
    assert m["rm/loss"] == pytest.approx(2.213262, abs=1e-6)


def test_bt_loss_metrics_by_hand():
    # chosen (1, 1.5, 3, 0), rejected 1 each: d = (0, 0.5, 2, -1).
    # log(1 + e^-d) = 0.693147, 0.474077, 0.126928, 1.313262 -> mean 0.651853.
    # accuracy counts d > 0 strictly: 0.5 and 2 -> 2 / 4 = 0.5 (a tie d = 0 is not a win).
    # margin (0 + 0.5 + 2 - 1) / 4 = 0.375; chosen 5.5 / 4 = 1.375; rejected 1.
    loss, m = bt_loss(torch.tensor([1.0, 1.5, 3.0, 0.0]), torch.ones(4))
    assert loss.item() == pytest.approx(0.651853, abs=1e-6)
    assert m == pytest.approx(
        {"rm/loss": 0.651853, "rm/accuracy": 0.5, "rm/margin": 0.375, "rm/chosen": 1.375, "rm/rejected": 1.0},
        abs=1e-6,
    )
