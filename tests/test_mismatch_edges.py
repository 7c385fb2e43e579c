"""Edges of the engine-mismatch correction (losses/mismatch.py) by hand: a ratio at the cap, the dtypes and
shapes engine_correction returns, each truncation's boundary (top-k 1, min-p ties, top-p at exactly 1 - p,
top-p 1), filters combined, a batch of (N, T, V) positions, and kept_log_mass's no-truncation path
(issue 45's mutation survivors)."""

import math

import pytest
import torch

from reasonrl.losses.mismatch import engine_correction, kept_log_mass, mismatch_metrics, vllm_support

# learner - engine per token: 0, +1, -0.3 (as in tests/test_mismatch.py)
LEARNER = torch.tensor([[-1.0, -2.0, -0.5]])
ENGINE = torch.tensor([[-1.0, -3.0, -0.2]])
# p = (0.5, 0.25, 0.15, 0.10)
P = torch.tensor([0.5, 0.25, 0.15, 0.10])


def test_capped_frac_counts_a_ratio_equal_to_the_cap():
    # cap 1 (log 0): ratios 1, e, e^-0.3 -> the first two reach the cap (1 >= 1 counts) -> 2 / 3;
    # weights min(., 1) = 1, 1, 0.740818 -> mean 0.913606
    m = mismatch_metrics(LEARNER, ENGINE, torch.ones(1, 3), cap=1.0)
    assert m["mismatch/capped_frac"] == pytest.approx(2 / 3)
    assert m["mismatch/is_weight_mean"] == pytest.approx(0.913606, abs=1e-6)


def test_engine_correction_keeps_the_trainers_dtype():
    # float64 learner or engine log-probs (a float64 buffer) must not make the old policy or the weighted
    # advantages float64 when the trainer's log-probs are float32
    logp, adv = LEARNER.clone(), torch.tensor([0.5])
    old, _, _ = engine_correction("tis", 2.0, logp, ENGINE, LEARNER.double(), adv, torch.ones(1, 3))
    assert old.dtype == torch.float32 and torch.equal(old, LEARNER)
    _, w_adv, _ = engine_correction("tis", 2.0, logp, ENGINE.double(), None, adv, torch.ones(1, 3))
    # 0.5 x (1, min(e, 2), e^-0.3) = (0.5, 1, 0.370409)
    assert w_adv.dtype == torch.float32
    assert torch.allclose(w_adv, torch.tensor([[0.5, 1.0, 0.370409]]), atol=1e-6)


def test_engine_correction_weights_per_token_advantages_in_their_own_shape():
    # two rows: row 0 learner vs engine as above (weights 1, 2, 0.740818 at cap 2), row 1 equal (weights 1)
    # per-token advantages row 0 = 1, row 1 = 2 -> (1, 2, 0.740818) and (2, 2, 2), still (2, 3)
    logp = torch.cat([LEARNER, LEARNER])
    engine = torch.cat([ENGINE, LEARNER])
    adv = torch.tensor([[1.0, 1.0, 1.0], [2.0, 2.0, 2.0]])
    _, w_adv, _ = engine_correction("tis", 2.0, logp, engine, None, adv, torch.ones(2, 3))
    assert w_adv.shape == (2, 3)
    assert torch.allclose(w_adv, torch.tensor([[1.0, 2.0, 0.740818], [2.0, 2.0, 2.0]]), atol=1e-6)


def test_top_k_one_keeps_only_the_most_likely_token():
    # top-1 of P keeps 0.5 -> log S = log 0.5 = -0.693147
    assert vllm_support(P.log()[None], 1, 1.0, 0.0)[0].tolist() == [True, False, False, False]
    assert float(kept_log_mass(P.log()[None], 1.0, 1, 1.0, 0.0)) == pytest.approx(-0.693147, abs=1e-6)


def test_min_p_keeps_tokens_tied_with_the_top_one():
    # logits (1, 1, 0): the two tied tokens have exactly the max probability, so min_p = 1 keeps both
    assert vllm_support(torch.tensor([[1.0, 1.0, 0.0]]), 0, 1.0, 1.0)[0].tolist() == [True, True, False]


def test_min_p_and_top_k_both_apply():
    # min_p 0.35 keeps p >= 0.175: (0.5, 0.25); top-3 would keep (0.5, 0.25, 0.15); together (0.5, 0.25):
    # S = 0.75, log -0.287682
    assert vllm_support(P.log()[None], 3, 1.0, 0.35)[0].tolist() == [True, True, False, False]
    assert float(kept_log_mass(P.log()[None], 1.0, 3, 1.0, 0.35)) == pytest.approx(-0.287682, abs=1e-6)


@pytest.mark.parametrize("top_p, n_kept", [(0.75, 3), (0.5, 2)])
def test_top_p_drops_a_token_whose_cumulative_mass_is_exactly_one_minus_p(top_p, n_kept):
    # 4 equally likely tokens: ascending cumulative mass 0.25, 0.5, 0.75, 1 (exact in float);
    # vLLM drops cum <= 1 - top_p: top_p 0.75 -> 0.25 -> one dropped; top_p 0.5 -> 0.5 -> two dropped
    assert int(vllm_support(torch.zeros(1, 4), 0, top_p, 0.0).sum()) == n_kept
    assert float(kept_log_mass(torch.zeros(1, 4), 1.0, 0, top_p, 0.0)) == pytest.approx(math.log(n_kept / 4))


def test_a_small_top_p_keeps_the_most_likely_token_alone():
    # top_p 0.1 on P: ascending cum 0.10, 0.25, 0.50, 1.0; drop <= 0.9 -> all but the 0.5 token
    assert vllm_support(P.log()[None], 0, 0.1, 0.0)[0].tolist() == [True, False, False, False]


def test_top_p_one_truncates_nothing_not_even_a_token_of_zero_float_mass():
    # e^-200 underflows to 0 in float32, but top_p = 1 means no top-p pass at all: both tokens stay
    assert vllm_support(torch.tensor([[0.0, -200.0]]), 2, 1.0, 0.0)[0].tolist() == [True, True]


def test_temperature_zero_counts_as_one():
    # temperature 0 (greedy) is not divided by: top-2 of P at T = 1 keeps 0.75 -> log -0.287682
    assert float(kept_log_mass(P.log()[None], 0.0, 2, 1.0, 0.0)) == pytest.approx(-0.287682, abs=1e-6)


SHARP = torch.tensor([0.97, 0.01, 0.01, 0.01])


@pytest.mark.parametrize(
    "k, top_p, min_p",
    [(2, 1.0, 0.0), (3, 1.0, 0.0), (1, 1.0, 0.0), (0, 0.8, 0.0), (0, 1.0, 0.35), (3, 0.8, 0.25), (0, 0.75, 0.0)],
)
def test_a_batch_of_positions_truncates_each_position_alone(k, top_p, min_p):
    # (N, T, V) = (2, 3, 4): every filter works over the vocabulary of one position, whatever else is in the
    # batch: the batch's answer at (n, t) equals that position's answer alone (a (1, V) call)
    rows = [[P, P.flip(0), SHARP], [torch.full((4,), 0.25), P[[3, 0, 2, 1]], SHARP.flip(0)]]
    logits = torch.stack([torch.stack(r) for r in rows]).log()  # (2, 3, 4)
    keep = vllm_support(logits, k, top_p, min_p)
    log_s = kept_log_mass(logits, 1.0, k, top_p, min_p)
    assert keep.shape == (2, 3, 4) and log_s.shape == (2, 3)
    for n in range(2):
        for t in range(3):
            alone = logits[n, t][None]
            assert torch.equal(keep[n, t], vllm_support(alone, k, top_p, min_p)[0])
            assert float(log_s[n, t]) == pytest.approx(float(kept_log_mass(alone, 1.0, k, top_p, min_p)), abs=1e-6)
    if (k, top_p, min_p) == (0, 1.0, 0.35):
        # by hand: P keeps (0.5, 0.25) -> log 0.75; SHARP keeps 0.97 alone -> log 0.97 = -0.030459
        assert float(log_s[0, 0]) == pytest.approx(-0.287682, abs=1e-6)
        assert float(log_s[0, 2]) == pytest.approx(-0.030459, abs=1e-6)


def test_no_truncation_gives_zeros_of_the_positions_shape_dtype_and_device():
    # (2, 3, 4) logits -> (2, 3) zeros, float32 (the logits are cast to float) whatever the default dtype
    logits = torch.zeros(2, 3, 4, dtype=torch.float64)
    out = kept_log_mass(logits, 1.0, 0, 1.0, 0.0)
    assert out.shape == (2, 3) and out.dtype == torch.float32 and not out.any()
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        assert kept_log_mass(logits, 1.0, 0, 1.0, 0.0).dtype == torch.float32
    finally:
        torch.set_default_dtype(before)
    # on the logits' device (the meta device stands in for a GPU here)
    assert kept_log_mass(torch.zeros(2, 4, device="meta"), 1.0, 0, 1.0, 0.0).device.type == "meta"
