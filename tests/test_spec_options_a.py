"""Spec options made reachable: SAGE's token/random guides in the trainer, CorR-PO's ``hidden`` norm
and ``correct_only``, and min-p sampling. Every expected number is worked out in a comment."""

import dataclasses
import math

import pytest
import torch

from reasonrl.config.train import TrainConfig, apply_overrides, dotted_to_nested, split_config
from reasonrl.errors import UserError
from reasonrl.eval.runner import EvalConfig, evaluate
from reasonrl.losses.anchors import guide_schedule, random_guide, sage_guide, token_guide
from reasonrl.losses.corr import hidden_grad_norm, hidden_grad_norm_from_probs
from reasonrl.models import load_model
from reasonrl.parts import KL, CorrBonus, Sampling, kl_term
from reasonrl.recipes import get_recipe
from reasonrl.rollout import HFEngine, Rollouts, SamplingParams, filter_top_k_top_p, sample_next
from reasonrl.rollout.sampling import next_hidden_grad_norm
from reasonrl.tasks import get_task
from reasonrl.loop.trainer import Trainer
from reasonrl.config.validate import check_part


def t(x):
    return torch.tensor(x, dtype=torch.float32)


# --- SAGE: the schedule ---------------------------------------------------------------------------


def test_guide_schedule_values_by_hand():
    # max_steps=16, n_cycles=8 -> cycles of 2 steps; anneal = (1 + cos(pi * (step % 2) / 2)) / 2 = 1, 0.5
    # token guide, upper (0.3, 0.25), lower (0.1, 0.1), start of cycle c = upper * 0.9^c:
    #   step 0: cycle 0, anneal 1   -> (0.3, 0.25)
    #   step 1: cycle 0, anneal 0.5 -> (0.1 + 0.2 * 0.5, 0.1 + 0.15 * 0.5) = (0.2, 0.175)
    #   step 2: cycle 1, anneal 1   -> (0.27, 0.225)
    #   step 5: cycle 2, anneal 0.5 -> (0.1 + (0.243 - 0.1) / 2, 0.1 + (0.2025 - 0.1) / 2) = (0.1715, 0.15125)
    #   step 15: cycle 7, anneal 0.5 -> 0.3 * 0.9^7 = 0.14348907: (0.1217445350, 0.1097871125)
    #   step 20: past the run, the cycle stays 7 (no more decay), anneal 1 -> (0.14348907, 0.119574225)
    expected = {
        0: (0.3, 0.25),
        1: (0.2, 0.175),
        2: (0.27, 0.225),
        5: (0.1715, 0.15125),
        15: (0.121744535, 0.1097871125),
        20: (0.14348907, 0.119574225),
    }
    for step, values in expected.items():
        assert guide_schedule("token", step, 16) == pytest.approx(values, abs=1e-9), step
    # random guide, upper (0.1, 0.15), lower (0, 0.05); step 3: cycle 1, anneal 0.5:
    # eps = 0.09 / 2 = 0.045, sigma = 0.05 + (0.135 - 0.05) / 2 = 0.0925
    assert guide_schedule("random", 3, 16) == pytest.approx((0.045, 0.0925), abs=1e-9)
    # own bounds, 2 cycles of 4 steps: step 6 -> cycle 1, anneal (1 + cos(pi/2)) / 2 = 0.5, start 0.5 * (1, 0.8)
    # -> (0 + 0.5 * 0.5, 0.2 + (0.4 - 0.2) * 0.5) = (0.25, 0.3)
    assert guide_schedule("token", 6, 8, n_cycles=2, decay=0.5, upper=(1.0, 0.8), lower=(0.0, 0.2)) == pytest.approx(
        (0.25, 0.3), abs=1e-9
    )
    with pytest.raises(ValueError, match="max_steps"):
        guide_schedule("token", 0, None)
    with pytest.raises(ValueError, match="token and random"):
        guide_schedule("branch", 0, 16)


# --- SAGE: the guides with fixed draws ---------------------------------------------------------

LOGP = t([[-1.0, -2.0, -3.0, -4.0, -9.0]])  # surprisals 1, 2, 3, 4 and a padding position
MASK = t([[1, 1, 1, 1, 0]])
NORMAL = t([[1.0, -2.0, 0.5, 2.0, 3.0]])
# minmax after the 5-95% quantile clip: quantiles of [1, 2, 3, 4] (linear) at 0.05 * 3 = 0.15 -> 1.15 and at
# 2.85 -> 3.85, so s = [1.15, 2, 3, 3.85] and w = (s - 1.15) / 2.7 = [0, 0.314815, 0.685185, 1].
# alpha 0.3, sigma 0.25: q = 1 + 0.3 w + 0.25 w z
#   t0: w 0 -> 1;  t1: 1 + 0.094444 - 0.157407 = 0.937037;  t2: 1 + 0.205556 + 0.085648 = 1.291204
#   t3: 1 + 0.3 + 0.5 = 1.8 -> clamped to 1.4;  padding -> 1 whatever its draw
TOKEN_Q = [1.0, 0.9370370, 1.2912037, 1.4, 1.0]


def test_token_guide_q_by_hand_with_a_fixed_noise_draw():
    q = token_guide(LOGP, MASK, alpha=0.3, sigma=0.25, normal=NORMAL)
    assert q[0].tolist() == pytest.approx(TOKEN_Q, abs=1e-6)
    # the same through sage_guide at step 0 (alpha, sigma = 0.3, 0.25) with the draws dict the trainer passes
    q = sage_guide("token", LOGP, LOGP, None, MASK, step=0, max_steps=16, draws={"normal": NORMAL})
    assert q[0].tolist() == pytest.approx(TOKEN_Q, abs=1e-6)
    with pytest.raises(ValueError, match="needs draws"):
        sage_guide("token", LOGP, LOGP, None, MASK, max_steps=16, draws={"uniform": NORMAL, "normal": NORMAL})
    with pytest.raises(ValueError, match="needs draws"):
        token_guide(LOGP, MASK, alpha=0.3, sigma=0.25, normal=NORMAL[:, :3])


def test_random_guide_q_by_hand_with_fixed_draws():
    # eps 0.1, sigma 0.15: tokens whose uniform draw is < 0.1 (t0, t2) get 1 + 0.15 z, the others 1
    # t0: 1 + 0.15 * 2 = 1.3; t2: 1 - 0.15 = 0.85; t4 is padding (its draw 0.0 would hit) -> 1
    draws = {"uniform": t([[0.05, 0.5, 0.01, 0.2, 0.0]]), "normal": t([[2.0, 1.0, -1.0, 3.0, 3.0]])}
    q = random_guide(MASK, eps=0.1, sigma=0.15, draws=draws)
    assert q[0].tolist() == pytest.approx([1.3, 1.0, 0.85, 1.0, 1.0], abs=1e-6)


def test_kl_term_with_the_token_guide_by_hand():
    # policy = reference, so the shaped k3 per token is q - ln q - 1:
    #   q 0.937037 -> 0.0020695;  q 1.291204 -> 0.0356288;  q 1.4 -> 0.0635278;  q 1 -> 0
    # seq-mean-token-mean over the 4 tokens: (0 + 0.0020695 + 0.0356288 + 0.0635278) / 4 = 0.0253065; x coef 2
    kl = KL(coef=2.0, guide="token")
    loss, m = kl_term(
        LOGP,
        LOGP,
        MASK,
        kl,
        step=0,
        max_steps=16,
        draws={"normal": NORMAL},
        agg="seq-mean-token-mean",
        n_tokens=4.0,
        n_seqs=1,
    )
    assert float(loss) == pytest.approx(2 * 0.0253065, abs=1e-6)
    assert m["sage/alpha"] == pytest.approx(0.3) and m["sage/sigma"] == pytest.approx(0.25)
    assert m["sage/frac_shaped"] == pytest.approx(3 / 4)  # t1, t2, t3 have q != 1
    # kl.source=ref takes the surprisal from the reference: a flat reference gives w = 0, so q = 1 and KL = 0
    loss, m = kl_term(
        LOGP,
        torch.full_like(LOGP, -1.0),
        MASK,
        dataclasses.replace(kl, source="ref"),
        step=0,
        max_steps=16,
        draws={"normal": NORMAL},
        agg="seq-mean-token-mean",
        n_tokens=4.0,
        n_seqs=1,
    )
    assert m["sage/q_mean"] == 1.0 and m["sage/frac_shaped"] == 0.0


def test_kl_part_options_validate_and_come_from_config():
    with pytest.raises(UserError, match="'kl.guide' = 'uniform'"):
        check_part(KL(guide="uniform"))
    with pytest.raises(UserError, match="'kl.norm' = 'median'"):
        check_part(KL(guide="token", norm="median"))
    with pytest.raises(UserError, match=r"'kl.schedule_upper' = \(0.3,\) .* a pair"):
        check_part(KL(guide="token", schedule_upper=(0.3,)))
    with pytest.raises(UserError, match="'kl.guide' = 'token' .* with kl.estimator=k3"):
        check_part(KL(guide="token", estimator="k1"))
    gen = torch.Generator().manual_seed(0)
    assert KL(coef=0.05, guide="branch").draws((2, 3), gen) == {} and KL(guide="token").draws((2, 3), gen) == {}
    assert set(KL(coef=0.05, guide="random").draws((2, 3), gen)) == {"uniform", "normal"}
    raw = dotted_to_nested(
        {
            "kl.guide": "token",
            "kl.schedule_upper": [0.2, 0.1],
            "kl.source": "ref",
            "sampling.min_p": 0.05,
            "rewards.corr_po.grad_norm": "hidden",
            "rewards.corr_po.correct_only": True,
        }
    )
    _, overrides = split_config(raw)
    sage = apply_overrides(get_recipe("sage"), {k: v for k, v in overrides.items() if k != "rewards"})
    assert sage.kl.guide == "token" and sage.kl.schedule_upper == (0.2, 0.1) and sage.kl.source == "ref"
    assert sage.sampling.min_p == 0.05
    corr = apply_overrides(get_recipe("corr_po"), {"rewards": overrides["rewards"]})
    assert corr.extra_rewards[0][0].grad_norm == "hidden" and corr.extra_rewards[0][0].correct_only is True


# --- SAGE in the trainer --------------------------------------------------------------------------


class _Killed(Exception):
    pass


def _sage_trainer(tiny_dir, run_dir, guide, log, micro=3, coef=0.05, lr=None):
    model, tok = load_model(tiny_dir)
    base = get_recipe("sage")
    optim = base.optim if lr is None else dataclasses.replace(base.optim, lr=lr)
    recipe = dataclasses.replace(
        base,
        group_size=4,
        kl=KL(coef=coef, guide=guide, n_cycles=2),
        optim=optim,
        sampling=dataclasses.replace(base.sampling, max_new_tokens=16),
    )
    cfg = TrainConfig(
        model=str(tiny_dir), steps=4, prompts_per_step=2, micro_batch_size=micro, eval_every=0, save_every=2, seed=3
    )
    return Trainer(model, tok, get_task("arithmetic"), recipe, cfg, run_dir, log=log)


# 4 optimiser steps in 2 cycles of 2: anneal 1, 0.5 within a cycle, the second cycle starting at 0.9 x upper
#   token (0.3, 0.25) -> (0.1, 0.1):  alpha 0.3, 0.2, 0.27, 0.1 + 0.17 / 2 = 0.185
#   random (0.1, 0.15) -> (0, 0.05):  eps 0.1, 0.05, 0.09, 0.045
SCHEDULE = {"token": ("sage/alpha", [0.3, 0.2, 0.27, 0.185]), "random": ("sage/eps", [0.1, 0.05, 0.09, 0.045])}


@pytest.mark.slow
@pytest.mark.parametrize("guide", ["token", "random"])
def test_stochastic_guides_follow_their_schedule_and_survive_a_kill_and_resume(tiny_dir, tmp_path, guide):
    straight, resumed = [], []
    _sage_trainer(tiny_dir, tmp_path / "a", guide, straight.append).train()

    def log_then_die(m):  # killed after step 3's update, before anything of it is saved
        if m["step"] == 3:
            raise _Killed
        resumed.append(m)

    with pytest.raises(_Killed):
        _sage_trainer(tiny_dir, tmp_path / "b", guide, log_then_die).train()
    tr = _sage_trainer(tiny_dir, tmp_path / "b", guide, resumed.append)
    assert tr.resume() == 2 and tr.optimizer_steps == 2
    tr.train()
    key, values = SCHEDULE[guide]
    assert [m[key] for m in straight] == pytest.approx(values, abs=1e-9)
    assert len({m["sage/q_mean"] for m in straight}) == 4 and len({m["loss/kl"] for m in straight}) == 4
    assert any(m["sage/frac_shaped"] > 0 for m in straight)
    drop = lambda m: {k: v for k, v in m.items() if not k.startswith(("time/", "tokens_per_s"))}  # noqa: E731
    assert [drop(m) for m in resumed] == [drop(m) for m in straight]


@pytest.mark.slow
def test_token_guide_noise_does_not_depend_on_the_micro_batch_split(tiny_dir):
    # the noise is drawn once per optimiser step for the whole batch, so 8 micro-batches of 1 row and 1 of
    # 8 see the same q; with lr 0 and policy = reference the KL gradient is 1 - q per token, nonzero
    def one_step(micro):
        tr = _sage_trainer(tiny_dir, "/nonexistent", "token", lambda m: None, micro=micro, coef=1.0, lr=0.0)
        batch = tr.batches.make(2)
        out = tr._optimizer_step(batch, torch.arange(len(batch.ro.texts)))
        return [p.grad.clone() for p in tr.model.parameters()], out

    (one, m1), (eight, m8) = one_step(8), one_step(1)
    assert any(g.abs().max() > 1e-6 for g in one)
    for a, b in zip(one, eight):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-5)
    assert m1["sage/q_mean"] == pytest.approx(m8["sage/q_mean"], abs=1e-6)


# --- CorR-PO: the hidden-state gradient norm -------------------------------------------------------

W_U = t([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])  # V = 3, d = 2
# logits [ln 2, 0, 0] -> p = [2, 1, 1] / 4 = [0.5, 0.25, 0.25]
#   y = 0: e_y - p = [0.5, -0.25, -0.25]; W^T (e_y - p) = 0.5 [1, 0] - 0.25 [0, 1] - 0.25 [1, 1] = [0.25, -0.5]
#          -> sqrt(0.0625 + 0.25) = 0.5590170
#   y = 1: e_y - p = [-0.5, 0.75, -0.25] -> [-0.5 - 0.25, 0.75 - 0.25] = [-0.75, 0.5] -> sqrt(0.8125) = 0.9013878
LOGITS = t([[math.log(2.0), 0.0, 0.0], [math.log(2.0), 0.0, 0.0]])  # (2, V): two positions


def test_hidden_grad_norm_by_hand_on_a_three_token_vocabulary():
    tokens = torch.tensor([0, 1])
    expected = [0.5590170, 0.9013878]
    assert hidden_grad_norm(LOGITS[None], tokens[None], W_U)[0].tolist() == pytest.approx(expected, abs=1e-6)
    assert hidden_grad_norm_from_probs(t([[0.5, 0.25, 0.25]] * 2), tokens, W_U).tolist() == pytest.approx(
        expected, abs=1e-6
    )
    # the sampler's version: the tempered distribution, temperature 1 when greedy
    assert next_hidden_grad_norm(LOGITS, tokens, 1.0, W_U).tolist() == pytest.approx(expected, abs=1e-6)
    assert next_hidden_grad_norm(LOGITS, tokens, 0.0, W_U).tolist() == pytest.approx(expected, abs=1e-6)
    # T = 2: logits / 2 = [ln 2 / 2, 0, 0] -> p = [sqrt 2, 1, 1] / (sqrt 2 + 2) = [0.414214, 0.292893, 0.292893]
    #   y = 0: W^T (e_y - p) = [0.585786 - 0.292893, -0.292893 - 0.292893] = 0.292893 [1, -2]
    #   -> 0.292893 sqrt 5 = 0.654929
    assert float(next_hidden_grad_norm(LOGITS[:1], tokens[:1], 2.0, W_U)) == pytest.approx(0.654929, abs=1e-6)
    # a bf16 unembedding (a GPU model's) multiplies in bf16 and stays within its ~3 significant digits
    bf = next_hidden_grad_norm(LOGITS, tokens, 1.0, W_U.bfloat16())
    assert bf.dtype == torch.float32 and bf.tolist() == pytest.approx(expected, rel=1e-2)


def _prompt_and_completion_logits(model, ro, r):
    """Logits (L, V) predicting row r's completion tokens, from one plain forward pass."""
    prompt = ro.prompt_ids[r][ro.prompt_mask[r].bool()]
    L = int(ro.lengths[r])
    ids = torch.cat([prompt, ro.completion_ids[r, :L]])[None]
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0]
    return logits[len(prompt) - 1 : len(prompt) - 1 + L]


def test_the_engine_records_the_hidden_norm_of_its_sampling_distribution(sharp_tiny):
    model, tok = sharp_tiny
    eng = HFEngine(model, tok)
    sp = SamplingParams(temperature=0.8, max_new_tokens=12, seed=1, hidden_grad_norm=True)
    ro = eng.generate(["3+4=", "12+9="], 2, sp)
    assert ro.hidden_grad_norm is not None and ro.hidden_grad_norm.shape == ro.completion_ids.shape
    assert float((ro.hidden_grad_norm * (1 - ro.completion_mask)).abs().sum()) == 0.0  # 0 on padding
    W = model.get_output_embeddings().weight
    for r in range(len(ro.texts)):
        L = int(ro.lengths[r])
        logits = _prompt_and_completion_logits(model, ro, r)
        want = hidden_grad_norm(logits[None], ro.completion_ids[r : r + 1, :L], W, temperature=0.8)[0]
        assert torch.allclose(ro.hidden_grad_norm[r, :L], want, atol=1e-4)
    assert eng.generate(["3+4="], 2, dataclasses.replace(sp, hidden_grad_norm=False)).hidden_grad_norm is None


# --- CorR-PO: correct_only and the hidden variant as a reward ---------------------------------------


def _spec_rollouts(n_rows=2, hidden=None):
    # the spec's three tokens (section 5 d): p = [.5,.5] y=0, [.9,.1] y=0, [.99,.01] y=1
    # H = 0.693147, 0.325083, 0.056002; g = 0.707107, 0.141421, 1.400071; Pearson c = -0.472797
    R = n_rows
    ones = torch.ones(R, 3, dtype=torch.long)
    return Rollouts(
        prompts=["p"] * R,
        texts=["t"] * R,
        prompt_ids=torch.ones(R, 1, dtype=torch.long),
        prompt_mask=torch.ones(R, 1, dtype=torch.long),
        completion_ids=ones,
        completion_mask=ones,
        logprobs=t([[math.log(0.5), math.log(0.9), math.log(0.01)]] * R),
        finish_reasons=["eos"] * R,
        n=R,
        entropies=t([[0.6931472, 0.3250830, 0.0560015]] * R),
        sum_p2=t([[0.5, 0.82, 0.9802]] * R),
        hidden_grad_norm=None if hidden is None else t([hidden] * R),
    )


def test_correct_only_pays_the_bonus_to_correct_rollouts_only():
    ro = _spec_rollouts()
    # bonus = -0.1 * c = +0.0472797 for both rows; correct_only zeroes the wrong row
    both = CorrBonus().score(["p"] * 2, ["t"] * 2, rollouts=ro, correct=[True, False])
    assert both.values == pytest.approx([0.0472797, 0.0472797], abs=1e-6)
    only = CorrBonus(correct_only=True).score(["p"] * 2, ["t"] * 2, rollouts=ro, correct=[True, False])
    assert only.values == pytest.approx([0.0472797, 0.0], abs=1e-6)
    assert only.metrics["corr/bonus_mean"] == pytest.approx(0.0472797 / 2, abs=1e-6)
    with pytest.raises(ValueError, match="'correct' column"):
        CorrBonus(correct_only=True).score(["p"] * 2, ["t"] * 2, rollouts=ro)


def test_hidden_variant_correlates_entropy_with_the_recorded_hidden_norm():
    # g = [3, 2, 1]: H - mean(H) = [0.335070, -0.032994, -0.302076], g - mean = [1, 0, -1]
    # c = (0.335070 + 0.302076) / sqrt(0.204610 * 2) = 0.996002 -> bonus -0.0996002
    res = CorrBonus(grad_norm="hidden").score(["p"] * 2, ["t"] * 2, rollouts=_spec_rollouts(hidden=[3.0, 2.0, 1.0]))
    assert res.values == pytest.approx([-0.0996002] * 2, abs=1e-6)
    with pytest.raises(ValueError, match="hidden_grad_norm=True"):
        CorrBonus(grad_norm="hidden").score(["p"] * 2, ["t"] * 2, rollouts=_spec_rollouts())
    with pytest.raises(ValueError, match="grad_norm"):
        CorrBonus(grad_norm="param")
    assert CorrBonus(grad_norm="hidden").sampling_needs == {"hidden_grad_norm": True}
    assert CorrBonus().sampling_needs == {}


@dataclasses.dataclass(frozen=True)
class SpyBonus(CorrBonus):
    """CorrBonus that keeps what it saw: (correct column, has hidden norm, bonus values) per call."""

    seen: list = dataclasses.field(default_factory=list, compare=False)

    def score(self, prompts, completions, **columns):
        res = super().score(prompts, completions, **columns)
        self.seen.append((list(columns["correct"]), columns["rollouts"].hidden_grad_norm is not None, res.values))
        return res


@pytest.mark.slow
@pytest.mark.parametrize("options", [{"grad_norm": "hidden"}, {"correct_only": True}], ids=["hidden", "correct_only"])
def test_corr_po_variants_train_two_steps_and_log_corr_metrics(tiny_dir, tmp_path, options):
    spy = SpyBonus(**options)
    recipe = dataclasses.replace(get_recipe("corr_po"), group_size=4, extra_rewards=((spy, 1.0),))
    model, tok = load_model(tiny_dir)
    cfg = TrainConfig(model=str(tiny_dir), steps=2, prompts_per_step=2, eval_every=0, save_every=0)
    logged = []
    tr = Trainer(model, tok, get_task("arithmetic"), recipe, cfg, tmp_path, log=logged.append)
    tr.train()
    assert len(logged) == 2
    for m in logged:
        for key in ("corr/mean", "corr/frac_defined", "corr/bonus_mean", "reward/corr_po/mean"):
            assert math.isfinite(m[key]), key
    assert len(spy.seen) == 2 and all(hidden == ("grad_norm" in options) for _, hidden, _ in spy.seen)
    if "correct_only" in options:
        pairs = [(c, v) for correct, _, values in spy.seen for c, v in zip(correct, values)]
        assert any(not c for c, _ in pairs)  # there were wrong rollouts to zero
        assert all(v == 0.0 for c, v in pairs if not c)
        assert len(pairs) == 2 * 2 * 4  # steps x prompts x group


# --- min-p sampling -------------------------------------------------------------------------------

# logits [2, 1, 0, -1]: p = e^l / 11.4752 = [0.643914, 0.236883, 0.087144, 0.032059]
# min_p 0.2: floor 0.2 * 0.643914 = 0.128783 -> tokens 0 and 1 survive, 2 and 3 are dropped
# (on the logits: keep l >= 2 + ln 0.2 = 0.390562). At T = 2 the logits are [1, 0.5, 0, -0.5] and the floor
# is 1 + ln 0.2 = -0.609438: all four survive.
MINP_LOGITS = t([[2.0, 1.0, 0.0, -1.0]])


def test_min_p_keeps_tokens_within_the_ratio_of_the_top_probability():
    keep = torch.isfinite(filter_top_k_top_p(MINP_LOGITS, min_p=0.2))
    assert keep[0].tolist() == [True, True, False, False]
    assert torch.isfinite(filter_top_k_top_p(MINP_LOGITS / 2.0, min_p=0.2)).all()
    assert torch.equal(filter_top_k_top_p(MINP_LOGITS, min_p=0.0), MINP_LOGITS)  # off
    # min_p = 1 keeps only the top token; with top_k = 1 as well nothing else changes
    assert torch.isfinite(filter_top_k_top_p(MINP_LOGITS, min_p=1.0))[0].tolist() == [True, False, False, False]
    assert torch.isfinite(filter_top_k_top_p(MINP_LOGITS, top_k=1, min_p=0.2))[0].tolist() == [
        True,
        False,
        False,
        False,
    ]
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError, match="invalid sampling"):
            SamplingParams(min_p=bad)


def test_seeded_min_p_sampling_never_draws_a_dropped_token():
    gen = torch.Generator().manual_seed(0)
    out = sample_next(MINP_LOGITS.repeat(4000, 1), 1.0, generator=gen, min_p=0.2)
    drawn = out.token.bincount(minlength=4).tolist()
    assert drawn[2] == drawn[3] == 0 and drawn[0] > 0 and drawn[1] > 0
    # renormalised over the survivors p0 = e^2 / (e^2 + e) = 0.731059 (4000 draws: sd 0.007)
    assert drawn[0] / 4000 == pytest.approx(0.731059, abs=0.03)
    # behaviour log-probs are those of the untruncated distribution: log 0.643914, log 0.236883
    full = MINP_LOGITS.log_softmax(-1)[0]
    assert torch.allclose(out.logprob, full[out.token], atol=1e-6)


def test_engine_batch_maker_and_eval_pass_min_p_through(sharp_tiny, tiny_dir, tmp_path):
    model, tok = sharp_tiny
    eng = HFEngine(model, tok)

    # T = 1.5 flattens the tiny model's distribution so the cut bites: every drawn token must have
    # log p >= log p_max + ln 0.3 under the tempered distribution; without min_p some token falls below
    def lowest_margin(min_p):
        sp = SamplingParams(temperature=1.5, min_p=min_p, max_new_tokens=12, seed=2)
        ro = eng.generate(["3+4=", "12+9=", "7+8="], 4, sp)
        margins = []
        for r in range(len(ro.texts)):
            L = int(ro.lengths[r])
            logp = (_prompt_and_completion_logits(model, ro, r) / 1.5).log_softmax(-1)  # (L, V)
            margins.append(logp.gather(-1, ro.completion_ids[r, :L, None])[:, 0] - logp.max(-1).values)
        return float(torch.cat(margins).min())

    assert lowest_margin(0.3) >= math.log(0.3) - 1e-4
    assert lowest_margin(0.0) < math.log(0.3)

    seen = []
    recipe = dataclasses.replace(
        get_recipe("corr_po"),
        group_size=2,
        sampling=Sampling(temperature=1.0, min_p=0.2),
        extra_rewards=((CorrBonus(grad_norm="hidden"), 1.0),),
    )
    m, t_ = load_model(tiny_dir)
    tr = Trainer(
        m,
        t_,
        get_task("arithmetic"),
        recipe,
        TrainConfig(model=str(tiny_dir), prompts_per_step=1, eval_every=0, save_every=0),
        tmp_path,
    )
    real = tr.engine.generate
    tr.engine.generate = lambda prompts, n, sp, generator=None, seeds=None: (
        seen.append(sp),
        real(prompts, n, sp, generator, seeds),
    )[1]
    tr.batches.make(1)
    assert seen[0].min_p == 0.2 and seen[0].hidden_grad_norm is True

    class Recording:
        max_rows = 512

        def generate(self, prompts, n, sp, seeds=None):
            seen.append(sp)
            return eng.generate(prompts, n, sp, seeds=seeds)

    evaluate(Recording(), get_task("arithmetic"), EvalConfig(n_problems=2, samples_per_problem=2, min_p=0.1))
    assert seen[-1].min_p == 0.1 and seen[-2].temperature == 0  # greedy pass first, then the sampled one
