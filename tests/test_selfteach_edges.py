"""Edges of losses/selfteach.py that test_selfteach_math.py leaves open: whole error messages, the
boundaries of every check, defaults and pass-through of the keyword options, dtypes, and the
metrics' corner cases (one token, the floor threshold, inf entropy). Each number is worked by hand."""

import math
import re

import pytest
import torch

from reasonrl.losses import (
    egrsd_gate,
    egrsd_magnitude,
    egrsd_token_weights,
    frontier_weight,
    lookahead_entropy,
    ssopd_pairs,
)


def t(rows):
    return torch.tensor(rows, dtype=torch.float64)


def raises(msg: str):
    """pytest.raises on the whole message (re-escaped: the messages hold parentheses)."""
    return pytest.raises(ValueError, match=f"^{re.escape(msg)}$")


# ---------------------------------------------------------------- SSOPD inputs


def test_binary_rejects_non_matrices_and_non_binary_values_naming_correct():
    lengths = torch.tensor([3, 4, 5])
    with raises("correct must be a (B, G) tensor of 0/1, got (3,)"):
        ssopd_pairs(torch.tensor([1, 0, 1]), lengths)
    with raises("correct must be a (B, G) tensor of 0/1, got list"):
        ssopd_pairs([[1, 0, 1]], lengths[None])
    with raises("correct must hold only 0 and 1 (binary verifier rewards); threshold them first"):
        frontier_weight(torch.tensor([[1.0, 0.5]]))


def test_ssopd_pairs_shape_messages_name_lengths_and_eligible():
    ok = torch.tensor([[1, 0, 0], [0, 1, 0]])
    with raises("lengths (2, 2) and eligible None must match correct (2, 3)"):
        ssopd_pairs(ok, torch.ones(2, 2))
    with raises("lengths (2, 3) and eligible (2, 2) must match correct (2, 3)"):
        ssopd_pairs(ok, torch.ones(2, 3), eligible=torch.ones(2, 2, dtype=torch.bool))


def test_frontier_form_message_and_mixed_weight_dtype():
    with raises("unknown frontier form 'linear'; valid: 4p(1-p), mixed"):
        frontier_weight(torch.tensor([[1, 0]]), form="linear")
    # group 0 mixed (p = 1/2) -> 1.0, group 1 all correct -> 0.0, as the default float dtype (not bool)
    w = frontier_weight(torch.tensor([[1, 0], [1, 1]]), form="mixed")
    assert w.dtype == torch.get_default_dtype()
    assert torch.equal(w, torch.tensor([1.0, 0.0]))


# ---------------------------------------------------------------- EGRSD gate and magnitude


def test_gate_bounds_g_min_one_is_allowed_above_one_and_tau_zero_are_not():
    # g_min = 1: g = 1 + 0 * exp(-H) = 1 for every H, inf included
    assert torch.equal(egrsd_gate(t([[0.0, 2.0, math.inf]]), g_min=1.0), t([[1.0, 1.0, 1.0]]))
    with raises("egrsd_gate needs 0 < g_min <= 1 and tau > 0, got g_min=1.5, tau=1.0"):
        egrsd_gate(t([[1.0]]), g_min=1.5)
    with raises("egrsd_gate needs 0 < g_min <= 1 and tau > 0, got g_min=0.1, tau=0.0"):
        egrsd_gate(t([[1.0]]), tau=0.0)
    with raises("egrsd_gate: the teacher entropy holds NaN; fix the teacher forward (or fill padding)"):
        egrsd_gate(t([[math.nan]]))


def test_magnitude_cap_bounds_and_form_message():
    q, s, mask = t([[-1.0, -1.0, 0.0]]), t([[-2.0, -1.25, 5.0]]), torch.tensor([[1, 1, 0]])
    # abs with cap 0.5 (allowed: only "ratio" needs M >= 1): |q - s| = [1, 0.25] -> [0.5, 0.25], padding 0
    assert torch.equal(egrsd_magnitude(q, s, mask, cap=0.5), t([[0.5, 0.25, 0.0]]))
    # ratio with cap 1 (the smallest allowed): clip(exp(q - s), 1, 1) = 1 on real tokens
    assert torch.equal(egrsd_magnitude(q, s, mask, form="ratio", cap=1.0), t([[1.0, 1.0, 0.0]]))
    with raises("egrsd_magnitude cap must be > 0 (>= 1 for 'ratio' so 1/M <= M), got 0.0"):
        egrsd_magnitude(q, s, mask, cap=0.0)
    with raises("unknown magnitude form 'sq'; valid: abs, ratio"):
        egrsd_magnitude(q, s, mask, form="sq")
    with raises(
        "expected (N, T) tensors of one shape, got {'teacher_logp': (1, 3), 'student_logp': (1, 2), 'mask': (1, 3)}"
    ):
        egrsd_magnitude(q, s[:, :2], mask)


# ---------------------------------------------------------------- CL-EGRSD lookahead


def test_lookahead_default_window_is_eight():
    # H = [5, 0 x7, 8, 0]: t0's next 8 real tokens are [0 x7, 8], mean 1 -> min(5, 1) = 1 (a window
    # of 9 would add the last 0: 8/9); t8 sees [0] -> 0; zeros stay 0
    h = t([[5.0] + [0.0] * 7 + [8.0, 0.0]])
    mask = torch.ones(1, 10)
    assert torch.equal(lookahead_entropy(h, mask), t([[1.0] + [0.0] * 9]))


def test_lookahead_reads_the_last_real_token_of_a_full_row():
    # H = [5, 1, 3], every token real, K = 8: t0 sees mean(1, 3) = 2; t1 min(1, 3) = 1; t2 last keeps 3
    assert torch.equal(lookahead_entropy(t([[5.0, 1.0, 3.0]]), torch.ones(1, 3)), t([[2.0, 1.0, 3.0]]))


def test_lookahead_keeps_token_order_in_a_long_row_with_holes():
    # T = 200, even positions real, H_t = 1000 - t, K = 1: a real t's next real token is t + 2, so
    # H_hat_t = min(H_t, H_t - 2) = H_t - 2; the last real (t = 198) keeps 802; odd (padding) keep H_t.
    # (Long enough that an unstable sort would shuffle equal keys and pick wrong successors.)
    pos = torch.arange(200, dtype=torch.float64)
    h = (1000.0 - pos)[None]
    mask = (torch.arange(200) % 2 == 0)[None]
    want = h.clone()
    want[0, 0:198:2] -= 2.0
    assert torch.equal(lookahead_entropy(h, mask, window=1), want)


def test_same_shape_message_names_every_tensor():
    with raises("expected (N, T) tensors of one shape, got {'entropy': (1, 4), 'mask': (1, 3)}"):
        lookahead_entropy(torch.zeros(1, 4), torch.ones(1, 3))
    with raises("expected (N, T) tensors of one shape, got {'entropy': (1, 2, 2), 'mask': (1, 2, 2)}"):
        lookahead_entropy(torch.zeros(1, 2, 2), torch.ones(1, 2, 2))


# ---------------------------------------------------------------- EGRSD token weights


def _args(q_minus_s, h, mask=None, adv=(1.0,)):
    h = t(h)
    return (t(list(adv)), t(q_minus_s), torch.zeros_like(h), h, torch.ones_like(h) if mask is None else mask)


def test_token_weights_default_cap_is_five_and_cap_is_passed():
    # A = 1, H = 0 -> gate 1; q - s = 7: weight min(7, M) = 5 by default, 2 with cap = 2
    w, _ = egrsd_token_weights(*_args([[7.0]], [[0.0]]))
    assert w.item() == 5.0
    w, _ = egrsd_token_weights(*_args([[7.0]], [[0.0]]), cap=2.0)
    assert w.item() == 2.0


def test_token_weights_pass_tau_and_the_lookahead_window():
    # tau = 2, H = 2 ln 2: g = 0.1 + 0.9 exp(-ln 2) = 0.1 + 0.45 = 0.55 (tau = 1 would give 0.325); m = 1
    w, _ = egrsd_token_weights(*_args([[1.0]], [[2 * math.log(2)]]), tau=2.0)
    assert w.item() == pytest.approx(0.55, abs=1e-12)
    # lookahead = 1, H = [3, 1, 0]: t0 H_hat = min(3, 1) = 1 -> g = 0.1 + 0.9 e^-1 = 0.431092
    # (the window of 8 would see mean(1, 0) = 0.5 -> 0.645878)
    w, _ = egrsd_token_weights(*_args([[1.0, 1.0, 1.0]], [[3.0, 1.0, 0.0]]), lookahead=1)
    assert w[0, 0].item() == pytest.approx(0.1 + 0.9 * 0.3678794, abs=1e-6)


def test_token_weights_option_messages():
    args = _args([[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]], [[0.0] * 3, [0.0] * 3], adv=(1.0, 1.0))
    with raises("unknown direction 'up'; valid: advantage, sign"):
        egrsd_token_weights(*args, direction="up")
    with raises("lookahead must be 0 (plain EGRSD) or a window K >= 1, got -1"):
        egrsd_token_weights(*args, lookahead=-1)
    with raises("adv must be (N,) = (2,), one advantage per response; got (3,)"):
        egrsd_token_weights(t([1.0, 1.0, 1.0]), *args[1:])
    a, q, s, h, m = args
    with raises(
        "expected (N, T) tensors of one shape, got {'teacher_logp': (2, 3), 'student_logp': (2, 3), "
        "'entropy': (2, 2), 'mask': (2, 3)}"
    ):
        egrsd_token_weights(a, q, s, h[:, :2], m)


def test_token_weights_take_the_log_probs_dtype():
    # a float64 advantage does not promote float32 weights
    q, s, h = torch.full((1, 2), -1.0), torch.full((1, 2), -2.0), torch.zeros(1, 2)
    w, _ = egrsd_token_weights(torch.tensor([1.0], dtype=torch.float64), q, s, h, torch.ones(1, 2))
    assert w.dtype == torch.float32 and torch.equal(w, torch.ones(1, 2))


def test_metrics_of_a_single_real_token():
    # one real token of two, H = 10: g = 0.1 + 0.9 e^-10 = 0.1 + 0.0000409 = 0.1000409, floored
    # (0.9 e^-10 < 0.009): means over 1 token, not 2
    w, m = egrsd_token_weights(*_args([[1.0, 1.0]], [[10.0, 0.0]], mask=torch.tensor([[1, 0]])))
    assert m["egrsd/gate_mean"] == pytest.approx(0.1000409, abs=1e-7)
    assert m["egrsd/floor_frac"] == 1.0 and m["egrsd/tokens"] == 1.0


def test_floor_threshold_is_one_percent_of_the_gate_range():
    # g_min = 0.1: a token is floored iff 0.9 exp(-H) < 0.01 * 0.9, i.e. exp(-H) < 0.01.
    # H = 4.5: exp(-4.5) = 0.011109 -> not floored; H = 5: exp(-5) = 0.006738 -> floored: 1/2
    _, m = egrsd_token_weights(*_args([[1.0, 1.0]], [[4.5, 5.0]]))
    assert m["egrsd/floor_frac"] == 0.5
    # g_min = 1: the gate is flat 1, its range is empty and no token counts as floored (0 < 0 is false)
    _, m = egrsd_token_weights(*_args([[1.0, 1.0]], [[4.5, 5.0]]), g_min=1.0)
    assert m["egrsd/floor_frac"] == 0.0


def test_metrics_in_float64_and_entropy_mean_over_finite_tokens():
    # H = [1, inf, 3]: the inf token is floored (g = g_min exactly); entropy_mean over the finite
    # tokens = (1 + 3) / 2 = 2; floor_frac = 1/3 computed in float64 (float32 would be 0.33333334)
    _, m = egrsd_token_weights(*_args([[1.0, 1.0, 1.0]], [[1.0, math.inf, 3.0]]))
    assert m["egrsd/entropy_mean"] == 2.0
    assert m["egrsd/floor_frac"] == pytest.approx(1 / 3, abs=1e-15)
