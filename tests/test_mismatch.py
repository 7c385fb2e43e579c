"""The engine-mismatch correction (issue 43, reasonrl.losses.mismatch and rollout.correction), by hand.

Numbers worked out independently in the comments; no vLLM needed (the engine's own tests are in
tests/test_vllm_engine.py, run in the vLLM environment)."""

import math
from types import SimpleNamespace

import pytest
import torch

from reasonrl.losses.mismatch import engine_correction, kept_log_mass, mismatch_metrics, tis_weights, vllm_support
from reasonrl.rollout.correction import EngineCorrection
from reasonrl.config.sections import RolloutOpts

# learner - engine log-probs per token: 0, +1, -0.3 -> ratios 1, e = 2.718 (capped at 2), e^-0.3 = 0.740818
LEARNER = torch.tensor([[-1.0, -2.0, -0.5]])
ENGINE = torch.tensor([[-1.0, -3.0, -0.2]])


def test_tis_weights_cap_the_ratio_and_carry_no_gradient():
    learner = LEARNER.clone().requires_grad_()
    w = tis_weights(learner, ENGINE, cap=2.0)
    assert torch.allclose(w, torch.tensor([[1.0, 2.0, 0.740818]]), atol=1e-6)
    assert not w.requires_grad
    assert torch.allclose(tis_weights(LEARNER, ENGINE, cap=3.0), torch.tensor([[1.0, math.e, 0.740818]]), atol=1e-6)


def test_mismatch_metrics_over_the_masked_tokens():
    # tokens 1 and 2 seen: |delta| 0 and 1 -> mean 0.5, max 1; ratio e >= cap 2 on one of two -> 0.5;
    # weights 1 and 2 -> mean 1.5
    m = mismatch_metrics(LEARNER, ENGINE, torch.tensor([[1.0, 1.0, 0.0]]), cap=2.0)
    assert m == pytest.approx(
        {
            "mismatch/dlogp_abs_mean": 0.5,
            "mismatch/dlogp_abs_max": 1.0,
            "mismatch/capped_frac": 0.5,
            "mismatch/is_weight_mean": 1.5,
        }
    )
    assert set(mismatch_metrics(LEARNER, ENGINE, torch.ones(1, 3), cap=None)) == {
        "mismatch/dlogp_abs_mean",
        "mismatch/dlogp_abs_max",
    }
    assert mismatch_metrics(LEARNER, ENGINE, torch.zeros(1, 3), cap=2.0) == {}


def test_engine_correction_weights_the_advantages_and_takes_the_learners_old_policy():
    logp = LEARNER.clone().requires_grad_()
    mask = torch.ones(1, 3)
    old, adv, m = engine_correction("tis", 2.0, logp, ENGINE, None, torch.tensor([0.5]), mask)
    assert torch.equal(old, LEARNER) and not old.requires_grad  # the training forward's own, detached
    assert torch.allclose(adv, torch.tensor([[0.5, 1.0, 0.370409]]), atol=1e-6)  # 0.5 x (1, 2, 0.740818)
    assert m["mismatch/capped_frac"] == pytest.approx(1 / 3)
    # given learner log-probs (a batch's later optimiser step): those are the old policy and the weights' base
    given = torch.tensor([[-1.0, -3.0, -0.2]])  # equal to the engine's: every weight 1
    old, adv, _ = engine_correction("tis", 2.0, logp, ENGINE, given, torch.tensor([[0.5, -1.0, 2.0]]), mask)
    assert torch.equal(old, given) and torch.allclose(adv, torch.tensor([[0.5, -1.0, 2.0]]))
    old, adv, m = engine_correction("none", 2.0, logp, ENGINE, None, torch.tensor([0.5]), mask)
    assert torch.equal(old, LEARNER) and torch.equal(adv, torch.tensor([0.5])) and "mismatch/capped_frac" not in m
    with pytest.raises(ValueError, match="unknown importance-sampling correction 'clip'"):
        engine_correction("clip", 2.0, logp, ENGINE, None, torch.tensor([0.5]), mask)


# p = (0.5, 0.25, 0.15, 0.10) at temperature 1
P = torch.tensor([0.5, 0.25, 0.15, 0.10])


@pytest.mark.parametrize(
    "k, top_p, min_p, kept, log_s",
    [
        (0, 1.0, 0.0, [1, 1, 1, 1], 0.0),  # nothing truncated
        (2, 1.0, 0.0, [1, 1, 0, 0], -0.2876821),  # top-2: S = 0.75
        (0, 0.8, 0.0, [1, 1, 1, 0], -0.1053605),  # ascending cumsum .10 .25 .50 1: drop <= 0.2 -> only 0.10; S = 0.9
        (0, 1.0, 0.35, [1, 1, 0, 0], -0.2876821),  # p >= 0.35 x 0.5 = 0.175: S = 0.75
        # vLLM's order: min-p first (>= 0.125 keeps 0.5 .25 .15, S = 0.9), then top-p on the renormalised
        # (.1667 .2778 .5556 ascending, cumsum .1667 .4444 1): drop <= 0.2 -> 0.15 goes too; S = 0.75.
        # top-p on the full distribution first (the own engine's order) would keep three: S = 0.9
        (0, 0.8, 0.25, [1, 1, 0, 0], -0.2876821),
    ],
)
def test_kept_log_mass_replays_vllms_truncation(k, top_p, min_p, kept, log_s):
    logits = P.log()[None]
    assert vllm_support(logits, k, top_p, min_p)[0].long().tolist() == kept
    assert float(kept_log_mass(logits, 1.0, k, top_p, min_p)) == pytest.approx(log_s, abs=1e-6)


def test_kept_log_mass_is_of_the_tempered_distribution():
    # T = 2: p^(1/2) normalised = (0.37009, 0.26169, 0.20271, 0.16551); top-2 keeps 0.63178 -> log -0.459208
    assert float(kept_log_mass(P.log()[None], 2.0, 2, 1.0, 0.0)) == pytest.approx(-0.459208, abs=1e-5)


def test_the_own_engine_needs_no_correction_and_vllm_gets_the_runs_settings():
    own = EngineCorrection.of(RolloutOpts())
    logp, adv = LEARNER.clone().requires_grad_(), torch.tensor([1.0])
    old, out, m = own.apply(None, torch.tensor([0]), logp, ENGINE, adv, torch.ones(1, 3))
    assert old is ENGINE and out is adv and m == {}  # behaviour log-probs as they are
    assert EngineCorrection.of(RolloutOpts(engine="vllm", is_correction="none", is_cap=3.0)) == EngineCorrection(
        "none", 3.0
    )


def test_learner_logprobs_are_computed_once_and_only_for_several_optimiser_steps():
    from reasonrl.models import build_tiny
    from reasonrl.models.scoring import score_rows
    from reasonrl.rollout import HFEngine, SamplingParams

    model, tok = build_tiny("tiny", seed=0)
    ro = HFEngine(model, tok).generate(["1+2=", "30+4="], 2, SamplingParams(max_new_tokens=6), seeds=[1, 2])
    trainer = SimpleNamespace(
        model=model,
        recipe=SimpleNamespace(stages=None, sampling=SimpleNamespace(temperature=1.0)),
        cfg=SimpleNamespace(micro_batch_size=3),
    )
    fix = EngineCorrection("tis", 2.0)
    b = SimpleNamespace(ro=ro, learner_logp=None)
    fix.prepare(b, trainer, minibatches=1)
    assert b.learner_logp is None  # one optimiser step: the training forward gives them
    fix.prepare(b, trainer, minibatches=2)
    with torch.no_grad():
        want = score_rows(model, ro, torch.arange(4), temperature=1.0)[0]
    T = want.shape[1]
    assert torch.allclose(b.learner_logp[:, :T], want, atol=1e-5) and not b.learner_logp[:, T:].any()
    first = b.learner_logp
    fix.prepare(b, trainer, minibatches=2)
    assert b.learner_logp is first  # a stage's buffer: computed at its first step only
    # apply reads them for the rows of a micro-batch
    rows = torch.tensor([2, 3])
    old, _, _ = fix.apply(b, rows, torch.zeros(2, T), ro.logprobs[rows, :T], torch.ones(2), torch.ones(2, T))
    assert torch.equal(old, first[rows, :T])
