"""Ray rollout workers (rollout.workers=N): the same rollouts and metrics as the in-process engine,
weights pushed and versioned, a dead worker reported with a checkpoint left behind, async staleness.

Tests marked slow start Ray actors (one local Ray instance for the module)."""

import dataclasses
import json

import pytest
import torch

from reasonrl.config.train import Lora, RolloutOpts, TrainConfig
from reasonrl.dist.ray_rollout import RayEngine, WorkerError, shares
from reasonrl.errors import UserError
from reasonrl.models import load_model
from reasonrl.models.lora import apply_lora
from reasonrl.recipes import get_recipe
from reasonrl.rollout import HFEngine, SamplingParams
from reasonrl.loop.run import train_run
from reasonrl.tasks import get_task
from reasonrl.tasks.base import take_items
from reasonrl.loop.trainer import Trainer
from reasonrl.config.validate import check_run

ray = pytest.importorskip("ray")

SP = SamplingParams(temperature=1.0, max_new_tokens=16)
RUN = dict(steps=3, prompts_per_step=2, eval_every=0, final_eval_problems=0, save_every=0, device="cpu")
COMPARED = (
    "reward/mean",
    "reward/std",
    "accuracy",
    "loss/policy",
    "loss/total",
    "grad_norm",
    "length/mean",
    "entropy/mean",
)


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def prompts_and_seeds(n=5):
    items = take_items(get_task("arithmetic"), "train", n, seed=3, unique=False)
    return [it.prompt for it in items], [1000 + 7 * i for i in range(n)]


def assert_same_rollouts(a, b):
    for name in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    # float32 log-probs agree to rounding: a worker's share is a smaller batch than the in-process
    # call's (as HFEngine's own max_rows chunks are), and matmuls over other shapes round differently
    diff = (a.logprobs - b.logprobs).abs().max()
    assert torch.allclose(a.logprobs, b.logprobs, atol=1e-5, rtol=0), f"log-probs differ by up to {diff}"
    assert a.texts == b.texts and a.finish_reasons == b.finish_reasons and a.prompts == b.prompts


def recipe():
    """grpo whose every update moves the tiny model visibly (so a stale batch shows): an lr of 1e-3
    from the first step, and an entropy bonus, a gradient even when every group's reward is the same."""
    grpo = get_recipe("grpo")
    return dataclasses.replace(
        grpo, group_size=4, entropy_coef=0.01, optim=dataclasses.replace(grpo.optim, lr=1e-3, warmup_steps=0)
    )


# ------------------------------------------------------------------ no Ray needed


def test_shares_are_contiguous_and_even():
    # 10 prompts over 4 workers: 10 = 4 * 2 + 2, so the first two take 3 and the last two 2
    assert shares(10, 4) == [(0, 3), (3, 6), (6, 8), (8, 10)]
    assert shares(4, 2) == [(0, 2), (2, 4)]
    assert shares(1, 3) == [(0, 1)]  # empty shares are left out: no call to an idle worker


def test_worker_options_are_checked_before_anything_loads(monkeypatch):
    cfg = TrainConfig(rollout=RolloutOpts(workers=2))
    with pytest.raises(UserError, match="recipe 'vspo' uses steering"):
        check_run(cfg, get_recipe("vspo"))
    with pytest.raises(UserError, match="rollout.async' = true needs rollout.workers >= 1"):
        check_run(TrainConfig(rollout=RolloutOpts(async_=True)), get_recipe("grpo"))
    with pytest.raises(UserError, match="'rollout.async' must be true or false, got 1"):  # the key as typed
        check_run(TrainConfig(rollout=RolloutOpts(async_=1)), get_recipe("grpo"))
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: None if name == "ray" else object())
    with pytest.raises(UserError, match=r"pip install ray"):
        check_run(cfg, get_recipe("grpo"))


def test_seeds_are_required_to_split_prompts():
    engine = RayEngine.__new__(RayEngine)  # no actors: submit refuses before it sends anything
    engine.actors, engine.version = [], 0
    with pytest.raises(ValueError, match="needs seeds"):
        engine.submit(["1+1="], 2, SP, None)


# ------------------------------------------------------------------ with Ray


@pytest.mark.slow
def test_two_workers_give_the_in_process_rollouts_check_versions_and_name_a_dead_worker(local_ray, tiny_dir):
    model, tok = load_model(tiny_dir)
    prompts, seeds = prompts_and_seeds()
    engine = RayEngine(model, tok, workers=2, timeout_s=120)
    try:
        got = engine.generate(prompts, 3, SP, seeds=seeds)
        assert_same_rollouts(got, HFEngine(model, tok).generate(prompts, 3, SP, seeds=seeds))
        assert got.extras["weight_version"] == 0
        with torch.no_grad():  # a changed policy: every weight moved
            g = torch.Generator().manual_seed(0)
            for p in model.parameters():
                p.add_(0.05 * torch.randn(p.shape, generator=g))
        engine.push_weights(model, 3)
        got = engine.generate(prompts, 3, SP, seeds=seeds)
        assert_same_rollouts(got, HFEngine(model, tok).generate(prompts, 3, SP, seeds=seeds))
        assert got.extras["weight_version"] == 3 and got.extras["metrics"]["rollout/weight_version"] == 3.0
        engine.version = 4  # the trainer expects a version the workers never received
        with pytest.raises(RuntimeError, match="rollout worker 0 sampled with weight version 3, expected 4"):
            engine.generate(prompts, 3, SP, seeds=seeds)
        ray.kill(engine.actors[1])  # a dead worker is named, with Ray's error, and nothing waits forever
        with pytest.raises(WorkerError, match="rollout worker 1 of 2 failed to generate: .*Actor"):
            engine.generate(prompts, 3, SP, seeds=seeds)
    finally:
        engine.close()


@pytest.mark.slow
def test_lora_pushes_only_the_adapters_and_matches_in_process(local_ray, tiny_dir, monkeypatch):
    model, tok = load_model(tiny_dir)
    model = apply_lora(model, Lora(r=4, alpha=8.0), seed=0)
    prompts, seeds = prompts_and_seeds(3)
    engine = RayEngine(model, tok, workers=2, timeout_s=120)
    try:
        before = engine.generate(prompts, 2, SP, seeds=seeds)  # peft starts B at 0: the base model's rollouts
        with torch.no_grad():  # give the adapters an effect
            g = torch.Generator().manual_seed(1)
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.copy_(0.05 * torch.randn(p.shape, generator=g))
        pushed = {}
        put = ray.put
        monkeypatch.setattr(ray, "put", lambda state: (pushed.update(state), put(state))[1])
        engine.push_weights(model, 1)
        assert pushed and all("lora_" in name for name in pushed)  # the frozen base is never resent
        after = engine.generate(prompts, 2, SP, seeds=seeds)
        assert_same_rollouts(after, HFEngine(model, tok).generate(prompts, 2, SP, seeds=seeds))
        assert after.texts != before.texts  # the pushed adapters act on the workers
    finally:
        engine.close()


@pytest.mark.slow
def test_a_run_whose_worker_dies_stops_with_a_checkpoint_that_resumes(local_ray, tiny_dir, tmp_path):
    cfg = TrainConfig(model=str(tiny_dir), out=str(tmp_path / "run"), rollout=RolloutOpts(workers=2), **RUN)
    model, tok = load_model(tiny_dir)
    task = get_task("arithmetic")
    trainer = Trainer(model, tok, task, recipe(), cfg, tmp_path / "run")
    trainer.log = lambda m: ray.kill(trainer.engine.actors[1]) if m["step"] == 1 else None
    try:
        with pytest.raises(
            WorkerError, match=r"rollout worker 1 of 2 (?s:.*)stopped after step 1; .*saved to .*step-0*1[.]"
        ):
            trainer.train()
    finally:
        trainer.engine.close()
    # the checkpoint is the state after step 1: resuming in-process continues as a straight run does
    straight, resumed = [], []
    cfg0 = dataclasses.replace(cfg, rollout=RolloutOpts())
    t = Trainer(*load_model(tiny_dir), task, recipe(), cfg0, tmp_path / "straight", log=straight.append)
    t.train()
    t = Trainer(*load_model(tiny_dir), task, recipe(), cfg0, tmp_path / "run", log=resumed.append)
    assert t.resume() == 1 and t.batches.items_drawn == RUN["prompts_per_step"]
    t.train()
    assert [m["step"] for m in resumed] == [2, 3]
    for a, b in zip(straight[1:], resumed):
        for key in COMPARED:
            assert a[key] == pytest.approx(b[key], abs=1e-5), key


def metrics(path):
    return [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_two_workers_change_no_metric_and_async_logs_its_staleness(local_ray, tiny_dir, tmp_path):
    runs = {}
    for name, opts in (
        ("inproc", RolloutOpts()),
        ("workers", RolloutOpts(workers=2)),
        ("async", RolloutOpts(workers=2, async_=True)),
    ):
        cfg = TrainConfig(model=str(tiny_dir), out=str(tmp_path / name), rollout=opts, **RUN)
        train_run(cfg, recipe())
        runs[name] = metrics(tmp_path / name)
    for a, b in zip(runs["inproc"], runs["workers"], strict=True):
        for key in COMPARED:
            assert a[key] == pytest.approx(b[key], abs=1e-5), (a["step"], key)
    assert [m["rollout/staleness"] for m in runs["workers"]] == [0, 0, 0]
    # grpo: mu = 1 pass of 1 minibatch, so one optimiser step per update. Async samples batch k+1
    # with the weights before update k: one version stale from the second step on (and the first
    # batch, sampled before any update, is the synchronous run's)
    assert [m["rollout/staleness"] for m in runs["async"]] == [0, 1, 1]
    for key in COMPARED:
        assert runs["async"][0][key] == pytest.approx(runs["workers"][0][key], abs=1e-5), key
    # the second async batch is the initial model's rollouts of the next prompts (task positions 2, 3)
    initial = Trainer(*load_model(tiny_dir), get_task("arithmetic"), recipe(), TrainConfig(**RUN), tmp_path / "x")
    initial.batches.seek(RUN["prompts_per_step"])
    stale = initial.batches.make(RUN["prompts_per_step"]).metrics
    for key in ("entropy/mean", "length/mean", "reward/mean"):
        assert runs["async"][1][key] == pytest.approx(stale[key], abs=1e-5), key
    assert runs["workers"][0]["grad_norm"] > 0, runs["workers"][0]  # the first update moved the policy ...
    assert abs(runs["async"][1]["entropy/mean"] - runs["workers"][1]["entropy/mean"]) > 1e-4  # ... which async missed
