"""Self-teacher maths (SSOPD, EGRSD / CL-EGRSD, CIPO, STRIDE, NudgeRL): the spec's (d) examples of
/work/shared/specs/distill-and-data.md sections 1, 2, 6, 7, 8, plus our own, each worked by hand in
the comment next to it."""

import math

import pytest
import torch

from reasonrl.rollout.branch import _suffix_mask
from reasonrl.tasks import guidance

from reasonrl.advantages import (
    cipo_pick_failure,
    cipo_reward,
    cipo_rewards,
    cipo_select,
    grpo,
    harmless_advantage,
    nudge_advantages,
    nudge_contexts,
    nudge_dropout_counts,
    parse_first_error,
    parse_verdict,
    verifier_reward,
)
from reasonrl.losses import (
    egrsd_gate,
    egrsd_magnitude,
    egrsd_token_weights,
    frontier_weight,
    lookahead_entropy,
    per_token_divergence,
    ssopd_pairs,
)


def t(rows):
    return torch.tensor(rows, dtype=torch.float64)


# ---------------------------------------------------------------- SSOPD (arXiv 2605.17497)


def test_ssopd_spec_pair_and_weights():
    # spec: lengths [120, 80, 200, 150], rewards [1, 1, 0, 0]: correct {0: 120, 1: 80} -> c* = 1;
    # wrong {2: 200, 3: 150} -> w* = 2; p = 0.5 -> w = 4 * 0.5 * 0.5 = 1.0
    # [1,1,1,1]: no wrong rollout -> no pair, w = 4 * 1 * 0 = 0; [1,0,0,0]: p = .25 -> 4 * .25 * .75 = 0.75
    correct = t([[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]])
    lengths = t([[120, 80, 200, 150], [120, 80, 200, 150], [120, 80, 200, 150]])
    c, w = ssopd_pairs(correct, lengths)
    assert c.tolist() == [1, -1, 0] and w.tolist() == [2, -1, 2]
    assert c.dtype == torch.long and w.dtype == torch.long
    assert torch.allclose(frontier_weight(correct), torch.tensor([1.0, 0.0, 0.75]), atol=1e-7)
    assert frontier_weight(correct)[1].item() == 0.0  # exactly 0, not a rounding residue


def test_ssopd_ties_go_to_lowest_index_and_unmixed_groups():
    # row 0: correct 0 and 1 both length 50 -> c* = 0; wrong 2 and 3 both 90 -> w* = 2
    # row 1: correct {1: 70, 3: 40} -> c* = 3; wrong {0: 30, 2: 30} -> tie -> w* = 0
    # row 2: all wrong -> (-1, -1)
    correct = torch.tensor([[1, 1, 0, 0], [0, 1, 0, 1], [0, 0, 0, 0]])
    lengths = torch.tensor([[50, 50, 90, 90], [30, 70, 30, 40], [10, 20, 30, 40]])
    c, w = ssopd_pairs(correct, lengths)
    assert c.tolist() == [0, 3, -1] and w.tolist() == [2, 0, -1]


def test_frontier_weight_forms():
    # G = 3, [1,0,0]: p = 1/3 -> 4 * 1/3 * 2/3 = 8/9 = 0.888889; [1,1,1,0] p = .75 -> 4 * .75 * .25 = .75
    assert frontier_weight(torch.tensor([[True, False, False]])).item() == pytest.approx(8 / 9)
    assert frontier_weight(torch.tensor([[1, 1, 1, 0]])).item() == pytest.approx(0.75)
    # "mixed" = 1[0 < p < 1]: rows p = 0.25, 1, 0 -> 1, 0, 0
    got = frontier_weight(torch.tensor([[1, 0, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]]), form="mixed")
    assert got.tolist() == [1.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="unknown frontier form"):
        frontier_weight(torch.tensor([[1, 0]]), form="p")
    with pytest.raises(ValueError, match="only 0 and 1"):
        frontier_weight(torch.tensor([[0.5, 0.0]]))


def test_ssopd_spec_kl_values_gradient_and_teacher_without_grad():
    # p_T = (0.8, 0.2), p_S = (0.5, 0.5):
    # forward KL = 0.8 ln(0.8/0.5) + 0.2 ln(0.2/0.5) = 0.8 * 0.470004 - 0.2 * 0.916291 = 0.192745
    # reverse KL = 0.5 ln(0.5/0.8) + 0.5 ln(0.5/0.2) = -0.235002 + 0.458145 = 0.223144
    # d forwardKL / d student logits = p_S - p_T = (-0.3, +0.3)
    student = torch.log(t([[[0.5, 0.5]]])).requires_grad_(True)  # (1, 1, 2)
    teacher = torch.log(t([[[0.8, 0.2]]])).requires_grad_(True)
    fwd = per_token_divergence(student, teacher, kind="forward_kl")
    assert fwd.item() == pytest.approx(0.19274, abs=1e-5)
    assert per_token_divergence(student, teacher, kind="reverse_kl").item() == pytest.approx(0.22314, abs=1e-5)
    fwd.sum().backward()
    assert torch.allclose(student.grad, t([[[-0.3, 0.3]]]), atol=1e-6)
    assert teacher.grad is None  # the teacher is a target: no gradient reaches it


# ---------------------------------------------------------------- EGRSD (arXiv 2605.13255)


def test_egrsd_gate_spec_values_and_floor():
    # g = 0.1 + 0.9 exp(-H): H=0 -> 1; H=.5 -> 0.1 + 0.9 * 0.606531 = 0.645878; H=2 -> 0.1 + 0.9 * 0.135335 = 0.221802
    g = egrsd_gate(t([[0.0, 0.5, 2.0]]))
    assert torch.allclose(g, t([[1.0, 0.64588, 0.22180]]), atol=1e-5)
    # H -> inf gives exactly g_min, never 0
    inf = egrsd_gate(t([[math.inf, 1e6]]))
    assert torch.equal(inf, t([[0.1, 0.1]]))
    assert (
        egrsd_gate(torch.tensor([[math.inf]])).item() == pytest.approx(0.1)
        and egrsd_gate(torch.tensor([[1e9]])).item() > 0
    )


def test_egrsd_gate_own_parameters_and_errors():
    # g_min = 0.2, tau = 2, H = 1: 0.2 + 0.8 exp(-0.5) = 0.2 + 0.8 * 0.606531 = 0.685225
    assert egrsd_gate(t([[1.0]]), g_min=0.2, tau=2.0).item() == pytest.approx(0.6852245, abs=1e-6)
    # a rounding-negative entropy must not push the gate above 1
    assert egrsd_gate(t([[-1e-9]])).item() == 1.0
    with pytest.raises(ValueError, match="NaN"):
        egrsd_gate(t([[math.nan]]))
    with pytest.raises(ValueError, match="g_min"):
        egrsd_gate(t([[1.0]]), g_min=0.0)


def test_egrsd_spec_full_weight():
    # A = +1, q = -0.5, s = -1.5, H = 0.5: m = |q - s| = 1.0, g = 0.64588 -> a = 1 * 1 * 0.64588
    w, _ = egrsd_token_weights(t([1.0]), t([[-0.5]]), t([[-1.5]]), t([[0.5]]), torch.ones(1, 1))
    assert w.item() == pytest.approx(0.64588, abs=1e-5)


def test_egrsd_own_weight_negative_advantage_and_sign_direction():
    # A = -2, q = -3, s = -0.5, H = 1: m = min(|-2.5|, 5) = 2.5; g = 0.1 + 0.9 e^-1 = 0.1 + 0.331091 = 0.431092
    # advantage direction: -2 * 2.5 * 0.431092 = -2.155457; sign direction: -1 * 2.5 * 0.431092 = -1.077729
    args = (t([-2.0]), t([[-3.0]]), t([[-0.5]]), t([[1.0]]), torch.ones(1, 1))
    assert egrsd_token_weights(*args)[0].item() == pytest.approx(-2.155457, abs=1e-5)
    assert egrsd_token_weights(*args, direction="sign")[0].item() == pytest.approx(-1.077729, abs=1e-5)


def test_egrsd_magnitude_forms_cap_and_detach():
    # abs: |q - s| = [9 -> cap 5, 0.5]; ratio: exp(9) -> 5, exp(-9) -> 1/5, exp(ln 2) = 2, exp(0.5) = 1.648721
    q = t([[-0.1, -1.0]])
    s = t([[-9.1, -0.5]]).requires_grad_(True)
    mask = torch.ones(1, 2)
    mag = egrsd_magnitude(q, s, mask)
    assert torch.allclose(mag, t([[5.0, 0.5]])) and not mag.requires_grad
    r = egrsd_magnitude(
        t([[0.0, -9.0, math.log(2.0), -1.0]]), t([[-9.0, 0.0, 0.0, -1.5]]), torch.ones(1, 4), form="ratio"
    )
    assert torch.allclose(r, t([[5.0, 0.2, 2.0, 1.6487213]]), atol=1e-6)
    with pytest.raises(ValueError, match="cap"):
        egrsd_magnitude(q, s, mask, form="ratio", cap=0.5)


def test_cl_egrsd_spec_lookahead():
    # H = [3, .1, .1, .1], K = 3: t1 sees mean(.1, .1, .1) = .1 -> H_hat = .1 -> g = 0.1 + 0.9 e^-0.1 = 0.914354;
    # the plain gate is 0.1 + 0.9 e^-3 = 0.1 + 0.044808 = 0.144808. Sustained [3,3,3,3]: CL gate = plain gate
    h = t([[3.0, 0.1, 0.1, 0.1]])
    mask = torch.ones(1, 4)
    g_cl = egrsd_gate(lookahead_entropy(h, mask, window=3))
    assert g_cl[0, 0].item() == pytest.approx(0.91435, abs=1e-5)
    assert egrsd_gate(h)[0, 0].item() == pytest.approx(0.14481, abs=1e-5)
    flat = t([[3.0, 3.0, 3.0, 3.0]])
    assert torch.equal(egrsd_gate(lookahead_entropy(flat, mask, window=3)), egrsd_gate(flat))


def test_lookahead_respects_right_padding_holes_and_inf():
    # row 0, K = 2, real = first 4: t1 min(2, mean(1, 4) = 2.5) = 2; t2 min(1, mean(4, .5)) = 1;
    #   t3 min(4, mean(.5) only -- the padding 9 is not a successor) = .5; t4 last real -> .5; padding keeps 9
    #   (counting the padding would give t3 min(4, mean(.5, 9) = 4.75) = 4)
    # row 1, real = first 2: t1 min(1, 3) = 1; t2 last -> 3
    # row 2, a hole at position 2: t1 min(5, mean(1, 2) = 1.5) = 1.5; t3 min(1, 2) = 1; t4 last -> 2
    h = t([[2.0, 1.0, 4.0, 0.5, 9.0, 9.0], [1.0, 3.0, 1.0, 7.0, 5.0, 0.0], [5.0, 100.0, 1.0, 2.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 0, 0, 0, 0], [1, 0, 1, 1, 0, 0]])
    out = lookahead_entropy(h, mask, window=2)
    assert torch.equal(
        out, t([[2.0, 1.0, 0.5, 0.5, 9.0, 9.0], [1.0, 3.0, 1.0, 7.0, 5.0, 0.0], [1.5, 100.0, 1.0, 2.0, 0.0, 0.0]])
    )
    # inf, K = 1: t1 min(inf, .2) = .2; t2 min(.2, inf) = .2; t3 last -> inf (gate exactly the floor, no NaN)
    out = lookahead_entropy(t([[math.inf, 0.2, math.inf]]), torch.ones(1, 3), window=1)
    assert torch.equal(out, t([[0.2, 0.2, math.inf]]))
    assert torch.equal(egrsd_gate(out)[0, 2], torch.tensor(0.1, dtype=torch.float64))
    # an empty row is returned unchanged
    assert torch.equal(lookahead_entropy(t([[1.0, 2.0]]), torch.zeros(1, 2), window=3), t([[1.0, 2.0]]))
    with pytest.raises(ValueError, match="window"):
        lookahead_entropy(h, mask, window=0)


def test_egrsd_token_weights_lookahead_switch():
    # A = +1, q - s = 1 everywhere -> m = 1, so the weights are the gates.
    # plain: [0.144808, 0.914354 x3]; CL (K = 3): every H_hat = 0.1 -> [0.914354 x4]
    # plain gate mean = (0.144808 + 3 * 0.914354) / 4 = 2.887870 / 4 = 0.721967; CL lowered 1 of 4 tokens
    args = (t([1.0]), t([[-1.0] * 4]), t([[-2.0] * 4]), t([[3.0, 0.1, 0.1, 0.1]]), torch.ones(1, 4))
    w0, m0 = egrsd_token_weights(*args)
    w3, m3 = egrsd_token_weights(*args, lookahead=3)
    assert torch.allclose(w0, t([[0.144808, 0.914354, 0.914354, 0.914354]]), atol=1e-6)
    assert torch.allclose(w3, t([[0.914354] * 4]), atol=1e-6)
    assert m0["egrsd/gate_mean"] == pytest.approx(0.721967, abs=1e-6)
    assert m0["egrsd/lookahead_frac"] == 0.0 and m3["egrsd/lookahead_frac"] == 0.25


def test_egrsd_token_weights_padding_metrics_and_detach():
    # rows: A = [1, -1], q - s = 0.5 -> m = 0.5; H row0 [10, 0], row1 [0, NaN-in-padding], mask [[1,1],[1,0]]
    # gates: 0.1 + 0.9 e^-10 = 0.100041, 1, 1 -> gate_mean = 2.100041 / 3 = 0.700014
    # weights: [0.5 * 0.100041 = 0.050020, 0.5], [-0.5, 0 (padding)] -> |w| mean = 1.050020 / 3 = 0.350007
    # floor: only H = 10 has 0.9 e^-10 < 0.009 -> 1/3; entropy mean (10 + 0 + 0) / 3 = 3.333333
    q = t([[-1.0, -1.0], [-1.0, math.nan]])
    s = t([[-1.5, -1.5], [-1.5, math.nan]]).requires_grad_(True)
    h = t([[10.0, 0.0], [0.0, math.nan]])
    mask = torch.tensor([[1, 1], [1, 0]])
    w, m = egrsd_token_weights(t([1.0, -1.0]), q, s, h, mask)
    assert torch.allclose(w, t([[0.0500204, 0.5], [-0.5, 0.0]]), atol=1e-6) and not w.requires_grad
    assert m["egrsd/gate_mean"] == pytest.approx(0.7000136, abs=1e-6)
    assert m["egrsd/magnitude_mean"] == pytest.approx(0.5)
    assert m["egrsd/weight_abs_mean"] == pytest.approx(0.3500068, abs=1e-6)
    assert m["egrsd/floor_frac"] == pytest.approx(1 / 3) and m["egrsd/tokens"] == 3.0
    assert m["egrsd/entropy_mean"] == pytest.approx(10 / 3)
    with pytest.raises(ValueError, match="adv must be"):
        egrsd_token_weights(t([1.0]), q, s, h, mask)


# ---------------------------------------------------------------- NudgeRL (arXiv 2605.15726)


def test_nudge_spec_example():
    # contexts: dropout [1, 0], hint1 [1, 1, 0], hint2 [0, 0, 0], lam = 1.1: mu = 3/8 = .375, mu1 = 2/3, mu2 = 0
    # raw a: dropout r - .375 = [.625, -.375]; hint1 (r - 2/3) + 1.1 (2/3 - .375) = [.654167, .654167, -.345833];
    #   hint2 (0 - 0) + 1.1 (0 - .375) = -.4125 x3; mean -0.003125, population std 0.502134
    # standardised: (.625 + .003125) / .502134 = 1.2509, ... (spec values)
    r = t([[1, 0, 1, 1, 0, 0, 0, 0]])
    ctx = torch.tensor([[0, 0, 1, 1, 1, 2, 2, 2]])
    got = nudge_advantages(r, ctx, lam=1.1)
    want = t([[1.2509, -0.7406, 1.3090, 1.3090, -0.6825, -0.8153, -0.8153, -0.8153]])
    assert torch.allclose(got, want, atol=1e-4)


def test_nudge_own_example_and_absent_hint():
    # r = [1, 1, 0, 1], contexts [0, 1, 1, 2], lam = 2, eps = 0: mu = .75, mu1 = .5, mu2 = 1
    # a = [1 - .75, (1 - .5) + 2(.5 - .75), (0 - .5) + 2(-.25), (1 - 1) + 2(.25)] = [.25, 0, -1, .5]
    # mean -.0625; deviations [.3125, .0625, -.9375, .5625]; var (.097656 + .003906 + .878906 + .316406)/4
    #   = .324219 -> std .569402; A = [.548821, .109764, -1.646464, .987878]
    got = nudge_advantages(t([[1, 1, 0, 1]]), torch.tensor([[0, 1, 1, 2]]), lam=2.0, eps=0.0)
    assert torch.allclose(got, t([[0.548821, 0.109764, -1.646464, 0.987878]]), atol=1e-6)
    # hint 1 got no rollouts: contexts [0, 0, 2, 2] must equal the same layout labelled [0, 0, 1, 1]
    r = t([[1, 0, 1, 1]])
    assert torch.allclose(
        nudge_advantages(r, torch.tensor([[0, 0, 2, 2]])), nudge_advantages(r, torch.tensor([[0, 0, 1, 1]]))
    )
    # a constant prompt carries no signal: a = 0 everywhere -> exactly 0
    assert torch.equal(
        nudge_advantages(t([[1, 1, 1, 1]]), torch.tensor([[0, 1, 1, 2]])), torch.zeros(1, 4, dtype=torch.float64)
    )
    with pytest.raises(ValueError, match="integer ids"):
        nudge_advantages(r, torch.tensor([[0.0, 1.0, 1.0, 2.0]]))


def test_nudge_dropout_counts_and_layout():
    g1, g2 = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    assert nudge_dropout_counts(2, 4, 0.5, g1) == nudge_dropout_counts(2, 4, 0.5, g2)  # deterministic per seed
    assert nudge_dropout_counts(3, 4, 0.0, g1) == [0, 0, 0] and nudge_dropout_counts(3, 4, 1.0, g1) == [4, 4, 4]
    # Binomial(4, .5) has mean 2; over 4000 draws the sample mean's std is sqrt(1 / 4000) = 0.016
    many = nudge_dropout_counts(4000, 4, 0.5, torch.Generator().manual_seed(0))
    assert all(0 <= d <= 4 for d in many) and abs(sum(many) / 4000 - 2.0) < 0.1
    # counts d = [1, 2], K = 4: bare 1 + 2 = 3, hint1 4 - 1 = 3, hint2 4 - 2 = 2 -> 8 ids, bare first
    assert nudge_contexts([1, 2], 4) == [0, 0, 0, 1, 1, 1, 2, 2]
    with pytest.raises(ValueError, match="dropout counts"):
        nudge_contexts([5], 4)


# ---------------------------------------------------------------- CIPO (arXiv 2605.14539)


def test_cipo_spec_selection():
    # accuracies [0, .25, .5, 1], p_max = .75, q0 = 0 -> prompts 2 and 3 (1-based) only; q0 = 1 adds the p = 0 one
    correct = torch.tensor([[0, 0, 0, 0], [1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 1]])
    assert cipo_select(correct, q0=0.0).tolist() == [False, True, True, False]
    assert cipo_select(correct, q0=1.0).tolist() == [True, True, True, False]
    # own: p = .75 is inside (0, .75] but outside (0, .5]
    assert cipo_select(torch.tensor([[1, 1, 1, 0]]), p_max=0.75, q0=0.0).tolist() == [True]
    assert cipo_select(torch.tensor([[1, 1, 1, 0]]), p_max=0.5, q0=0.0).tolist() == [False]
    # q0 = .5 over 4000 zero-pass prompts: fraction 0.5 +- 0.1 (its std is 0.008); reproducible per seed
    zeros = torch.zeros(4000, 4)
    sel = cipo_select(zeros, q0=0.5, generator=torch.Generator().manual_seed(1))
    assert abs(sel.double().mean().item() - 0.5) < 0.1
    assert torch.equal(sel, cipo_select(zeros, q0=0.5, generator=torch.Generator().manual_seed(1)))


def test_cipo_spec_correction_advantages_and_risk_averse_mean():
    # rewards [1, 0, 0, 1]: mean .5, population std .5 -> (r - .5) / .5 = [1, -1, -1, 1]
    r = cipo_rewards([True, False, False, True], ["3", "5", None, "3"], failed_answer="7")
    assert r.tolist() == [1.0, 0.0, 0.0, 1.0]
    assert torch.allclose(grpo(r[None].double(), unbiased=False, eps=0.0), t([[1, -1, -1, 1]]))
    # risk-averse: the second correction repeats the failed answer "7" -> -.5; mean (1 - .5 + 0 + 0)/4 = .125
    r = cipo_rewards([True, False, False, False], ["4", "7", "9", None], failed_answer="7")
    assert r.tolist() == [1.0, -0.5, 0.0, 0.0] and r.mean().item() == pytest.approx(0.125)


def test_cipo_reward_cases():
    assert cipo_reward(True, "7", "7") == 1.0  # correct wins even if it equals the failed answer
    assert cipo_reward(False, "7", "7", kappa=0.25) == -0.25
    assert cipo_reward(False, None, None) == 0.0  # no answer never counts as a repeat
    assert cipo_reward(False, "7", "7", kappa=0.0) == 0.0
    with pytest.raises(ValueError, match="kappa"):
        cipo_reward(False, "1", "2", kappa=-1.0)


def test_cipo_pick_failure():
    # row 0: wrong rollouts 1 and 3; row 1: no failure -> -1; row 2: not selected -> -1
    correct = torch.tensor([[1, 0, 1, 0], [1, 1, 1, 1], [0, 0, 0, 0]])
    selected = torch.tensor([True, True, False])
    seen = set()
    for seed in range(20):
        got = cipo_pick_failure(correct, selected, torch.Generator().manual_seed(seed))
        assert got[1:].tolist() == [-1, -1]
        seen.add(int(got[0]))
    assert seen == {1, 3}  # both failures get picked (P(only one in 20 draws) = 2 * 0.5^20)


# ---------------------------------------------------------------- STRIDE (arXiv 2605.18851)


def test_stride_spec_prefix_and_suffix_mask():
    # "A\n\nB\n\nC", k = 2: keep "A"; the suffix starts after "A\n\n", i.e. at character 3. A task
    # without its own step rule (object()) gets STRIDE's generic blank-line one.
    text, task = "A\n\nB\n\nC", object()
    assert guidance.steps(task, text) == ["A", "B", "C"]
    prefix, n = guidance.prefix_before_step(task, text, 2)
    assert prefix == "A\n\n" and n == 3 and text[n:] == "B\n\nC"
    # the regenerated row: 3 kept tokens, then 4 new ones; the loss sees the new ones only
    assert _suffix_mask(3, 4).tolist() == [[0, 0, 0, 1, 1, 1, 1]]


def test_stride_prefix_edges():
    text, task = "A\n\nB\n\nC", object()
    assert guidance.prefix_before_step(task, text, 1) == ("", 0)
    assert guidance.prefix_before_step(task, text, 3) == ("A\n\nB\n\n", 6)  # 1 + 2 + 1 + 2 characters
    assert guidance.prefix_before_step(task, text, 4) == (text, 7)  # past the last step: the whole text
    for bad in (0, 5):
        with pytest.raises(ValueError, match="out of range"):
            guidance.prefix_before_step(task, text, bad)


def test_parse_first_error_and_verdict():
    assert parse_first_error("step 2 is wrong <first_error>3</first_error>") == 3
    assert parse_first_error("<first_error> 2 \n</first_error>") == 2
    assert parse_first_error("<first_error>2</first_error> or <first_error>5</first_error>") == 2
    for bad in (
        "no tag",
        "<first_error>0</first_error>",
        "<first_error>-1</first_error>",
        "<first_error>two</first_error>",
        "<first_error>2.5</first_error>",
        "<first_error>3",
    ):
        assert parse_first_error(bad) is None, bad
    assert parse_verdict("...<verdict> Incorrect </verdict>") == "incorrect"
    assert parse_verdict("<verdict>correct</verdict>") == "correct"
    assert parse_verdict("<verdict>maybe</verdict>") is None and parse_verdict("correct") is None


def test_stride_spec_harmless_advantage_and_verifier_reward():
    # b = .25, redirected rewards [1, 0] -> [.75, -.25] -> harmless clips -> [.75, 0]
    assert torch.allclose(harmless_advantage(torch.tensor([1.0, 0.0]), 0.25), torch.tensor([0.75, 0.0]))
    assert torch.allclose(
        harmless_advantage(torch.tensor([1.0, 0.0]), 0.25, harmless=False), torch.tensor([0.75, -0.25])
    )
    # own: b = .5, [1, 1, 0] -> [.5, .5, 0]
    assert torch.allclose(harmless_advantage(torch.tensor([1, 1, 0]), 0.5), torch.tensor([0.5, 0.5, 0.0]))
    # spec: "incorrect" on a wrong answer + successful redirect -> 1 + .5 = 1.5
    assert verifier_reward("incorrect", False, True) == 1.5
    assert verifier_reward("correct", False, True) == 0.5  # wrong verdict, useful localisation only
    assert verifier_reward(None, True, False) == 0.0  # unparseable verdict
    assert verifier_reward("correct", True, False) == 1.0
    assert verifier_reward("incorrect", False, True, eta=0.25) == 1.25
    with pytest.raises(ValueError, match="verdict must be"):
        verifier_reward("yes", True, False)
