import dataclasses
import json
import math
import re

import pytest
import torch

from reasonrl.loop.checkpoint import latest_checkpoint, list_checkpoints
from reasonrl.config.train import TrainConfig, apply_overrides, split_config
from reasonrl.models import load_model
from reasonrl.parts import PolicyLoss, Recipe
from reasonrl.recipes import get_recipe
from reasonrl.loop.run import train_run
from reasonrl.tasks import get_task
from reasonrl.loop.trainer import NonFiniteError, Trainer

SMALL = dict(
    steps=3,
    prompts_per_step=4,
    eval_every=2,
    eval_problems=6,
    final_eval_problems=6,
    final_eval_k=2,
    save_every=2,
    keep_last=2,
)


def small_recipe(name="grpo", **changes):
    return dataclasses.replace(get_recipe(name), group_size=4, **changes)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["grpo", "dr_grpo"])
def test_recipe_trains_end_to_end_and_writes_the_run_folder(name, tiny_dir, tmp_path):
    cfg = TrainConfig(model=str(tiny_dir), out=str(tmp_path / "run"), recipe=name, **SMALL)
    summary = train_run(cfg, small_recipe(name))
    run = tmp_path / "run"
    for f in ("config.yaml", "metrics.jsonl", "summary.json", "curves.png", "before.json", "final/config.json"):
        assert (run / f).exists(), f
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    for key in (
        "reward/mean",
        "reward/std",
        "accuracy",
        "frac_zero_var_groups",
        "length/mean",
        "length/max",
        "truncation_rate",
        "loss/clip_frac_low",
        "loss/clip_frac_high",
        "loss/approx_kl",
        "entropy/mean",
        "grad_norm",
        "lr",
        "tokens_per_s/step",
        "time/generate",
        "time/score",
        "time/update",
    ):
        assert all(math.isfinite(r[key]) for r in rows), key
    assert "eval/pass@1" in rows[1] and "eval/pass@1" not in rows[0]
    saved = json.loads((run / "summary.json").read_text())
    assert (
        set(saved["before"]) >= {"pass@1", "pass@2", "avg@2", "maj@2", "n_problems"}
        and saved["after"]["n_problems"] == 6
    )
    assert [s for s, _ in list_checkpoints(run)] == [2, 3]  # keep_last=2
    assert summary["steps"] == 3


# recipe -> (metric families it must log, keys it must log at every step); the families of the other
# parts must be absent (a part that is not in the recipe must not act)
FAMILIES = ("dynamic/", "edas/", "veto/", "stage/", "sage/", "corr/", "loss/kl", "steps/", "beam/")
LOSS_KEYS = (
    "loss/policy",
    "loss/ratio_mean",
    "loss/ratio_max",
    "loss/clip_frac_low",
    "loss/clip_frac_high",
    "loss/approx_kl",
    "update/rows_skipped_frac",
    "grad_norm",
)
DYNAMIC_KEYS = (
    "dynamic/rounds",
    "dynamic/prompts_generated",
    "dynamic/groups_kept",
    "dynamic/groups_dropped",
    "dynamic/batch_short",
    "reward/overlong/soft_frac",
    "reward/overlong/over_frac",
    "reward/overlong/mean",
)
OWN_METRICS = {
    "dapo": ({"dynamic/"}, DYNAMIC_KEYS),
    "edas": ({"dynamic/", "edas/"}, DYNAMIC_KEYS),
    "gspo": (set(), LOSS_KEYS),
    "rloo": (set(), LOSS_KEYS),
    "reinforce_pp": (set(), LOSS_KEYS),
    "cispo": (set(), LOSS_KEYS),
    "mu_grpo": (
        {"veto/", "stage/"},
        LOSS_KEYS + ("veto/frac_tokens", "veto/frac_rows", "stage/staleness", "stage/fresh"),
    ),
    "sage": (
        {"sage/", "loss/kl"},
        LOSS_KEYS + ("loss/kl", "loss/kl_term", "sage/q_mean", "sage/q_min", "sage/q_max", "sage/frac_shaped"),
    ),
    "corr_po": (
        {"corr/"},
        LOSS_KEYS + ("corr/mean", "corr/frac_defined", "corr/frac_negative", "corr/bonus_mean", "reward/corr_po/mean"),
    ),
}


def _filter_acted(rows):
    # DAPO's dynamic sampling: rounds of 4 prompts until 4 groups with varying accuracy are kept or
    # max_rounds=3 is spent; every group generated is kept or dropped; the overlong penalty is in [-1, 0]
    # and enters the total reward with weight 0.5
    for r in rows:
        rounds, kept = r["dynamic/rounds"], r["dynamic/groups_kept"]
        assert 1 <= rounds <= 3 and r["dynamic/prompts_generated"] == 4 * rounds
        assert kept + r["dynamic/groups_dropped"] == r["dynamic/prompts_generated"] and 0 <= kept <= 4
        assert (rounds == 3 or kept == 4) and r["dynamic/batch_short"] == float(kept < 4)
        assert -1.0 <= r["reward/overlong/mean"] <= 0.0 and r["reward/overlong/frac_none"] == 0.0
        assert 0.0 <= r["reward/overlong/soft_frac"] <= 1.0 and 0.0 <= r["reward/overlong/over_frac"] <= 1.0
        assert r["reward/mean"] == pytest.approx(r["reward/correct/mean"] + 0.5 * r["reward/overlong/mean"], abs=1e-6)
        if kept:  # a kept group's accuracy varies, so some advantage is non-zero and some row trains
            assert r["update/rows_skipped_frac"] < 1.0


def _edas_acted(rows):
    # the shaper runs on every non-empty batch, and only then: its metrics are logged iff a group was kept
    assert any(r["dynamic/groups_kept"] > 0 for r in rows), "no group kept: EDAS never ran, pick another seed"
    for r in rows:
        assert ("edas/diversity" in r) == (r["dynamic/groups_kept"] > 0)
        if "edas/diversity" in r:
            # kept groups have wrong rollouts (accuracy varies): distinct wrong answers / wrong rollouts in (0, 1];
            # lambda has mean 1 over the wrong rollouts, so its max is >= 1, and > 1 exactly when a group changed
            assert 0.0 < r["edas/diversity"] <= 1.0 and r["edas/lambda_max"] >= 1.0
            assert 0.0 <= r["edas/frac_groups_shaped"] <= 1.0
            assert (r["edas/frac_groups_shaped"] > 0) == (r["edas/lambda_max"] > 1.0)


def _optimiser_steps_acted(name, rows):
    # warm-up lr 5e-5 * (k + 1) / 5 after k scheduler steps: one optimiser step per batch gives 2e-5 at
    # step 1; GSPO's two minibatches give two steps, 3e-5
    assert rows[0]["lr"] == pytest.approx(3e-5 if name == "gspo" else 2e-5, rel=1e-9)


def _stages_acted(rows):
    # 3 steps in 4 stages: ceil(3 / 4) = 1 step per stage, so every step generates afresh (staleness 0); on
    # a fresh batch the ratio is 1, inside the relaxed band [0.5, 2], so the veto cannot trigger
    assert [r["stage/staleness"] for r in rows] == [0.0] * 3 and [r["stage/fresh"] for r in rows] == [1.0] * 3
    for r in rows:
        assert 0.0 <= r["veto/frac_rows"] <= 1.0 and r["veto/frac_tokens"] == 0.0


def _sage_acted(rows):
    # branch guide q = clamp(1 + 0.3 relu(H - 1.2), 0.6, 1.4) is in [1, 1.4]; the tiny model has tokens with
    # H > 1.2 nats, so some are shaped. At step 1 the policy is the reference: plain k3 between identical
    # policies is ~0 (as loss/approx_kl, behaviour vs current, shows), the positive KL there is the guide's q
    for r in rows:
        assert 1.0 <= r["sage/q_min"] <= r["sage/q_mean"] <= r["sage/q_max"] <= 1.4
        assert 0.0 <= r["sage/frac_shaped"] <= 1.0
    assert any(r["sage/frac_shaped"] > 0 and r["sage/q_max"] > 1.0 for r in rows)
    assert rows[0]["loss/kl"] > 1e-4 and rows[0]["loss/approx_kl"] < 1e-6


def _corr_acted(rows):
    # bonus = -0.1 * c (sign inversion), c = 0 where undefined: mean bonus = -0.1 * corr/mean * frac_defined;
    # it is the reward's mean and enters the total with weight 1
    for r in rows:
        assert -1.0 <= r["corr/mean"] <= 1.0 and 0.0 <= r["corr/frac_negative"] <= r["corr/frac_defined"] <= 1.0
        assert r["corr/bonus_mean"] == pytest.approx(-0.1 * r["corr/mean"] * r["corr/frac_defined"], abs=1e-6)
        assert r["reward/corr_po/mean"] == pytest.approx(r["corr/bonus_mean"], abs=1e-6)
        assert r["reward/mean"] == pytest.approx(r["reward/correct/mean"] + r["reward/corr_po/mean"], abs=1e-6)
    assert any(r["corr/frac_defined"] > 0 for r in rows)


@pytest.mark.slow
@pytest.mark.parametrize(
    "name", ["dapo", "gspo", "rloo", "reinforce_pp", "cispo", "edas", "mu_grpo", "sage", "corr_po"]
)
def test_every_objective_recipe_runs_end_to_end(name, tiny_dir, tmp_path):
    # one-digit sums: the tiny model gets some right, so groups vary and the parts have rows to act on
    cfg = TrainConfig(
        model=str(tiny_dir),
        out=str(tmp_path / "run"),
        recipe=name,
        task_options={"max_digits": 1},
        steps=3,
        prompts_per_step=4,
        eval_every=3,
        eval_problems=6,
        final_eval_problems=0,
        save_every=0,
    )
    train_run(cfg, small_recipe(name))
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    for r in rows:
        assert all(math.isfinite(v) for v in r.values() if isinstance(v, float)), r
        assert {"reward/mean", "accuracy", "entropy/mean", "lr", "time/update"} <= set(r)
    if name in ("dapo", "edas"):
        assert all("dynamic/groups_kept" in r and "reward/overlong/soft_frac" in r for r in rows)
    families, every_step = OWN_METRICS[name]
    for r in rows:
        assert set(every_step) <= set(r), (r["step"], set(every_step) - set(r))
    assert {f for f in FAMILIES for r in rows for k in r if k.startswith(f)} == families
    if name in ("dapo", "edas"):
        _filter_acted(rows)
    else:
        _optimiser_steps_acted(name, rows)
    acted = {"edas": _edas_acted, "mu_grpo": _stages_acted, "sage": _sage_acted, "corr_po": _corr_acted}.get(name)
    if acted is not None:
        acted(rows)


def _scripted_generate(engine, temperature: float, tilt: float):
    """A stand-in for ``engine.generate``: for prompt i ('a+b=?'), G=4 scripted completions, the worked
    sum with its answer line set to a+b+k for k in offsets[i % 2] (k = 0 right, k > 0 a wrong answer),
    then EOS. The behaviour log-probs are the model's own lowered by ``tilt`` on even and raised by it on
    odd token positions, so the token log-ratio l - l_old alternates +tilt, -tilt (a stale behaviour)."""
    from reasonrl.models.scoring import score_completions
    from reasonrl.rollout import Rollouts
    from reasonrl.tasks.arithmetic import solve

    offsets = ([0, 1, 1, 2], [0, 0, 1, 2])

    def generate(prompts, n, sp, generator=None, seeds=None):
        texts = []
        for i, prompt in enumerate(prompts):
            a, b = map(int, re.match(r"(\d+)\+(\d+)=\?", prompt).groups())
            demo, value = solve([a, b], ["+"])
            texts += [f"{demo.rsplit(chr(10) + 'A:', 1)[0]}\nA:{value + k}" for k in offsets[i % 2]]
        ids = [x + [engine.tok.eos_token_id] for x in engine.tok(texts, add_special_tokens=False)["input_ids"]]
        T = max(len(x) for x in ids)
        c_ids = torch.tensor([x + [engine.tok.pad_token_id] * (T - len(x)) for x in ids])  # (R, T)
        c_mask = torch.tensor([[1] * len(x) + [0] * (T - len(x)) for x in ids])  # (R, T)
        p_ids, p_mask = (x.repeat_interleave(n, 0) for x in engine.encode_prompts(prompts))
        with torch.no_grad():
            logp, ent = score_completions(engine.model, p_ids, p_mask, c_ids, c_mask, temperature=temperature)
        sign = 1.0 - 2.0 * (torch.arange(T) % 2)  # (T,) +1, -1, +1, ...
        return Rollouts(
            prompts=[p for p in prompts for _ in range(n)],
            texts=texts,
            prompt_ids=p_ids,
            prompt_mask=p_mask,
            completion_ids=c_ids,
            completion_mask=c_mask,
            logprobs=(logp - tilt * sign) * c_mask,
            finish_reasons=["eos"] * len(texts),
            n=n,
            entropies=ent,
        )

    return generate


def test_edas_composes_with_gspo_ratios(tiny_dir, tmp_path, monkeypatch):
    # parts compose: EDAS's shaper on GSPO's sequence-level ratio, two optimiser steps per batch
    from reasonrl.parts import objective as parts  # where PolicyLoss calls policy_loss
    from reasonrl.parts import EDAS

    gspo = get_recipe("gspo")
    recipe = dataclasses.replace(gspo, name="edas_gspo", group_size=4, shapers=(EDAS(gamma=2.0),))
    model, tok = load_model(tiny_dir)
    cfg = TrainConfig(model=str(tiny_dir), steps=3, prompts_per_step=2, eval_every=0, save_every=0)
    tr = Trainer(model, tok, get_task("arithmetic"), recipe, cfg, tmp_path)
    tr.engine.generate = _scripted_generate(tr.engine, recipe.sampling.temperature, tilt=0.5)
    made, calls, real_make, real_loss = [], [], tr.batches.make, parts.policy_loss
    tr.batches.make = lambda n: made.append(real_make(n)) or made[-1]

    def spy(logp, old_logp, adv, mask, **kw):
        out = real_loss(logp, old_logp, adv, mask, **kw)
        calls.append((logp.detach(), old_logp, adv, mask, kw["n_seqs"], float(out[0].detach()), out[1]))
        return out

    monkeypatch.setattr(parts, "policy_loss", spy)
    m = tr.train_step()
    # rewards [1, 0, 0, 0] and [1, 1, 0, 0]. GRPO (unbiased std): group 1 mean 0.25, std 0.5 -> A = 1.5, -0.5 x3;
    # group 2 mean 0.5, std sqrt(1/3) -> A = +-sqrt(3)/2. EDAS, gamma 2: group 1's wrong answers a+b+1 (twice)
    # and a+b+2 (once): n^2 = 4, 4, 1, mean 3, lambda = 4/3, 4/3, 1/3 -> -2/3, -2/3, -1/6; group 2's wrong
    # answers are distinct (n = 1, 1): lambda = 1, unchanged
    h = 3**0.5 / 2
    unshaped = torch.tensor([1.5, -0.5, -0.5, -0.5, h, h, -h, -h])
    shaped = torch.tensor([1.5, -2 / 3, -2 / 3, -1 / 6, h, h, -h, -h])
    batch = made[0]
    assert torch.allclose(recipe.advantage(batch.rewards).flatten(), unshaped, atol=1e-5)  # the estimator alone
    assert torch.allclose(batch.advantages, shaped, atol=1e-5)  # what the trainer trains on
    # diversity: (2/3 + 2/2) / 2 = 5/6; max lambda applied 4/3; one group of two changed
    assert (m["edas/diversity"], m["edas/lambda_max"], m["edas/frac_groups_shaped"]) == (
        pytest.approx(5 / 6),
        pytest.approx(4 / 3),
        0.5,
    )
    # the loss saw the shaped advantages: two minibatches of 4 rows, each row once
    assert len(calls) == 2 and m["update/rows_skipped_frac"] == 0.0
    seen = torch.cat([c[2].cpu() for c in calls])
    assert torch.allclose(seen.sort().values, shaped.sort().values, atol=1e-5)
    for i, (logp, old, adv, mask, n_seqs, loss, metrics) in enumerate(calls):
        # GSPO: s_i = exp(mean_t (l - l_old)), one ratio per response, clipped to [1 - 3e-4, 1 + 4e-4]
        u, L = (logp - old) * mask, mask.sum(-1)  # (N, T), (N,)
        s = torch.exp(u.sum(-1) / L)  # (N,)
        if i == 0:  # before any update: +-0.5 alternating sums to 0.5 on odd lengths -> s = exp(0.5 / L) or 1
            assert torch.allclose(s, torch.exp(0.5 * (L % 2) / L), atol=1e-4)
        S = torch.minimum(s * adv, s.clamp(1 - 3e-4, 1 + 4e-4) * adv)  # (N,), token mean of a constant
        assert loss == pytest.approx(float(-S.sum() / n_seqs), rel=1e-5, abs=1e-7)
        assert metrics["loss/ratio_max"] == pytest.approx(float(s.max()), rel=1e-5)
        assert metrics["loss/ratio_mean"] == pytest.approx(float((s * L).sum() / L.sum()), rel=1e-5)
        # a token ratio would show e^0.5 ~ 1.65 here; the sequence ratio stays within exp(0.5 / L)
        assert float(torch.exp(u.max())) > 1.6 and metrics["loss/ratio_max"] < 1.1


def _staged(tiny_dir, run_dir, steps=8, log=None):
    from reasonrl.parts import Stages

    model, tok = load_model(tiny_dir)
    # the spread shaper gives every row an advantage, so every step trains on every row
    recipe = dataclasses.replace(get_recipe("mu_grpo"), group_size=4, stages=Stages(count=4), shapers=(spread,))
    cfg = TrainConfig(model=str(tiny_dir), steps=steps, prompts_per_step=2, eval_every=0, save_every=0)
    tr = Trainer(model, tok, get_task("arithmetic"), recipe, cfg, run_dir, log=(log or (lambda m: None)))
    calls = []
    real = tr.engine.generate
    tr.engine.generate = lambda *a, **k: (calls.append(len(a[0])), real(*a, **k))[1]
    return tr, calls


@pytest.mark.slow
def test_stages_generate_once_per_stage_and_reuse_stored_behaviour_logprobs(tiny_dir, tmp_path):
    # Mu-GRPO spec: 8 steps in K=4 stages -> generation is called exactly 4 times, each time for the
    # 2 steps x 2 prompts of its stage; inside a stage the old log-probs are the stored ones, so the
    # second step (after one update) sees ratios != 1 while a fresh step sees ratio 1 (approx KL ~ 0)
    logged = []
    tr, calls = _staged(tiny_dir, tmp_path, log=logged.append)
    tr.train()
    assert calls == [4, 4, 4, 4]
    assert [m["stage/staleness"] for m in logged] == [0.0, 1.0] * 4
    fresh = [m["loss/approx_kl"] for m in logged if m["stage/staleness"] == 0]
    stale = [m["loss/approx_kl"] for m in logged if m["stage/staleness"] == 1]
    assert all(k < 1e-9 for k in fresh) and all(k > 1e-9 for k in stale)
    assert all("veto/frac_tokens" in m and m["update/rows_skipped_frac"] == 0 for m in logged)


@pytest.mark.slow
def test_a_stage_buffer_survives_a_resume(tiny_dir, tmp_path):
    straight, resumed = [], []
    tr, _ = _staged(tiny_dir, tmp_path / "a", log=straight.append)
    tr.train()
    tr, _ = _staged(tiny_dir, tmp_path / "b", log=resumed.append)
    for _ in range(3):  # stop in the middle of the second stage (steps 3-4)
        resumed.append(tr.train_step())
    tr.save()
    tr2, calls = _staged(tiny_dir, tmp_path / "b", log=resumed.append)
    assert tr2.resume() == 3
    tr2.train()
    assert calls == [4, 4]  # stages 3 and 4 only: stage 2's buffer came back from the checkpoint
    drop = lambda m: {k: v for k, v in m.items() if not k.startswith(("time/", "tokens_per_s"))}  # noqa: E731
    assert [drop(m) for m in resumed] == [drop(m) for m in straight]


def _grads_after_one_step(tiny_dir, micro: int, agg: str, skip: bool = True, zero_rows=()):
    model, tok = load_model(tiny_dir)
    recipe = small_recipe(loss=PolicyLoss(agg=agg), optim=dataclasses.replace(get_recipe("grpo").optim, lr=0.0))
    cfg = TrainConfig(
        model=str(tiny_dir), prompts_per_step=2, micro_batch_size=micro, seed=5, skip_zero_advantage_rows=skip
    )
    tr = Trainer(model, tok, get_task("arithmetic"), recipe, cfg, run_dir="/nonexistent")
    batch = tr.batches.make(cfg.prompts_per_step)
    batch.advantages = torch.linspace(-1.0, 1.0, len(batch.ro.texts))  # every row carries gradient
    batch.advantages[list(zero_rows)] = 0.0
    out = tr._optimizer_step(batch, torch.arange(len(batch.ro.texts)))
    return [p.grad.clone() for p in model.parameters()], out


@pytest.mark.slow
@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"])
def test_eight_micro_batches_of_one_equal_one_of_eight(tiny_dir, agg):
    # 2 prompts x 4 samples = 8 rows; the loss is normalised by the global token / sequence count, so
    # accumulating 8 micro-batches of 1 row must give the gradient of 1 micro-batch of 8 rows
    (one, _), (eight, _) = _grads_after_one_step(tiny_dir, 8, agg), _grads_after_one_step(tiny_dir, 1, agg)
    assert any(g.abs().max() > 1e-6 for g in one)
    for a, b in zip(one, eight):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_skipping_zero_advantage_rows_is_exact(tiny_dir, agg):
    # rows 0-3 (one whole group) get A = 0: skipping their forward/backward must not change the
    # gradient, because the normalisers still count their tokens and sequences
    (skipped, out), (full, out_full) = (
        _grads_after_one_step(tiny_dir, 3, agg, skip=s, zero_rows=range(4)) for s in (True, False)
    )
    assert out["update/rows_skipped_frac"] == 0.5 and out_full["update/rows_skipped_frac"] == 0.0
    for a, b in zip(skipped, full):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-5)


def test_config_typos_name_the_bad_key_and_the_valid_ones():
    with pytest.raises(ValueError, match=r"unknown config key 'step'.*did you mean 'steps'.*`reasonrl keys"):
        split_config({"step": 3})
    with pytest.raises(ValueError, match=r"unknown config key 'optim.lrr'.*did you mean 'optim.lr'"):
        split_config({"optim": {"lrr": 1e-5}})
    cfg, over = split_config({"steps": 3, "optim": {"lr": 1e-5}, "group_size": 4, "loss": {"clip_high": 0.28}})
    recipe = apply_overrides(get_recipe("grpo"), over)
    assert cfg.steps == 3 and recipe.optim.lr == 1e-5 and recipe.group_size == 4 and recipe.loss.clip_high == 0.28
    assert get_recipe("grpo").optim.lr == 5e-5  # the registered recipe is untouched


class NaNAt:
    """An auxiliary loss adding NaN on chosen update calls (to inject a non-finite loss)."""

    def __init__(self, calls):
        self.calls, self.n = set(calls), 0

    def __call__(self, ctx):
        self.n += 1
        bad = self.n in self.calls
        return (ctx.logp.sum() * (float("nan") if bad else 0.0)), {"loss/nan_injected": float(bad)}


def spread(adv, ctx):
    """A shaper giving every row a distinct non-zero advantage, so every finite step moves the weights."""
    return torch.linspace(-1.0, 1.0, adv.numel()).view_as(adv), {}  # a hook returns (value, metrics)


@pytest.mark.slow
def test_nonfinite_steps_are_skipped_counted_then_stop_with_a_checkpoint(tiny_dir, tmp_path):
    model, tok = load_model(tiny_dir)
    cfg = TrainConfig(model=str(tiny_dir), steps=8, prompts_per_step=2, eval_every=0, save_every=0, max_nonfinite=3)
    recipe = small_recipe(aux_losses=(NaNAt({2, 4, 5, 6}),), shapers=(spread,))
    logged = []
    tr = Trainer(model, tok, get_task("arithmetic"), recipe, cfg, tmp_path, log=logged.append)
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(NonFiniteError, match=r"3 steps in a row.*step 6.*saved to"):
        tr.train()
    # step 2 skipped alone (streak reset by step 3), then 4, 5, 6 in a row stop the run
    assert [m["nonfinite"] for m in logged] == [0.0, 1.0, 0.0, 1.0, 1.0]
    assert logged[-1]["nonfinite_total"] == 4 - 1  # the 6th step raised before being logged
    assert latest_checkpoint(tmp_path).name == "step-000006" and tr.nonfinite_total == 4
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))  # finite steps did update
    assert all(torch.isfinite(p).all() for p in model.parameters())


@pytest.mark.slow
def test_a_save_killed_midway_leaves_the_previous_checkpoint_loadable(tiny_dir, tmp_path, monkeypatch):
    from reasonrl.loop import checkpoint

    model, tok = load_model(tiny_dir)
    cfg = TrainConfig(model=str(tiny_dir), steps=2, prompts_per_step=2, eval_every=0, save_every=1)
    tr = Trainer(model, tok, get_task("arithmetic"), small_recipe(), cfg, tmp_path)
    tr.train_step()
    tr.save()  # step 1, complete
    tr.train_step()
    real_save = torch.save

    def dies(*args, **kwargs):
        raise KeyboardInterrupt("killed in the middle of writing the optimiser state")

    monkeypatch.setattr(checkpoint.torch, "save", dies)
    with pytest.raises(KeyboardInterrupt):
        tr.save()  # step 2: model written, then the process "dies"
    monkeypatch.setattr(checkpoint.torch, "save", real_save)
    assert (tmp_path / "checkpoints" / ".tmp-step-000002").exists()
    assert latest_checkpoint(tmp_path).name == "step-000001"
    fresh, _ = load_model(tiny_dir)
    tr2 = Trainer(fresh, tok, get_task("arithmetic"), small_recipe(), cfg, tmp_path)
    assert tr2.resume() == 1 and tr2.batches.items_drawn == 2
    tr2.train_step()
    tr2.save()  # a later save of the same step replaces the leftover
    assert latest_checkpoint(tmp_path).name == "step-000002"
    assert not (tmp_path / "checkpoints" / ".tmp-step-000002").exists()


def test_cli_train_rejects_a_typo_and_lists_recipes():
    from typer.testing import CliRunner

    from reasonrl.cli import app

    result = CliRunner().invoke(app, ["train", "optim.lrr=1e-5"])
    assert result.exit_code != 0 and "optim.lr" in str(result.exception)
    listed = json.loads(CliRunner().invoke(app, ["recipes", "--json"]).stdout)
    by_name = {r["name"]: r for r in listed}
    assert {"grpo", "dr_grpo"} <= set(by_name) and by_name["dr_grpo"]["loss"]["agg"] == "seq-mean-token-sum-norm"
    assert all(r["paper"] and r["inferred"] for r in listed)


def test_recipe_parts_are_plain_data():
    r = get_recipe("grpo")
    assert isinstance(r, Recipe) and r.kl.coef == 0.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.group_size = 3


def test_config_values_are_coerced_to_the_field_types():
    # YAML 1.1 reads "1e-4" as a string; the field type (float) decides
    cfg, over = split_config({"steps": "5", "optim": {"lr": "1e-4", "warmup_steps": "3"}, "loss": {"dual_clip": "3"}})
    assert cfg.steps == 5 and over == {"optim": {"lr": 1e-4, "warmup_steps": 3}, "loss": {"dual_clip": 3.0}}
    with pytest.raises(ValueError, match="'optim.lr' must be a number, got 'fast'"):
        split_config({"optim": {"lr": "fast"}})
    with pytest.raises(ValueError, match="'steps' must be an integer, got '2.5'"):
        split_config({"steps": "2.5"})


@pytest.mark.slow
def test_runs_of_different_seeds_are_evaluated_on_the_same_held_out_problems(tiny_dir, tmp_path):
    # compare's p-values assume one held-out set: the training seed must not pick the eval problems
    before = []
    for seed in (0, 1):
        cfg = TrainConfig(
            model=str(tiny_dir),
            out=str(tmp_path / f"s{seed}"),
            seed=seed,
            steps=0,
            final_eval_problems=8,
            final_eval_k=2,
            save_every=0,
            eval_every=0,
        )
        train_run(cfg, small_recipe())
        before.append(json.loads((tmp_path / f"s{seed}" / "before.json").read_text()))
    assert before[0] == before[1]
