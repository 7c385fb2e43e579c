"""Shared ways to drive the real code in a test: the CLI in a process (and killed inside a save), a resume
checked against a straight run, one run with 1 and 2 processes, one optimiser step of a real trainer, the
host reads a call makes, two rollouts compared field by field. Used by more than one test module."""

import dataclasses
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch

from reasonrl.config.train import Lora, Memory, TrainConfig
from reasonrl.loop.checkpoint import latest_checkpoint
from reasonrl.loop.trainer import Trainer
from reasonrl.models import load_model
from reasonrl.recipes import get_recipe
from reasonrl.tasks import get_task


# ------------------------------------------------------------------ the CLI in a process, resumes (test_resume)
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
RESUME_STEPS, RESUME_SAVE_EVERY, RESUME_PROMPTS = 8, 3, 4  # checkpoints at steps 3, 6 and 8

# Runs the CLI after arming a SIGKILL of this very process at a chosen point inside save_checkpoint:
# "state" = the model is written, the optimiser/trainer state not yet; "rename" = everything is
# written, the folder not yet renamed into place (the last moment a save can be cut).
KILL_IN_SAVE = """
import os, signal, sys
from reasonrl.loop import checkpoint
point, tag = sys.argv[1], "step-%06d" % int(sys.argv[2])
die = lambda: os.kill(os.getpid(), signal.SIGKILL)
if point == "state":
    real_save = checkpoint.torch.save
    def save(obj, path, *a, **k):
        if str(path).endswith(tag + "/trainer_state.pt"):
            die()
        return real_save(obj, path, *a, **k)
    checkpoint.torch.save = save
else:
    real_rename = checkpoint.os.rename
    def rename(src, dst, *a, **k):
        if str(dst).endswith(tag):
            die()
        return real_rename(src, dst, *a, **k)
    checkpoint.os.rename = rename
from reasonrl.cli import app
sys.argv = ["reasonrl", *sys.argv[3:]]
app()
"""


def train_args(model, out, recipe="grpo", steps=RESUME_STEPS, *extra):
    return [
        "train",
        "--recipe",
        recipe,
        "--model",
        str(model),
        "--out",
        str(out),
        "--steps",
        str(steps),
        f"prompts_per_step={RESUME_PROMPTS}",
        "group_size=4",
        "eval_every=0",
        "final_eval_problems=0",
        f"save_every={RESUME_SAVE_EVERY}",
        *extra,
    ]


def cli_cmd(*args):
    return [sys.executable, "-m", "reasonrl.cli", *args]


def run_ok(cmd):
    done = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def metric_values(path: Path):
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith(("time/", "tokens_per_s"))} for r in rows]


def read_events(run: Path):
    return [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]


def ckpt_step(run: Path) -> int:
    path = latest_checkpoint(run)
    return 0 if path is None else int(path.name.split("-")[1])


def resume_and_check(model, run: Path, recipe: str, straight, steps=RESUME_STEPS):
    """Resume ``run`` and check it continued from its latest checkpoint and matches ``straight``."""
    ckpt = ckpt_step(run)
    stdout = run_ok(cli_cmd(*train_args(model, run, recipe, steps, "--resume")))
    start, trained = read_events(run)[-2:]
    assert start["event"] == "start" and trained["event"] == "trained", read_events(run)
    assert start["first_step"] == ckpt + 1, (start, ckpt)
    if ckpt:
        assert f"resumed from checkpoints/step-{ckpt:06d} (step {ckpt}): continuing at step {ckpt + 1}" in stdout
        assert start["resumed_from"] == f"step-{ckpt:06d}"
    # only the steps after the checkpoint were trained, and only their prompts were drawn
    assert trained["steps_this_process"] == steps - ckpt and trained["last_step"] == steps
    drawn_before = start["items_drawn"]
    assert drawn_before + trained["items_drawn_this_process"] == straight["items_drawn"]
    assert (drawn_before == 0) == (ckpt == 0)
    values = metric_values(run / "metrics.jsonl")
    assert [r["step"] for r in values] == list(range(1, steps + 1))
    assert values == straight["values"]
    if "completions" in straight:  # the rollouts' text too: rows past the checkpoint dropped, then logged again
        assert (run / "completions.jsonl").read_text() == straight["completions"]


# ------------------------------------------------------------------ 1 vs 2 processes (test_dist)
DIST_SMALL = [
    "prompts_per_step=4",
    "group_size=4",
    "final_eval_problems=6",
    "final_eval_k=2",
    "eval_every=2",
    "eval_problems=6",
    "save_every=2",
    "task_options.max_digits=2",
]


def train_nproc(tmp_path, name: str, nproc: int, extra: list[str]) -> list[dict]:
    """A 4-step `reasonrl train` of ``name`` in ``nproc`` processes (torchrun); its logged metrics."""
    out = tmp_path / f"{name}-{nproc}"
    cmd = [
        sys.executable,
        "-m",
        "reasonrl",
        "train",
        f"--recipe={name}",
        "--steps=4",
        f"--out={out}",
        f"--nproc={nproc}",
        *DIST_SMALL,
        *extra,
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def same_metrics(one: list[dict], two: list[dict], rel: float = 1e-5) -> None:
    assert len(one) == len(two) == 4
    for a, b in zip(one, two):
        assert set(a) == set(b)
        for key in a:
            if key.startswith(("time/", "tokens_per_s/")):
                continue  # wall-clock
            assert b[key] == pytest.approx(a[key], rel=rel, abs=rel), (a["step"], key)


# --------------------------------------------------- one optimiser step (test_memory), host reads (test_optimizer_step)
def one_step(tiny_dir, *, lora=Lora(), ckpt=False, dtype="float32", master=True, lr=1e-3, weights=torch.float32):
    """One optimiser step of a real grpo Trainer on the tiny model: the trainer, its batch, the weights
    before and the gradients."""
    model, tok = load_model(tiny_dir, dtype=weights)
    base = get_recipe("grpo")
    recipe = dataclasses.replace(
        base,
        group_size=4,
        optim=dataclasses.replace(base.optim, lr=lr, weight_decay=0.0, warmup_steps=0, schedule="constant"),
    )
    cfg = TrainConfig(
        model=str(tiny_dir),
        prompts_per_step=2,
        seed=5,
        eval_every=0,
        save_every=0,
        lora=lora,
        memory=Memory(gradient_checkpointing=ckpt),
        dtype=dtype,
        master_fp32=master,
    )
    tr = Trainer(model, tok, get_task("arithmetic"), recipe, cfg, run_dir="/nonexistent")
    batch = tr.batches.make(cfg.prompts_per_step)
    batch.advantages = torch.linspace(-1.0, 1.0, len(batch.ro.texts))  # every row carries gradient
    before = [p.detach().clone() for p in tr.params]
    tr._optimizer_step(batch, torch.arange(len(batch.ro.texts)))
    return tr, batch, before, [p.grad.clone() for p in tr.params]


READS = ("item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__float__", "__index__", "nonzero")


def count_reads(monkeypatch, fn, paused: list[bool] | None = None) -> Counter:
    """Calls of the Tensor methods that read a device tensor on the host, made while ``fn()`` runs
    (none while ``paused[0]`` is true)."""
    seen, paused = Counter(), paused or [False]

    def counted(name, real):
        def read(self, *a, **k):
            seen[name] += not paused[0]
            return real(self, *a, **k)

        return read

    with monkeypatch.context() as m:
        for name in READS:
            m.setattr(torch.Tensor, name, counted(name, getattr(torch.Tensor, name)))
        fn()
    return seen


# ----------------------------------------------------- rollouts compared (test_decode), report sections (test_report)
def assert_same(a, b, exact=True):
    """Two Rollouts with the same tokens, masks, finish reasons and texts, and the same per-token values
    (bitwise, or to 1e-5 when not ``exact``)."""
    assert a.completion_ids.tolist() == b.completion_ids.tolist()
    assert torch.equal(a.completion_mask, b.completion_mask)
    assert a.finish_reasons == b.finish_reasons and a.texts == b.texts
    for name in ("logprobs", "entropies", "sum_p2", "hidden_grad_norm"):
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None), name
        if x is not None:
            assert torch.equal(x, y) if exact else torch.allclose(x, y, atol=1e-5, rtol=0), name


# the sections of a run's and a compare's report page, in order (test_report, test_report_browser)
RUN_SECTIONS = ("run", "before-after", "curves", "metrics", "training", "samples", "audit", "config")
COMPARE_SECTIONS = ("table", "curves", "runs", "config", "samples", "audit")


# ------------------------------------------------------------- sandboxed processes (test_sandbox, test_sandbox_session)
def procs_matching(uid, text):
    """Host processes running as ``uid`` (None: any) or whose command line mentions ``text``."""
    found = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            owner = int(Path(f"/proc/{name}/status").read_text().split("Uid:")[1].split()[0])  # real uid
            cmdline = Path(f"/proc/{name}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue  # exited meanwhile
        if int(name) != os.getpid() and ((uid is not None and owner == uid) or text in cmdline):
            found.append(int(name))
    return found


def detached_grandchild(marker: Path, sleep: float, wait: bool = False) -> str:
    """A program whose grandchild leaves the process group (setsid), sleeps ``sleep`` s and then writes the time
    to ``marker``; ``wait``: the program waits for its child (the grandchild's parent) before printing."""
    return (
        "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
        f"        time.sleep({sleep})\n        open({str(marker)!r}, 'w').write(repr(time.time()))\n"
        "        os._exit(0)\n    os._exit(0)\n" + ("os.wait()\n" if wait else "") + "print('parent done')\n"
    )
