"""Edges of losses/corr.py (CorR-PO) that test_anchors_corr.py leaves open: low-precision logits,
whole error messages, defaults and the pass-through of ``min_tokens``/``method``, padded constant
rows, the [-1, 1] clamp against rounding, an underflowing variance, and every metric's corner case
(no defined row, an empty batch). Numbers by hand in the comments."""

import math
import re

import pytest
import torch

from reasonrl.losses import corr_po_bonus, logit_grad_norm, token_stats
from reasonrl.losses.corr import defined_rows, inversion_score, pearson_per_row, spearman_per_row

D = torch.float64


def t(rows):
    return torch.tensor(rows, dtype=D)


def raises(msg: str):
    return pytest.raises(ValueError, match=f"^{re.escape(msg)}$")


# x = [1, 2, 3], y = [2, 4, 7]: dx = [-1, 0, 1], dy = [-7/3, -1/3, 8/3]: cov 5, var 2 and 114/9 ->
# Pearson 5 / sqrt(2 * 114/9) = 0.9933993; the ranks agree, so Spearman is 1.
PEARSON_0 = 5 / math.sqrt(2 * 114 / 9)


def test_token_stats_upcasts_bf16_logits():
    # logits [0, 0] -> p = [1/2, 1/2], H = ln 2 = 0.6931472 in float32 (bf16 would round it to 0.6914)
    ent, p_y, sum_p2 = token_stats(torch.zeros(1, 1, 2, dtype=torch.bfloat16), torch.zeros(1, 1, dtype=torch.long))
    assert ent.dtype == torch.float32
    assert ent.item() == pytest.approx(math.log(2), abs=1e-6)
    assert (p_y.item(), sum_p2.item()) == (0.5, 0.5)


def test_logit_grad_norm_shape_message():
    with raises("p_y and sum_p2 must have one shape; got (1, 2) and (1, 3)"):
        logit_grad_norm(torch.zeros(1, 2), torch.zeros(1, 3))


def test_defined_rows_default_min_tokens_and_padded_constant_row():
    # row 0: 3 real tokens, both series vary -> defined with the default min_tokens = 3 (not with 4)
    # row 1: x real tokens all 0.5 (the padding 9 must not make it vary) -> constant -> undefined
    x = t([[1.0, 2.0, 3.0, 0.0], [0.5, 0.5, 0.5, 9.0]])
    y = t([[2.0, 4.0, 7.0, 0.0], [1.0, 2.0, 3.0, 4.0]])
    mask = t([[1, 1, 1, 0], [1, 1, 1, 0]])
    assert defined_rows(x, y, mask).tolist() == [True, False]
    assert defined_rows(x, y, mask, min_tokens=4).tolist() == [False, False]


def test_pearson_is_clamped_to_plus_minus_one():
    # y = 0.3 x and y = -0.3 x are (anti)correlated: |c| = 1 (Cauchy-Schwarz: never more); for
    # x = [0.1, 0.1, 3] the float64 ratio cov / sqrt(var var) rounds to 1.0000000000000002, the clamp
    # brings it back to 1 and -1
    x = [0.1, 0.1, 3.0]
    c = pearson_per_row(t([x, x]), t([[0.3 * v for v in x], [-0.3 * v for v in x]]), torch.ones(2, 3))
    assert c.tolist() == [1.0, -1.0]


def test_pearson_is_zero_when_the_variance_underflows():
    # x = [0, 1e-200, 2e-200]: dx = [-1e-200, 0, 1e-200], dx^2 = 1e-400 underflows to 0 in float64,
    # so the denominator is 0 although the row is not constant: c = 0, not cov / 1e-300
    x, y = t([[0.0, 1e-200, 2e-200]]), t([[0.0, 1e100, 2e100]])
    assert defined_rows(x, y, torch.ones(1, 3)).item()
    assert pearson_per_row(x, y, torch.ones(1, 3)).item() == 0.0


def test_spearman_default_min_tokens_and_pass_through():
    # x = [1, 2, 3], y = [1, 3, 2]: ranks [0, 1, 2], [0, 2, 1]: dx = [-1, 0, 1], dy = [-1, 1, 0]:
    # cov 1, var 2 and 2 -> 1/2 with the default min_tokens = 3; 0 with min_tokens = 4
    x, y = t([[1.0, 2.0, 3.0]]), t([[1.0, 3.0, 2.0]])
    assert spearman_per_row(x, y, torch.ones(1, 3)).item() == pytest.approx(0.5)
    assert spearman_per_row(x, y, torch.ones(1, 3), min_tokens=4).item() == 0.0
    # two tokens [1, 2] vs [2, 1] -> ranks reversed -> -1 once min_tokens = 2 reaches pearson_per_row
    assert spearman_per_row(t([[1.0, 2.0]]), t([[2.0, 1.0]]), torch.ones(1, 2), min_tokens=2).item() == -1.0


def test_inversion_score_defaults_to_pearson_and_passes_min_tokens():
    x, y = t([[1.0, 2.0, 3.0]]), t([[2.0, 4.0, 7.0]])
    assert inversion_score(x, y, torch.ones(1, 3)).item() == pytest.approx(PEARSON_0, abs=1e-12)
    assert inversion_score(x, y, torch.ones(1, 3), method="spearman").item() == pytest.approx(1.0)
    # [1, 2] vs [3, 1] -> -1 with min_tokens = 2 (0 with the default 3)
    assert inversion_score(t([[1.0, 2.0]]), t([[3.0, 1.0]]), torch.ones(1, 2), min_tokens=2).item() == -1.0


def test_corr_po_correct_only_messages():
    x = torch.ones(2, 3)
    with raises("correct_only=True needs correct of shape (N,) = (2,), got None"):
        corr_po_bonus(x, x, x, correct_only=True)
    with raises("correct_only=True needs correct of shape (N,) = (2,), got (3,)"):
        corr_po_bonus(x, x, x, correct=torch.ones(3), correct_only=True)


def test_corr_po_passes_min_tokens_to_score_and_metrics():
    # [1, 2] vs [3, 1]: c = -1 with min_tokens = 2, bonus = -0.1 * -1 = 0.1; defined, so it counts
    c, bonus, m = corr_po_bonus(t([[1.0, 2.0]]), t([[3.0, 1.0]]), torch.ones(1, 2), min_tokens=2)
    assert (c.item(), bonus.item()) == (-1.0, pytest.approx(0.1))
    assert (m["corr/frac_defined"], m["corr/mean"]) == (1.0, -1.0)


def test_corr_po_metrics_by_hand():
    # rows: c0 = 0.9933993 > 0; row 1 [1, 2, 3] vs [3, 2, 1] -> c1 = -1; row 2 constant x -> 0 (undefined)
    # frac_negative = 1/3 (the undefined 0 and the positive row do not count); frac_defined = 2/3
    # corr/mean = (0.9933993 - 1) / 2 = -0.0033004; bonus = -0.1 c = [-0.0993399, 0.1, 0]
    # -> bonus_mean = 0.0006601 / 3 = 0.00022002
    x = t([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0], [4.0, 4.0, 4.0]])
    y = t([[2.0, 4.0, 7.0], [3.0, 2.0, 1.0], [1.0, 2.0, 3.0]])
    _, _, m = corr_po_bonus(x, y, torch.ones(3, 3))
    assert m["corr/frac_negative"] == pytest.approx(1 / 3)
    assert m["corr/frac_defined"] == pytest.approx(2 / 3)
    assert m["corr/mean"] == pytest.approx((PEARSON_0 - 1) / 2, abs=1e-12)
    assert m["corr/bonus_mean"] == pytest.approx(0.1 * (1 - PEARSON_0) / 3, abs=1e-12)


def test_corr_po_metrics_without_defined_rows_and_on_an_empty_batch():
    # every row constant: no defined c, corr/mean is 0 (not the NaN mean of nothing), bonus 0
    _, _, m = corr_po_bonus(torch.ones(2, 3), t([[1.0, 2.0, 3.0]] * 2), torch.ones(2, 3))
    assert m == {"corr/mean": 0.0, "corr/frac_defined": 0.0, "corr/frac_negative": 0.0, "corr/bonus_mean": 0.0}
    # no rows at all: every metric 0
    e = torch.zeros(0, 3)
    c, bonus, m = corr_po_bonus(e, e, e)
    assert c.shape == bonus.shape == (0,)
    assert m == {"corr/mean": 0.0, "corr/frac_defined": 0.0, "corr/frac_negative": 0.0, "corr/bonus_mean": 0.0}
