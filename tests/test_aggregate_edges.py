"""Edges of the loss aggregation (losses/aggregate.py) by hand: the norm_len and count checks with their
whole messages, the floor of 1 on a given count (int, float and tensor), and the dtype of the result when
the mask has another dtype (issue 45's mutation survivors)."""

import pytest
import torch

from reasonrl.losses.aggregate import aggregate, check_agg, masked_mean, masked_values

V = torch.tensor([[3.0, 5.0]])  # one row, two tokens: sum 8
M = torch.ones(1, 2)


def test_dr_grpo_without_norm_len_says_what_it_needs():
    with pytest.raises(ValueError) as e:
        check_agg("seq-mean-token-sum-norm")
    assert str(e.value) == (
        "agg='seq-mean-token-sum-norm' (Dr. GRPO) needs norm_len, "
        "the constant length to divide by (e.g. the max completion length)"
    )


@pytest.mark.parametrize("norm_len, shown", [(0, "0.0"), (-2, "-2.0"), (torch.tensor(0.0), "0.0")])
def test_norm_len_must_be_positive(norm_len, shown):
    with pytest.raises(ValueError) as e:
        check_agg("seq-mean-token-sum-norm", norm_len)
    assert str(e.value) == f"norm_len must be > 0, got {shown}"


def test_a_norm_len_below_one_is_a_valid_constant():
    # norm_len 0.5 is > 0: 8 / (1 row * 0.5) = 16
    check_agg("seq-mean-token-sum-norm", 0.5)
    assert aggregate(V, M, "seq-mean-token-sum-norm", norm_len=0.5).item() == pytest.approx(16.0)


@pytest.mark.parametrize(
    "agg, kw, name, shown",
    [
        ("token-mean", {"n_tokens": -1}, "n_tokens", "-1.0"),
        ("seq-mean-token-sum", {"n_seqs": -2}, "n_seqs", "-2.0"),
        ("seq-mean-token-mean", {"n_seqs": torch.tensor(-0.5)}, "n_seqs", "-0.5"),
    ],
)
def test_a_negative_global_count_is_refused_by_name(agg, kw, name, shown):
    with pytest.raises(ValueError) as e:
        aggregate(V, M, agg, **kw)
    assert str(e.value) == f"{name} must be >= 0, got {shown}"


@pytest.mark.parametrize("count", [0, 0.5, 1, torch.tensor(0.0), torch.tensor(0.5), torch.tensor(1.0)])
def test_a_given_count_below_one_is_floored_at_one(count):
    # counts 0, 0.5 and 1 (int, float or tensor) all divide by 1: token-mean 8 / 1 = 8, seq-mean-token-sum 8 / 1
    assert aggregate(V, M, "token-mean", n_tokens=count).item() == pytest.approx(8.0)
    assert aggregate(V, M, "seq-mean-token-sum", n_seqs=count).item() == pytest.approx(8.0)


def test_a_given_count_above_one_is_used_as_is():
    # neighbour of the floor: 8 / 2 = 4 with n_tokens 2 (int) or tensor(2.)
    assert aggregate(V, M, "token-mean", n_tokens=2).item() == pytest.approx(4.0)
    assert aggregate(V, M, "token-mean", n_tokens=torch.tensor(2.0)).item() == pytest.approx(4.0)


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_the_result_has_the_values_dtype_whatever_the_masks(agg):
    # a float64 (or int) mask must not turn float32 values into a float64 loss:
    # V = (3, 5), mask (1, 0.5): contributions 3 and 2.5, sum 5.5; token-mean / 1.5 = 3.666667;
    # seq-mean-token-mean (5.5 / 1.5) / 1 row = 3.666667; seq-mean-token-sum 5.5 / 1 = 5.5
    mask = torch.tensor([[1.0, 0.5]], dtype=torch.float64)
    out = aggregate(V, mask, agg)
    assert out.dtype == torch.float32
    assert out.item() == pytest.approx(5.5 if agg == "seq-mean-token-sum" else 5.5 / 1.5)
    assert aggregate(V, mask.long().clamp(min=1), agg).dtype == torch.float32


def test_masked_values_and_masked_mean_keep_the_values_dtype():
    # mask (1, 0.5) in float64: m * v = (3, 2.5) float32; mean 5.5 / 1.5 = 3.666667 float32
    mask = torch.tensor([[1.0, 0.5]], dtype=torch.float64)
    mv = masked_values(V, mask)
    assert mv.dtype == torch.float32 and mv.tolist() == [[3.0, 2.5]]
    mm = masked_mean(V, mask)
    assert mm.dtype == torch.float32 and mm.item() == pytest.approx(5.5 / 1.5)
