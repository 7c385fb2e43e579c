"""Edges of the distillation, DPO and KL losses (losses/divergence.py, dpo.py, kl.py) by hand: 0 log 0 with
a banned token, top-k renormalised per position, the argument checks and their whole messages, the clip
and mask in the metrics, an empty batch, defaults, ties and the dtypes of returned tensors (issue 45's
mutation survivors)."""

import math

import pytest
import torch

from reasonrl.losses.divergence import per_token_divergence, token_divergence
from reasonrl.losses.dpo import demo_weight, dpo_sigmoid, pick_rejected, sequence_logp
from reasonrl.losses.kl import kl_loss

LOG2 = math.log(2.0)


def test_a_banned_teacher_token_adds_zero_not_nan():
    # teacher logits (0, -inf): p_T = (1, 0); student uniform. KL(p_T || p_S) = 1 * log(1 / 0.5) + 0 log 0
    # (= 0) = log 2 = 0.693147
    d = per_token_divergence(torch.zeros(1, 1, 2), torch.tensor([[[0.0, -math.inf]]]), kind="forward_kl")
    assert d.item() == pytest.approx(LOG2, abs=1e-6)


def test_top_k_renormalises_each_position_on_its_own():
    # two positions, V = 3, top_k = 2 (the teacher's two most likely tokens, renormalised):
    # position 0: teacher p (0.5, 0.3, 0.2) -> (0.625, 0.375); student uniform -> (0.5, 0.5):
    #   KL(T || S) = 0.625 log 1.25 + 0.375 log 0.75 = 0.139464 - 0.107880 = 0.031584
    # position 1: teacher p (0.1, 0.2, 0.7) -> tokens 2, 1: (0.777778, 0.222222); student p (0.6, 0.2, 0.2)
    #   -> (0.5, 0.5): 0.777778 log 1.555556 + 0.222222 log 0.444444 = 0.343643 - 0.180204 = 0.163439
    teacher = torch.tensor([[[0.5, 0.3, 0.2], [0.1, 0.2, 0.7]]]).log()
    student = torch.tensor([[[1.0, 1.0, 1.0], [0.6, 0.2, 0.2]]]).log()
    d = per_token_divergence(student, teacher, kind="forward_kl", top_k=2)
    assert d.tolist() == [pytest.approx([0.031584, 0.163439], abs=1e-5)]


def test_top_k_one_is_valid_and_leaves_nothing_to_diverge():
    # both restricted to the teacher's single top token, renormalised to probability 1 -> 0
    d = per_token_divergence(torch.tensor([[[0.0, 3.0]]]), torch.tensor([[[2.0, 0.0]]]), top_k=1)
    assert d.item() == pytest.approx(0.0, abs=1e-7)


def test_divergence_argument_messages():
    x = torch.zeros(1, 1, 2)
    with pytest.raises(ValueError) as e:
        per_token_divergence(x, x, kind="kl")
    assert str(e.value) == "unknown divergence 'kl'; valid: forward_kl, reverse_kl, jsd"
    for kw, shown in (
        ({"temperature": 0.0}, "beta=0.5, temperature=0.0, top_k=None"),
        ({"top_k": 0}, "beta=0.5, temperature=1.0, top_k=0"),
    ):
        with pytest.raises(ValueError) as e:
            per_token_divergence(x, x, **kw)
        assert str(e.value) == (
            f"token_divergence: beta must be in [0, 1], temperature > 0, top_k >= 1 or None; got {shown}"
        )


# student uniform, teacher (0.8, 0.2): KL(T || S) = 0.8 log 1.6 + 0.2 log 0.4 = 0.376003 - 0.183258 = 0.192745
S2, T2 = torch.zeros(1, 2, 2), torch.tensor([[[0.8, 0.2], [0.8, 0.2]]]).log()
D = 0.192745


def test_token_divergence_metrics_over_two_tokens():
    # both positions D: mean D, max D, no clip, 2 tokens
    loss, m = token_divergence(S2, T2, torch.ones(1, 2))
    assert loss.item() == pytest.approx(D, abs=1e-6)
    assert m == pytest.approx(
        {"distill/divergence": D, "distill/divergence_max": D, "distill/clip_frac": 0.0, "distill/tokens": 2.0},
        abs=1e-6,
    )


def test_a_masked_position_adds_nothing_to_the_metrics():
    # position 0: D; position 1 masked, teacher (0.999, 0.001) (a large divergence): mean D / 1 token, max D
    teacher = torch.tensor([[[0.8, 0.2], [0.999, 0.001]]]).log()
    loss, m = token_divergence(S2, teacher, torch.tensor([[1.0, 0.0]]))
    assert loss.item() == pytest.approx(D, abs=1e-6)
    assert m == pytest.approx(
        {"distill/divergence": D, "distill/divergence_max": D, "distill/clip_frac": 0.0, "distill/tokens": 1.0},
        abs=1e-6,
    )


def test_masked_out_positions_do_not_count_as_clipped():
    # position 1 masked and far above the clip (teacher (0.999, 0.001)); position 0 identical (D = 0 <= clip):
    # clip_frac 0 / 1 = 0
    teacher = torch.tensor([[[0.5, 0.5], [0.999, 0.001]]]).log()
    _, m = token_divergence(S2, teacher, torch.tensor([[1.0, 0.0]]), clip=0.1)
    assert m["distill/clip_frac"] == 0.0 and m["distill/divergence"] == pytest.approx(0.0, abs=1e-7)


def test_a_divergence_equal_to_the_clip_is_not_clipped():
    # identical distributions: D = 0 exactly; clip 0 -> 0 > 0 is false, nothing clipped
    _, m = token_divergence(S2, S2.clone(), torch.ones(1, 2), clip=0.0)
    assert m["distill/clip_frac"] == 0.0


def test_token_divergence_of_an_empty_batch_and_a_float64_mask():
    loss, m = token_divergence(torch.zeros(0, 1, 2), torch.zeros(0, 1, 2), torch.zeros(0, 1))
    assert loss.item() == 0.0 and m["distill/divergence_max"] == 0.0 and m["distill/tokens"] == 0.0
    # a float64 mask keeps the float32 loss (the divergence is computed in float32): D as above
    loss, _ = token_divergence(S2, T2, torch.ones(1, 2, dtype=torch.float64))
    assert loss.dtype == torch.float32 and loss.item() == pytest.approx(D, abs=1e-6)


def test_sequence_logp_mean_of_a_one_token_row_and_dtype():
    # row (-3, x) with mask (1, 0): sum -3, mean -3 / 1 = -3; a float64 mask keeps float32
    logp = torch.tensor([[-3.0, -100.0]])
    out = sequence_logp(logp, torch.tensor([[1.0, 0.0]], dtype=torch.float64), length_norm=True)
    assert out.dtype == torch.float32 and out.tolist() == [-3.0]


def test_dpo_default_beta_is_a_tenth():
    # l_c - ref_c = 0, l_r - ref_r = -10: z = beta * 10; beta 0.1 -> z = 1, loss log(1 + e^-1) = 0.313262;
    # beta 1.1 -> z = 11, loss log(1 + e^-11) = 0.0000167
    args = (torch.zeros(1), torch.zeros(1), torch.tensor([-10.0]), torch.zeros(1))
    assert dpo_sigmoid(*args)[0].item() == pytest.approx(0.313262, abs=1e-6)
    assert dpo_sigmoid(*args, beta=0.1)[0].item() == pytest.approx(0.313262, abs=1e-6)
    assert dpo_sigmoid(*args, beta=1.1)[0].item() == pytest.approx(0.0000167, abs=1e-7)


def test_dpo_accuracy_is_a_float_and_a_tie_is_not_a_win():
    # pair 0: chosen reward 0.1 * 1 > rejected 0 -> 1; pair 1: both 0 (a tie) -> 0
    _, m = dpo_sigmoid(torch.tensor([1.0, 0.0]), torch.zeros(2), torch.zeros(2), torch.zeros(2))
    assert m["accuracy"].dtype == torch.float32 and m["accuracy"].tolist() == [1.0, 0.0]


def test_demo_weight_defaults_and_checks():
    # linear, 4 of the default 8 passes: 1 - 4 / 8 = 0.5 (with 9 it would be 0.555556)
    assert demo_weight(4, schedule="linear") == demo_weight(4, schedule="linear", total_passes=8) == 0.5
    # total_passes 1 is valid: linear 1 - 0 / 1 = 1, then 1 - 1 / 1 = 0
    assert demo_weight(0, schedule="linear", total_passes=1) == 1.0
    assert demo_weight(1, schedule="linear", total_passes=1) == 0.0
    for passes, total in ((-1, 8), (0, 0)):
        with pytest.raises(ValueError) as e:
            demo_weight(passes, total_passes=total)
        assert str(e.value) == f"demo_weight: passes must be >= 0 and total_passes >= 1, got {passes}, {total}"
    with pytest.raises(ValueError) as e:
        demo_weight(0, schedule="step")
    assert str(e.value) == "unknown demo weight schedule 'step'; valid: exponential, linear, cosine"


def test_pick_rejected_shape_messages_and_empty_index_dtype():
    for c, s, shown in (
        (torch.ones(2), torch.zeros(2), "(2,) and (2,)"),
        (torch.ones(1, 2), torch.zeros(1, 3), "(1, 2) and (1, 3)"),
    ):
        with pytest.raises(ValueError) as e:
            pick_rejected(c, s)
        assert str(e.value) == f"pick_rejected: correct and seq_logp must be (B, G) alike, got {shown}"
    # every rollout correct and skip: no pair, but still long indices (they index tensors)
    demo, col = pick_rejected(torch.ones(1, 2), torch.zeros(1, 2))
    assert demo.dtype == col.dtype == torch.long and demo.numel() == col.numel() == 0


def test_kl_loss_mask_message_and_the_estimator_is_used():
    with pytest.raises(ValueError) as e:
        kl_loss(torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1, 3), coef=1.0)
    assert str(e.value) == "mask must have the shape of logp (1, 2), got (1, 3)"
    # d = logp - ref = 1: k1 = 1 (k3 would be e^-1 + 1 - 1 = 0.367879)
    loss, _ = kl_loss(torch.ones(1, 1), torch.zeros(1, 1), torch.ones(1, 1), coef=1.0, estimator="k1")
    assert loss.item() == pytest.approx(1.0)
