"""Edges of the advantage shapers (advantages/shapers.py) by hand: EDAS's argument errors, clips given alone or
equal, dtypes, per-group normalisation, metrics of empty or unshaped batches; the veto's strict trigger
boundaries, zero advantages, accepted zero clips, dtypes and the metrics of batches without tokens or rows."""

import re

import pytest
import torch

from reasonrl.advantages.shapers import edas, negative_veto_mask

# One group of G = 4: rollout 0 correct, wrong answers "x", "x", "y" -> n = [_, 2, 2, 1]; with gamma = 1 the
# mean over W is (2 + 2 + 1) / 3 = 5/3, so lambda_x = 2 / (5/3) = 1.2 and lambda_y = 1 / (5/3) = 0.6.
ANSWERS = [["c", "x", "x", "y"]]
CORRECT = torch.tensor([[1.0, 0.0, 0.0, 0.0]])
ADV = torch.tensor([[1.0, -1.0, -1.0, -1.0]])


def _exact(msg: str) -> str:
    return "^" + re.escape(msg) + "$"


# ------------------------------------------------------------------ EDAS


def test_edas_names_a_wrong_rank_or_a_non_tensor_in_its_error():
    one = [["a"]]
    with pytest.raises(ValueError, match=_exact("advantages must be a (B, G) or (B, G, T) tensor, got (3,)")):
        edas(torch.zeros(3), one, torch.zeros(1, 1))
    with pytest.raises(ValueError, match=_exact("advantages must be a (B, G) or (B, G, T) tensor, got list")):
        edas([[0.0]], one, torch.zeros(1, 1))


def test_edas_lambda_bounds_may_be_equal_and_each_clips_alone():
    # lambda_min = lambda_max = 0.8: every wrong rollout's lambda becomes 0.8 -> [1, -0.8, -0.8, -0.8]
    shaped, _ = edas(ADV, ANSWERS, CORRECT, lambda_min=0.8, lambda_max=0.8)
    assert shaped.tolist()[0] == pytest.approx([1.0, -0.8, -0.8, -0.8])
    # lambda_max = 1 alone: lambda_x 1.2 -> 1, lambda_y 0.6 kept -> [1, -1, -1, -0.6]
    shaped, m = edas(ADV, ANSWERS, CORRECT, lambda_max=1.0)
    assert shaped.tolist()[0] == pytest.approx([1.0, -1.0, -1.0, -0.6])
    assert m["edas/lambda_max"] == pytest.approx(1.0)
    # lambda_min = 0.9 alone: lambda_x 1.2 kept, lambda_y 0.6 -> 0.9 -> [1, -1.2, -1.2, -0.9]
    shaped, _ = edas(ADV, ANSWERS, CORRECT, lambda_min=0.9)
    assert shaped.tolist()[0] == pytest.approx([1.0, -1.2, -1.2, -0.9])


def test_edas_keeps_the_advantages_dtype():
    # lambda is computed in float64 but applied in the advantages' dtype: float32 in, float32 out
    shaped, _ = edas(ADV, ANSWERS, CORRECT)
    assert shaped.dtype == torch.float32
    assert shaped.tolist()[0] == pytest.approx([1.0, -1.2, -1.2, -0.6])
    shaped, _ = edas(ADV.double(), ANSWERS, CORRECT)
    assert shaped.dtype == torch.float64


def test_edas_lambda_max_counts_only_negative_advantages():
    # the "x" rollouts are wrong but carry A = 0: left as they are, and their lambda 1.2 is not "applied";
    # only "y" (A = -1, lambda 0.6) is shaped -> lambda_max 0.6; diversity 2 distinct / 3 wrong
    shaped, m = edas(torch.tensor([[1.0, 0.0, 0.0, -1.0]]), ANSWERS, CORRECT)
    assert shaped.tolist()[0] == pytest.approx([1.0, 0.0, 0.0, -0.6])
    assert m == {
        "edas/diversity": pytest.approx(2 / 3),
        "edas/lambda_max": pytest.approx(0.6),
        "edas/frac_groups_shaped": 1.0,
    }


def test_edas_each_group_is_normalised_on_its_own_wrong_rollouts():
    # group 0 as above: [1, -1.2, -1.2, -0.6]. Group 1 has one wrong rollout: n = 1, mean over W = 1 / 1,
    # lambda = 1 -> unchanged. (Pooling the batch would give group 0 a mean of 6 / 4 or 5 / 4, not 5 / 3.)
    adv = torch.tensor([[1.0, -1.0, -1.0, -1.0], [1.0, 1.0, 1.0, -3.0]])
    correct = torch.tensor([[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0]])
    shaped, m = edas(adv, ANSWERS + [["c", "c", "c", "z"]], correct)
    assert shaped[0].tolist() == pytest.approx([1.0, -1.2, -1.2, -0.6])
    assert shaped[1].tolist() == [1.0, 1.0, 1.0, -3.0]
    # diversity: group 0 2/3, group 1 1/1 -> mean 5/6; only group 0 changed -> 1/2
    assert m["edas/diversity"] == pytest.approx(5 / 6)
    assert m["edas/frac_groups_shaped"] == 0.5


def test_edas_metrics_when_nothing_is_shaped():
    # all rollouts correct: no group has W (diversity 0), no negative advantage shaped (lambda_max 1), no group
    # changed (0)
    adv = torch.tensor([[0.0, 0.0], [0.0, 0.0]])
    shaped, m = edas(adv, [["a", "a"], ["b", "b"]], torch.ones(2, 2))
    assert shaped.tolist() == adv.tolist()
    assert m == {"edas/diversity": 0.0, "edas/lambda_max": 1.0, "edas/frac_groups_shaped": 0.0}


@pytest.mark.parametrize("shape", [(0, 4), (0, 4, 3)])
def test_edas_empty_batch(shape):
    # B = 0 groups: an empty result and the empty-batch metrics, not a crash on the reshape of 0 elements
    shaped, m = edas(torch.zeros(shape), [], torch.zeros(0, 4))
    assert shaped.shape == shape
    assert m == {"edas/diversity": 0.0, "edas/lambda_max": 1.0, "edas/frac_groups_shaped": 0.0}


# ------------------------------------------------------------------ negative-advantage veto

NEG = torch.tensor([-1.0])


def _veto(ratio, adv=NEG, mask=None, **kw):
    ratio = torch.tensor(ratio) if not isinstance(ratio, torch.Tensor) else ratio
    return negative_veto_mask(ratio, adv, torch.ones(ratio.shape) if mask is None else mask, **kw)


def test_veto_names_the_expected_advantage_shapes():
    with pytest.raises(ValueError, match=_exact("advantages must be (N,) = (2,) or (N, T) = (2, 3), got (3,)")):
        negative_veto_mask(torch.ones(2, 3), torch.zeros(3), torch.ones(2, 3))


def test_veto_accepts_zero_clips():
    # clip_low = 0: the band's lower edge is 1, so rho = 0.9 at t = 1 triggers -> [1, 0, 0]
    assert _veto([[1.0, 0.9, 1.0]], clip_low=0.0)[0].tolist() == [[1.0, 0.0, 0.0]]
    # clip_high = 0: the upper edge is 1, so rho = 1.1 at t = 1 triggers -> [1, 0, 0]
    assert _veto([[1.0, 1.1, 1.0]], clip_high=0.0)[0].tolist() == [[1.0, 0.0, 0.0]]


@pytest.mark.parametrize(
    "ratio, kw",
    [
        ([[0.5, 2.0, 1.0]], {}),  # default band [1 - 0.5, 1 + 1.0] = [0.5, 2.0]: both edges are inside
        ([[1.5, 1.5, 1.0]], {"trigger": "ratio_high", "tau_hi": 1.5}),  # rho > 1.5 needed; 1.5 is not
        ([[0.5, 0.5, 1.0]], {"trigger": "ratio_low", "tau_lo": 0.5}),  # rho < 0.5 needed; 0.5 is not
        ([[1.0, 1.0, 1.0]], {"trigger": "prefix_logratio", "tau_cum": 0.0}),  # |0 + 0 + 0| > 0 is false
    ],
)
def test_veto_thresholds_are_strict(ratio, kw):
    veto, m = _veto(ratio, **kw)
    assert veto.tolist() == [[1.0, 1.0, 1.0]]
    assert m == {"veto/frac_tokens": 0.0, "veto/frac_rows": 0.0}


def test_veto_a_zero_advantage_is_not_negative():
    # rho = 3 > 2 triggers at t = 0 in every row; only the row with A = -1 is vetoed
    ratio = torch.full((3, 2), 3.0)
    veto, m = _veto(ratio, adv=torch.tensor([0.0, -1.0, 0.5]))
    assert veto.tolist() == [[1.0, 1.0], [0.0, 0.0], [1.0, 1.0]]
    assert m == {"veto/frac_tokens": pytest.approx(2 / 6), "veto/frac_rows": pytest.approx(1 / 3)}
    # (N, T) advantages: the first trainable token's value decides; 0 and 0.5 are not negative even though a
    # later token is -1
    per_token = torch.tensor([[0.0, -1.0], [-1.0, -1.0], [0.5, -1.0]])
    veto, _ = _veto(ratio, adv=per_token)
    assert veto.tolist() == [[1.0, 1.0], [0.0, 0.0], [1.0, 1.0]]


def test_veto_dtype_follows_a_float_ratio_else_the_default():
    veto, _ = _veto(torch.tensor([[1.0, 3.0]], dtype=torch.float64))
    assert veto.dtype == torch.float64 and veto.tolist() == [[1.0, 0.0]]  # 3 > 2 triggers at t = 1
    veto, _ = _veto(torch.tensor([[1, 3]]))  # an integer ratio: the mask gets the default float dtype
    assert veto.dtype == torch.get_default_dtype() and veto.tolist() == [[1.0, 0.0]]


def test_veto_metrics_without_trainable_tokens_or_rows():
    # no trainable token: nothing can trigger, the fractions are 0 (not 0 / 0)
    veto, m = _veto(torch.full((2, 2), 3.0), adv=torch.tensor([-1.0, -1.0]), mask=torch.zeros(2, 2))
    assert veto.tolist() == [[1.0, 1.0], [1.0, 1.0]]
    assert m == {"veto/frac_tokens": 0.0, "veto/frac_rows": 0.0}
    # no rows (N = 0, T = 3): an empty mask and 0 fractions
    veto, m = _veto(torch.ones(0, 3), adv=torch.zeros(0))
    assert veto.shape == (0, 3)
    assert m == {"veto/frac_tokens": 0.0, "veto/frac_rows": 0.0}
