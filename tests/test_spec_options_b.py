"""Spec options made reachable: Mu-GRPO's mu epochs per stage and the veto band tied to the loss
clip (spec section 2), DAPO's refill-until-full (1.3), VSPO's uniform / annealed intensities and
prompt steering (11). Every expected number is worked out by hand in the comments."""

import dataclasses
import math

import pytest
import torch

from reasonrl.loop.batch import BatchMaker
from reasonrl.config.train import apply_overrides, dotted_to_nested, split_config
from reasonrl.models import build_tiny, load_model
from reasonrl.models.steering import annealed_alpha_max, generate_steered, steer, uniform_intensities
from reasonrl.parts import GroupFilter, Optim, Stages, Steering, Veto
from reasonrl.recipes import get_recipe
from reasonrl.rollout import HFEngine, SamplingParams
from reasonrl.tasks import get_task
from reasonrl.loop.trainer import Trainer
from reasonrl.errors import UserError
from reasonrl.config.validate import check_part

from helpers import text_rollouts


# ------------------------------------------------------------------ Mu-GRPO: the veto band
def _veto_inputs(rho, adv):
    rho = torch.tensor([rho])
    return torch.log(rho), torch.zeros_like(rho), torch.tensor([adv]), torch.ones_like(rho)


def test_veto_band_is_the_loss_clip_unless_set():
    # spec: A = -0.5, rho = [1.1, 0.9, 2.5, 1.0, 0.8], band [0.5, 2.0] -> trigger at index 2 -> [1,1,0,0,0].
    # The band comes from the loss's clip (clip_low 0.5, clip_high 1.0: [1-0.5, 1+1.0] = [0.5, 2.0]).
    logp, old, adv, mask = _veto_inputs([1.1, 0.9, 2.5, 1.0, 0.8], -0.5)
    veto, _ = Veto().mask(logp, old, adv, mask, loss_clip_low=0.5, loss_clip_high=1.0)
    assert veto.tolist() == [[1, 1, 0, 0, 0]]
    # loss clip_high 2.0 moves the band to [0.5, 3.0]: 2.5 is inside, nothing is vetoed
    veto, _ = Veto().mask(logp, old, adv, mask, loss_clip_low=0.5, loss_clip_high=2.0)
    assert veto.tolist() == [[1, 1, 1, 1, 1]]
    # an explicit veto clip_high 1.0 overrides the loss's 2.0: band [0.5, 2.0] again
    veto, _ = Veto(clip_high=1.0).mask(logp, old, adv, mask, loss_clip_low=0.5, loss_clip_high=2.0)
    assert veto.tolist() == [[1, 1, 0, 0, 0]]
    # spec low trigger: rho = [1.1, 0.4, 1.0], A = -1 -> [1,0,0] with band low 1-0.5 = 0.5;
    # a loss clip_low of 0.7 gives 1-0.7 = 0.3 < 0.4: no trigger
    logp, old, adv, mask = _veto_inputs([1.1, 0.4, 1.0], -1.0)
    assert Veto().mask(logp, old, adv, mask, loss_clip_low=0.5, loss_clip_high=1.0)[0].tolist() == [[1, 0, 0]]
    assert Veto().mask(logp, old, adv, mask, loss_clip_low=0.7, loss_clip_high=1.0)[0].tolist() == [[1, 1, 1]]
    assert Veto().band(0.5, 1.0) == (0.5, 1.0) and Veto(clip_low=0.3).band(0.5, 1.0) == (0.3, 1.0)


def test_loss_clip_high_config_key_moves_the_veto_band():
    # through the policy loss and the config: mu_grpo's loss clip is [0.5, 1.0], so the spec row has
    # 3 of 5 tokens vetoed (veto/frac_tokens 0.6); loss.clip_high=2.0 widens the band to [0.5, 3.0]
    # (0.0 vetoed), unless loss.veto.clip_high=1.0 pins it back (0.6 again)
    logp, old, adv, mask = _veto_inputs([1.1, 0.9, 2.5, 1.0, 0.8], -0.5)

    def frac(overrides):
        _, over = split_config(dotted_to_nested(overrides))
        loss = apply_overrides(get_recipe("mu_grpo"), over).loss
        return loss(logp, old, adv, mask, n_tokens=5.0, n_seqs=1, norm_len=5)[1]["veto/frac_tokens"]

    assert frac({}) == pytest.approx(0.6)
    assert frac({"loss.clip_high": 2.0}) == 0.0
    assert frac({"loss.clip_high": 2.0, "loss.veto.clip_high": 1.0}) == pytest.approx(0.6)


# ------------------------------------------------------------------ Mu-GRPO: mu epochs per stage
class _Items:
    """A stand-in buffer: next_batch only reads how many groups a stage holds."""

    def __init__(self, n):
        self.items = list(range(n))


def test_stage_minibatches_run_mu_epochs_over_the_buffer(tmp_path):
    # 3 steps, 1 stage (S = 3), 1 prompt per step -> a buffer of 3 groups; mu = 2, minibatches = 1:
    # each epoch is 3 minibatches of one group, 2 minibatch steps per logged step, epoch after epoch:
    #   step 1: e0 mb0, e0 mb1   step 2: e0 mb2, e1 mb0 (crosses the epoch)   step 3: e1 mb1, e1 mb2
    # staleness of minibatch j is j: step means (0+1)/2, (2+3)/2, (4+5)/2 = 0.5, 2.5, 4.5; max 1, 3, 5
    model, tok = build_tiny("tiny", seed=0)
    recipe = dataclasses.replace(
        get_recipe("mu_grpo"), group_size=2, stages=Stages(count=1), optim=Optim(mu=2, minibatches=1)
    )
    from reasonrl.config.train import TrainConfig

    tr = Trainer(model, tok, get_task("arithmetic"), recipe, TrainConfig(steps=3, prompts_per_step=1), tmp_path)
    made = []
    tr.batches.make = lambda n: (made.append(n), _Items(n))[1]
    groups, info = [], []
    for _step in range(3):
        _, minibatches, i = tr.next_batch()
        tr.step += 1
        assert len(minibatches) == 2 and all(len(mb) == 2 for mb in minibatches)  # 1 group x G = 2 rows each
        groups += [int(mb[0]) // 2 for mb in minibatches]
        info.append((i["stage/staleness"], i["stage/staleness_max"]))
    assert made == [3]  # one generation for the stage
    assert sorted(groups[:3]) == [0, 1, 2] and sorted(groups[3:]) == [0, 1, 2]  # each epoch covers the buffer once
    assert info == [(0.5, 1.0), (2.5, 3.0), (4.5, 5.0)]


def test_a_minibatch_without_rows_advances_the_schedule_without_a_step(tmp_path):
    # a filter can leave a stage fewer groups than minibatches: each empty minibatch still uses its
    # slot of the LR schedule (3 empty minibatches: the scheduler moves 0 -> 3) but no optimiser step
    import warnings

    from reasonrl.config.train import TrainConfig

    model, tok = build_tiny("tiny", seed=0)
    tr = Trainer(model, tok, get_task("arithmetic"), get_recipe("grpo"), TrainConfig(steps=2), tmp_path)
    steps = []
    tr.opt.register_step_pre_hook(lambda opt, args, kwargs: steps.append(1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # and without PyTorch's scheduler-order warning
        out = tr.update(None, [torch.zeros(0, dtype=torch.long)] * 3)
    assert tr.sched.last_epoch == 3 and steps == [] and out == {"nonfinite": 0.0}


def _mu2(tiny_dir, run_dir, steps, count, lr_log=None, log=None):
    from reasonrl.config.train import TrainConfig

    def spread(adv, ctx):  # every row a distinct non-zero advantage: every minibatch moves the weights
        return torch.linspace(-1.0, 1.0, adv.numel()).view_as(adv), {}  # a hook returns (value, metrics)

    model, tok = load_model(tiny_dir)
    recipe = dataclasses.replace(
        get_recipe("mu_grpo"),
        group_size=4,
        stages=Stages(count=count),
        shapers=(spread,),
        optim=Optim(lr=1e-4, warmup_steps=0, min_lr_ratio=0.1, mu=2),
    )
    cfg = TrainConfig(model=str(tiny_dir), steps=steps, prompts_per_step=2, eval_every=0, save_every=0)
    tr = Trainer(model, tok, get_task("arithmetic"), recipe, cfg, run_dir, log=log or (lambda m: None))
    calls = []
    real = tr.engine.generate
    tr.engine.generate = lambda *a, **k: (calls.append(len(a[0])), real(*a, **k))[1]
    if lr_log is not None:  # the learning rate each optimiser step uses
        tr.opt.register_step_pre_hook(lambda opt, args, kwargs: lr_log.append(opt.param_groups[0]["lr"]))
    return tr, calls


def test_mu_two_stages_generate_once_each_and_the_lr_schedule_ends_at_the_last_optimiser_step(tiny_dir, tmp_path):
    # 4 steps in 2 stages of 2 steps, 2 prompts per step: generation twice, 4 prompts each.
    # mu = 2 -> 2 optimiser steps per logged step: 8 in all (mu = 1 would take 4).
    # Schedule total = steps x mu x minibatches = 8, no warmup, cosine to 0.1: the LR of optimiser step
    # s is 0.1 + 0.45 (1 + cos(pi s / 8)):
    #   s=0: 1.0; s=1: 0.45*(1+0.9238795)+0.1 = 0.9657458; s=2: 0.45*1.7071068+0.1 = 0.8681981
    #   s=3: 0.45*1.3826834+0.1 = 0.7222075; s=4: 0.55; s=5: 0.3777925; s=6: 0.2318019; s=7: 0.1342542
    # and after the 8th step the schedule sits at exactly 0.1 (the last logged lr).
    lrs, logged = [], []
    tr, calls = _mu2(tiny_dir, tmp_path, steps=4, count=2, lr_log=lrs, log=logged.append)
    tr.train()
    assert calls == [4, 4]
    expected = [1.0, 0.9657458, 0.8681981, 0.7222075, 0.55, 0.3777925, 0.2318019, 0.1342542]
    assert len(lrs) == 8
    assert [lr / 1e-4 for lr in lrs] == pytest.approx(expected, abs=1e-6)
    assert logged[-1]["lr"] == pytest.approx(1e-5, rel=1e-9)  # min_lr_ratio x lr, reached at the last step
    # stages of S = 2 steps, 2 minibatch steps per step: staleness (0+1)/2, (2+3)/2 in each stage
    assert [m["stage/staleness"] for m in logged] == [0.5, 2.5, 0.5, 2.5]
    assert [m["stage/staleness_max"] for m in logged] == [1.0, 3.0, 1.0, 3.0]


def test_mu_two_stage_resumes_bit_exactly_in_the_middle_of_an_epoch(tiny_dir, tmp_path):
    # one stage of 3 steps, mu = 2: epoch 0 = minibatches 0-2, step 1 runs 0 and 1, so a save after
    # step 1 stops in the middle of epoch 0; the resumed run must log exactly what the straight one did
    straight, resumed = [], []
    tr, _ = _mu2(tiny_dir, tmp_path / "a", steps=3, count=1, log=straight.append)
    tr.train()
    tr, _ = _mu2(tiny_dir, tmp_path / "b", steps=3, count=1, log=resumed.append)
    resumed.append(tr.train_step())
    tr.save()
    tr2, calls = _mu2(tiny_dir, tmp_path / "b", steps=3, count=1, log=resumed.append)
    assert tr2.resume() == 1 and tr2.stage["pos"] == 1 and tuple(tr2.stage["order"].shape) == (2, 6)
    tr2.train()
    assert calls == []  # the stage's buffer came back from the checkpoint
    drop = lambda m: {k: v for k, v in m.items() if not k.startswith(("time/", "tokens_per_s"))}  # noqa: E731
    assert [drop(m) for m in resumed] == [drop(m) for m in straight]


# ------------------------------------------------------------------ DAPO: refill until full
class ScriptedEngine:
    """Round r answers prompt i of its call with a mixed group ([right, wrong, ...]) if
    ``script[r][i]``, else with a group all wrong (the filter drops it)."""

    device, model = "cpu", None  # the Generator surface the batch maker reads (no model behind this fake)

    class tok:
        pad_token_id = 0

    def __init__(self, script):
        self.script, self.calls = script, 0

    def generate(self, prompts, n, sampling, generator=None, seeds=None):
        mixed = self.script[min(self.calls, len(self.script) - 1)]
        self.calls += 1
        texts = []
        for i, p in enumerate(prompts):
            answer = int(eval(p.split("=")[0]))  # noqa: S307 - the task's own expressions
            texts += [f"A:{answer if mixed[i] and j % 2 == 0 else answer + 1}" for j in range(n)]
        return text_rollouts(prompts, texts, n)


def _refill_maker(script, **filt):
    recipe = dataclasses.replace(get_recipe("dapo"), group_size=4, extra_rewards=(), group_filter=GroupFilter(**filt))
    task = get_task("arithmetic")
    return BatchMaker(task, recipe, ScriptedEngine(script), budget=20, seed=0), task


def test_refill_until_full_keeps_drawing_rounds():
    # 2 groups wanted; round 1 keeps none (prompts 0, 1), round 2 keeps prompt 2 (of 2, 3), round 3
    # keeps prompt 5 (of 4, 5): 3 rounds, 6 prompts generated, 2 kept, 4 dropped, full
    bm, task = _refill_maker([[False, False], [True, False], [False, True]], max_rounds=None)
    batch = bm.make(2)
    stream = task.iter_items("train", 0)
    drawn = [next(stream) for _ in range(6)]
    assert bm.engine.calls == 3 and [it.prompt for it in batch.items] == [drawn[2].prompt, drawn[5].prompt]
    m = batch.metrics
    assert (
        m["dynamic/rounds"],
        m["dynamic/prompts_generated"],
        m["dynamic/groups_kept"],
        m["dynamic/groups_dropped"],
        m["dynamic/batch_short"],
        m["dynamic/short_batches_total"],
    ) == (3, 6, 2, 4, 0.0, 0.0)
    # the same script with the default 3-round bound is also full; with 2 rounds it comes out short
    bm, _ = _refill_maker([[False, False], [True, False], [False, True]], max_rounds=2)
    assert len(bm.make(2).items) == 1 and bm.short_batches == 1


def test_refill_until_full_stops_at_the_cap_with_an_error_naming_the_counts():
    # nothing is ever kept: after max_rounds_cap = 5 rounds of 2 prompts (10 generated) the maker
    # raises instead of returning an empty batch
    bm, _ = _refill_maker([[False, False]], max_rounds=None, max_rounds_cap=5)
    with pytest.raises(
        RuntimeError,
        match=r"kept 0 of 2 groups after 5 rounds.*max_rounds_cap=5 \(10 prompts "
        r"generated.*Raise group_filter.max_rounds_cap",
    ):
        bm.make(2)
    assert bm.engine.calls == 5


def test_short_batches_are_counted_and_the_count_survives_a_resume(tmp_path):
    # max_rounds = 1 and a script keeping 1 of 2 groups per round: every batch is short;
    # after three batches the running count is 1, 2, 3 (the per-batch flag stays 1.0)
    bm, _ = _refill_maker([[True, False]], max_rounds=1)
    ms = [bm.make(2).metrics for _ in range(3)]
    assert [m["dynamic/short_batches_total"] for m in ms] == [1.0, 2.0, 3.0]
    assert all(m["dynamic/batch_short"] == 1.0 for m in ms)
    # the count is trainer state: saved with a checkpoint and restored by resume
    from reasonrl.config.train import TrainConfig

    model, tok = build_tiny("tiny", seed=0)
    cfg = TrainConfig(steps=1, prompts_per_step=1)
    tr = Trainer(model, tok, get_task("arithmetic"), get_recipe("dapo"), cfg, tmp_path)
    tr.batches.short_batches = 3
    tr.save()
    tr2 = Trainer(model, tok, get_task("arithmetic"), get_recipe("dapo"), cfg, tmp_path)
    assert tr2.batches.short_batches == 0 and tr2.resume() == 0 and tr2.batches.short_batches == 3


def test_config_accepts_a_null_max_rounds():
    from reasonrl.commands.common import parse_value

    _, over = split_config(dotted_to_nested({"group_filter.max_rounds": parse_value("null")}))
    gf = apply_overrides(get_recipe("dapo"), over).group_filter
    assert gf.max_rounds is None and gf.round_limit == 100 and gf.metric == "accuracy"
    assert GroupFilter(max_rounds=4).round_limit == 4
    with pytest.raises(UserError, match="'group_filter.max_rounds_cap' = 0 is out of range: must be >= 1"):
        check_part(GroupFilter(max_rounds=None, max_rounds_cap=0))


# ------------------------------------------------------------------ VSPO: intensities and prompt steering
def test_annealed_alpha_max_by_hand():
    # alpha_max 4 over 5 steps, p = step / 4:
    #   linear 4 (1 - p): 4, 3, 2, 1, 0
    #   cosine 2 (1 + cos(pi p)): 4, 2 (1 + 0.7071068) = 3.4142136, 2, 2 (1 - 0.7071068) = 0.5857864, 0
    assert [annealed_alpha_max(4.0, "none", s, 5) for s in range(5)] == [4.0] * 5
    assert [annealed_alpha_max(4.0, "linear", s, 5) for s in range(5)] == [4.0, 3.0, 2.0, 1.0, 0.0]
    assert [annealed_alpha_max(4.0, "cosine", s, 5) for s in range(5)] == pytest.approx(
        [4.0, 3.4142136, 2.0, 0.5857864, 0.0], abs=1e-6
    )
    with pytest.raises(UserError, match="'steering.anneal' = 'exp'"):
        check_part(Steering(positive=("a",), negative=("b",), anneal="exp"))


def test_uniform_intensities_are_a_seeded_draw_with_sample_zero_unsteered():
    # sample 0 at 0, the other G-1 = 3 are alpha_max x U[0, 1) from a generator seeded with the seed
    u = torch.rand(3, generator=torch.Generator().manual_seed(11), dtype=torch.float64)
    alphas = uniform_intensities(4, 2.5, seed=11)
    assert alphas[0] == 0.0 and alphas[1:] == (2.5 * u).tolist()
    assert uniform_intensities(4, 2.5, seed=11) == alphas and uniform_intensities(4, 2.5, seed=12) != alphas
    assert all(0.0 <= a < 2.5 for a in alphas)


def _steer_maker(model, tok, **steering):
    recipe = dataclasses.replace(
        get_recipe("grpo"),
        group_size=4,
        sampling=dataclasses.replace(get_recipe("grpo").sampling, max_new_tokens=6),
        steering=Steering(layer=0, positive=("1+1=?\n",), negative=("999+999=?\n",), **steering),
    )
    engine = HFEngine(model, tok)
    return BatchMaker(get_task("arithmetic"), recipe, engine, budget=6, seed=3)


def test_batch_maker_anneals_and_seeds_the_intensities_by_the_task_position(sharp_tiny):
    model, tok = sharp_tiny
    # linear anneal of alpha_max 3 over 4 steps at step 2: 3 (1 - 2/3) = 1; grid of G = 4: [0, 1/3, 2/3, 1]
    bm = _steer_maker(model, tok, alpha_max=3.0, anneal="linear")
    bm.set_progress(2, 4)
    _, ro, m = bm.rollout(2)
    assert ro.extras["alpha"].tolist() == pytest.approx([0.0, 1 / 3, 2 / 3, 1.0] * 2)
    assert m["steer/alpha_max"] == pytest.approx(1.0)  # the strategy's generate metrics
    # uniform draws are seeded by the task position: a maker moved to the same position draws the same
    first = _steer_maker(model, tok, alpha_max=3.0, alphas="uniform")
    first.rollout(2)
    _, a, _ = first.rollout(2)  # at items_drawn = 4
    other = _steer_maker(model, tok, alpha_max=3.0, alphas="uniform")
    other.seek(2)
    _, b, _ = other.rollout(2)
    assert torch.equal(a.extras["alpha"], b.extras["alpha"]) and float(a.extras["alpha"][0]) == 0.0
    assert a.extras["alpha"].tolist()[:4] == pytest.approx(uniform_intensities(4, 3.0, _position_seed(3, 4)))


def _position_seed(seed, drawn):
    from reasonrl.tasks.base import stable_seed

    return stable_seed(seed, drawn, "alphas")


def test_trainer_passes_its_progress_to_the_anneal(tiny_dir, tmp_path):
    # alpha_max 2 annealed linearly over 3 steps: 2 (1 - s/2) = 2, 1, 0 at steps 0, 1, 2
    from reasonrl.config.train import TrainConfig

    model, tok = load_model(tiny_dir)
    grpo = get_recipe("grpo")
    recipe = dataclasses.replace(
        grpo,
        group_size=4,
        sampling=dataclasses.replace(grpo.sampling, max_new_tokens=8),
        steering=Steering(layer=0, alpha_max=2.0, anneal="linear", positive=("1+1=?\n",), negative=("999+999=?\n",)),
    )
    logged = []
    cfg = TrainConfig(model=str(tiny_dir), steps=3, prompts_per_step=2, eval_every=0, save_every=0)
    Trainer(model, tok, get_task("arithmetic"), recipe, cfg, tmp_path, log=logged.append).train()
    assert [m["steer/alpha_max"] for m in logged] == [2.0, 1.0, 0.0]


def _layer1_input(model, ids, **steering):
    """The hidden state entering decoder layer 1 (the output of layer 0, hook included): (b, S, H)."""
    seen = []
    pre = model.model.layers[1].register_forward_pre_hook(
        lambda mod, args, kwargs: seen.append((args[0] if args else kwargs["hidden_states"]).clone()), with_kwargs=True
    )
    try:
        with torch.no_grad():
            if steering:
                with steer(model, 0, **steering):
                    model(input_ids=ids)
            else:
                model(input_ids=ids)
    finally:
        pre.remove()
    return seen[0]


def test_steer_prompt_moves_prompt_positions_by_alpha_scale_unit(sharp_tiny):
    # unit e_0, scale 0.5, alphas [0, 2] over two rows of the same prompt (a prefill: 6 positions):
    # steer_prompt=True adds 2 x 0.5 x e_0 = +1.0 on coordinate 0 at every position of row 1, and 0 to
    # row 0; steer_prompt=False leaves the prefill exactly as it was
    model, tok = sharp_tiny
    ids = tok(["12+3=?\n"], return_tensors="pt")["input_ids"].repeat(2, 1)
    H = model.config.hidden_size
    unit = torch.zeros(H)
    unit[0] = 1.0
    plain = _layer1_input(model, ids)
    on = _layer1_input(model, ids, unit=unit, scale=0.5, alphas=[0.0, 2.0], steer_prompt=True)
    off = _layer1_input(model, ids, unit=unit, scale=0.5, alphas=[0.0, 2.0], steer_prompt=False)
    delta = torch.zeros(ids.shape[1], H)
    delta[:, 0] = 1.0
    assert ids.shape[1] > 1 and torch.equal(off, plain) and torch.equal(on[0], plain[0])
    assert torch.allclose(on[1] - plain[1], delta, atol=1e-6)


def test_steer_prompt_generation_keeps_whole_groups(sharp_tiny):
    # one prefill per sample: prompts repeated G times, chunks of whole groups even when max_rows is
    # not a multiple of G; alphas [0, 0] change nothing, so greedy texts equal plain generation
    model, tok = sharp_tiny
    prompts, sp = ["12+3=?\n", "5+539=?\n"], SamplingParams(temperature=0, max_new_tokens=8)
    engine = HFEngine(model, tok, max_rows=3, compact_below=0.5)  # not the CPU default (1.0): restoring shows
    unit = torch.zeros(model.config.hidden_size)
    unit[0] = 1.0
    plain = engine.generate(prompts, 2, sp)
    ro = generate_steered(engine, prompts, sp, unit=unit, scale=1.0, layer=0, alphas=[0.0, 0.0], steer_prompt=True)
    assert ro.texts == plain.texts and ro.n == 2 and ro.prompts == plain.prompts
    assert engine.max_rows == 3 and engine.compact_below == 0.5  # restored (the call ran with 0)
    ro = generate_steered(engine, prompts, sp, unit=unit, scale=1.0, layer=0, alphas=[0.0, 5.0], steer_prompt=True)
    assert ro.extras["alpha"].tolist() == [0.0, 5.0, 0.0, 5.0] and ro.texts[0] == plain.texts[0]
    assert math.isfinite(float(ro.logprobs.sum()))
