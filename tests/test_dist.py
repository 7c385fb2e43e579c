"""Data parallelism: keyed sampling, the rank split of generation, the gradient sum, and the
acceptance test: the same run with 1 and 2 torchrun processes logs the same metrics."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
import torch.multiprocessing as mp

from reasonrl.dist.group import Single, TorchGroup
from reasonrl.dist.shard import reorder
from reasonrl.models import load_model
from reasonrl.rollout import HFEngine, SamplingParams, concat_rollouts
from reasonrl.rollout.sampling import inverse_cdf

from harness import DIST_SMALL, same_metrics, train_nproc


def test_inverse_cdf_picks_the_interval_holding_u():
    # probs 0.2, 0.5, 0.3: cumulative 0.2, 0.7, 1.0, so u in [0, 0.2) -> 0, [0.2, 0.7) -> 1, [0.7, 1) -> 2
    probs = torch.tensor([[0.2, 0.5, 0.3]]).repeat(6, 1)
    u = torch.tensor([0.0, 0.1999, 0.2, 0.69, 0.7, 0.9999])
    assert inverse_cdf(probs, u).tolist() == [0, 0, 1, 1, 2, 2]


def test_inverse_cdf_never_picks_a_token_of_probability_zero():
    # cumulative 0.5, 0.5, 1.0: u = 0.5 lies at the end of token 0's interval and token 1's is empty -> 2;
    # a leading zero-probability token is skipped at u = 0; u just below 1 stays inside the last real token
    probs = torch.tensor([[0.5, 0.0, 0.5, 0.0], [0.0, 1.0, 0.0, 0.0], [0.25, 0.75, 0.0, 0.0]])
    u = torch.tensor([0.5, 0.0, 1 - 1e-12], dtype=torch.float64)
    assert inverse_cdf(probs, u).tolist() == [2, 1, 1]


def test_inverse_cdf_samples_follow_the_distribution():
    # 20000 draws of probs (0.1, 0.6, 0.3): each frequency within 4 binomial standard errors (<= 0.0139)
    gen = torch.Generator().manual_seed(0)
    probs = torch.tensor([[0.1, 0.6, 0.3]]).repeat(20000, 1)
    freq = (
        torch.bincount(inverse_cdf(probs, torch.rand(20000, generator=gen, dtype=torch.float64)), minlength=3) / 20000
    )
    assert torch.allclose(freq, torch.tensor([0.1, 0.6, 0.3]), atol=4 * (0.6 * 0.4 / 20000) ** 0.5)


@pytest.fixture(scope="module")
def engine(tiny_dir):
    model, tok = load_model(tiny_dir)
    return HFEngine(model, tok, max_rows=512)


PROMPTS = ["3+4=?", "12+30=?", "7+8=?", "41+2=?", "9+9=?"]


def test_keyed_rows_do_not_depend_on_which_prompts_share_the_call(engine):
    sp = SamplingParams(temperature=1.0, max_new_tokens=24)
    seeds = [11, 22, 33, 44, 55]
    whole = engine.generate(PROMPTS, 3, sp, seeds=seeds)
    parts = [engine.generate(PROMPTS[:2], 3, sp, seeds=seeds[:2]), engine.generate(PROMPTS[2:], 3, sp, seeds=seeds[2:])]
    split = concat_rollouts(parts, engine.tok.pad_token_id)
    assert split.texts == whole.texts and torch.equal(split.completion_ids, whole.completion_ids)
    assert torch.allclose(split.logprobs, whole.logprobs, atol=1e-5)
    # and the seeds matter: another seed for prompt 0 changes its samples, not the others'
    other = engine.generate(PROMPTS, 3, sp, seeds=[12] + seeds[1:])
    assert other.texts[3:] == whole.texts[3:] and other.texts[:3] != whole.texts[:3]


def test_rank_dealt_parts_are_put_back_in_prompt_order(engine):
    # 5 prompts over 2 ranks: rank 0 holds prompts 0, 2, 4 and rank 1 prompts 1, 3
    sp, seeds = SamplingParams(temperature=1.0, max_new_tokens=16), [5, 6, 7, 8, 9]
    whole = engine.generate(PROMPTS, 2, sp, seeds=seeds)
    rank0 = engine.generate(PROMPTS[0::2], 2, sp, seeds=seeds[0::2])
    rank1 = engine.generate(PROMPTS[1::2], 2, sp, seeds=seeds[1::2])
    out = reorder([rank0, rank1], 5, 2, engine.tok.pad_token_id)
    assert out.prompts == whole.prompts and out.texts == whole.texts
    assert torch.equal(out.completion_mask, whole.completion_mask) and torch.equal(out.prompt_ids, whole.prompt_ids)


def test_a_single_process_group_owns_every_group_and_sums_nothing():
    p = torch.nn.Parameter(torch.ones(2))
    p.grad = torch.tensor([1.0, 2.0])
    assert Single().owns(torch.arange(4)).all()
    assert Single().sum_grads([p], [3.0, 1.0]) == [3.0, 1.0] and p.grad.tolist() == [1.0, 2.0]


def _sum_grads_worker(rank: int, path: str, out: str) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{path}", rank=rank, world_size=2)
    a, b, c = (torch.nn.Parameter(torch.zeros(3)) for _ in range(3))
    a.grad = torch.tensor([1.0, 2.0, 3.0]) * (rank + 1)  # rank 0: 1 2 3, rank 1: 2 4 6 -> 3 6 9
    if rank == 1:
        b.grad = torch.tensor([0.5, 0.5, 0.5])  # only rank 1 has one -> 0.5 each; c: no rank -> stays None
    scalars = TorchGroup(torch.device("cpu")).sum_grads([a, b, c], [rank + 1.0, 10.0])  # 1 + 2 = 3, 20
    torch.save({"a": a.grad, "b": b.grad, "c": c.grad, "s": scalars}, f"{out}.{rank}")
    dist.destroy_process_group()


def test_the_gradient_sum_over_two_gloo_ranks(tmp_path):
    mp.spawn(_sum_grads_worker, args=(str(tmp_path / "rdv"), str(tmp_path / "res")), nprocs=2)
    for rank in (0, 1):
        got = torch.load(tmp_path / f"res.{rank}")
        assert got["a"].tolist() == [3.0, 6.0, 9.0] and got["b"].tolist() == [0.5, 0.5, 0.5] and got["c"] is None
        assert got["s"] == [3.0, 20.0]


RECIPES = {
    "grpo": ["kl.coef=0.04"],  # a KL term: the reference log-probs of each rank's rows
    "dapo": ["group_filter.max_rounds=2"],
    "mu_grpo": ["stages.count=2", "optim.mu=2"],
}


# FSDP sums each gradient shard by reduce-scatter, in another order than one process accumulates its
# micro-batches: the weights differ in the last float32 bits after a step, and AdamW turns a last-bit
# difference in a near-zero gradient into a +-lr move (the weights' 2e-4 bound below), so logged values
# drift apart step by step (measured, torch 2.13 / transformers 5.24: grad_norm 0.428618 vs 0.428605 at
# step 2 (3e-5), 1.210834 vs 1.210679 at step 4 (1.3e-4); an earlier stack: 5e-5 at step 4). A lost or
# doubled micro-batch moves grad_norm by 10-100%, orders of magnitude more than this bound.
FSDP_REL = 1e-3


@pytest.mark.slow
@pytest.mark.parametrize("name", list(RECIPES))
def test_one_and_two_processes_log_the_same_metrics(tmp_path, tiny_dir, name):
    extra = [f"--model={tiny_dir}", *RECIPES[name]]
    one, two = train_nproc(tmp_path, name, 1, extra), train_nproc(tmp_path, name, 2, extra)
    same_metrics(one, two)
    assert any(m["grad_norm"] > 0 for m in one)  # something was learned, so equal gradients were compared
    summaries = [json.loads((tmp_path / f"{name}-{n}" / "summary.json").read_text()) for n in (1, 2)]
    assert summaries[0]["after"] == summaries[1]["after"] and summaries[1]["world"] == 2
    events = [json.loads(line) for line in (tmp_path / f"{name}-2" / "events.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events] == ["start", "trained"] and events[0]["world"] == 2  # rank 0 alone wrote


@pytest.mark.slow
def test_a_two_process_run_resumes_in_one_process(tmp_path, tiny_dir):
    # no rank holds state of its own, so a checkpoint written by 2 ranks resumes with 1; a constant LR
    # schedule makes "2 steps, then resumed to 4" the same schedule as "4 steps"
    extra = [f"--model={tiny_dir}", "optim.schedule=constant", "optim.warmup_steps=0"]
    straight = train_nproc(tmp_path, "grpo", 1, extra)
    out = tmp_path / "grpo-2"
    base = [sys.executable, "-m", "reasonrl", "train", "--recipe=grpo", f"--out={out}", *DIST_SMALL, *extra]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    first = subprocess.run(base + ["--steps=2", "--nproc=2"], capture_output=True, text=True, env=env, timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    again = subprocess.run(base + ["--steps=4", "--resume"], capture_output=True, text=True, env=env, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    starts = [e for e in events if e["event"] == "start"]
    assert [(e["world"], e["resumed_from"]) for e in starts] == [(2, None), (1, "step-000002")]
    same_metrics(straight, [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()])


# ---------------------------------------------------------------- FSDP2: sharded over 2 processes vs 1
# micro_batch_size=4 (one group per micro-batch, in both runs): when the ranks own unequal numbers of
# live groups (DAPO keeps an odd number), the rank with fewer runs zero-weight passes (dist/fsdp.py)
FSDP = ["dist.strategy=fsdp", "micro_batch_size=4"]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["grpo", "dapo"])
def test_fsdp_over_two_processes_logs_the_metrics_of_one(tmp_path, tiny_dir, name):
    extra = [f"--model={tiny_dir}", "micro_batch_size=4", *RECIPES[name]]
    one, two = train_nproc(tmp_path, name, 1, extra), train_nproc(tmp_path, name, 2, extra + FSDP)
    same_metrics(one, two, FSDP_REL)
    assert any(m["grad_norm"] > 0 for m in one)
    summaries = [json.loads((tmp_path / f"{name}-{n}" / "summary.json").read_text()) for n in (1, 2)]
    assert summaries[0]["after"] == summaries[1]["after"] and summaries[1]["world"] == 2
    # the final model, gathered from the shards, is the single process's
    from safetensors.torch import load_file

    w1, w2 = (load_file(str(tmp_path / f"{name}-{n}" / "final" / "model.safetensors")) for n in (1, 2))
    assert set(w2) == set(w1)  # a tied head is written once, under the embedding's name, as one process does
    # AdamW moves a weight by lr * m / sqrt(v): where a gradient is near zero, a last-bit difference in the
    # sum can flip that step's sign, +-lr (5e-5) per step; four steps bound it by 2e-4
    assert all(torch.allclose(w2[k], w1[k], atol=2e-4) for k in w1)


@pytest.mark.slow
def test_a_sharded_checkpoint_resumes_in_one_process_and_sharded_again(tmp_path, tiny_dir):
    # 2 sharded ranks write step 2; 1 process resumes it to step 3; 2 sharded ranks load step 3 into
    # their shards and finish: the metrics of one straight process (constant LR: the same schedule
    # whatever --steps each part was given; a KL term: the reference is saved and restored too)
    extra = [
        f"--model={tiny_dir}",
        "optim.schedule=constant",
        "optim.warmup_steps=0",
        "kl.coef=0.04",
        "micro_batch_size=4",
        "eval_every=0",
    ]  # no eval: the middle part ends at step 3, where a run evaluates
    straight = train_nproc(tmp_path, "grpo", 1, extra)
    out = tmp_path / "grpo-fsdp"
    base = [sys.executable, "-m", "reasonrl", "train", "--recipe=grpo", f"--out={out}", *DIST_SMALL, *extra, *FSDP]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for more in (["--steps=2", "--nproc=2"], ["--steps=3", "--resume"], ["--steps=4", "--nproc=2", "--resume"]):
        res = subprocess.run(base + more, capture_output=True, text=True, env=env, timeout=600)
        assert res.returncode == 0, res.stderr[-3000:]
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    starts = [(e["world"], e["resumed_from"]) for e in events if e["event"] == "start"]
    assert starts == [(2, None), (1, "step-000002"), (2, "step-000003")]
    # two changes of layout (2 shards -> 1 process -> 2 shards) compound the summation-order drift, and
    # AdamW's +-lr sign flips on near-zero gradients spread it: measured grad_norm 1.27435 vs 1.27399 at step 4
    same_metrics(straight, [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()], 1e-3)
