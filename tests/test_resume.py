"""Resume is proven, not assumed: real processes are SIGKILLed (after a checkpoint, inside a save, at a
random moment), resumed with ``--resume``, and must (a) report that they loaded the checkpoint and
continued from the step after it, (b) train only the remaining steps and draw only their prompts
(``events.jsonl``), and (c) end with the same ``metrics.jsonl`` values (and ``completions.jsonl``
bytes) as a run never interrupted.

A deterministic restart from step 1 would pass (c) alone, so (a) and (b) are what make these tests
about resuming. Each run is a separate ``python -m reasonrl.cli train`` process on the tiny model.
"""
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from reasonrl.loop.checkpoint import latest_checkpoint

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
STEPS, SAVE_EVERY, PROMPTS = 8, 3, 4  # checkpoints at steps 3, 6 and 8

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


def _args(model, out, recipe="grpo", steps=STEPS, *extra):
    return ["train", "--recipe", recipe, "--model", str(model), "--out", str(out), "--steps", str(steps),
            f"prompts_per_step={PROMPTS}", "group_size=4", "eval_every=0", "final_eval_problems=0",
            f"save_every={SAVE_EVERY}", *extra]


def _cli(*args):
    return [sys.executable, "-m", "reasonrl.cli", *args]


def _run(cmd):
    done = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def _values(path: Path):
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith(("time/", "tokens_per_s"))} for r in rows]


def _events(run: Path):
    return [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]


def _ckpt_step(run: Path) -> int:
    path = latest_checkpoint(run)
    return 0 if path is None else int(path.name.split("-")[1])


def _resume_and_check(model, run: Path, recipe: str, straight, steps=STEPS):
    """Resume ``run`` and check it continued from its latest checkpoint and matches ``straight``."""
    ckpt = _ckpt_step(run)
    stdout = _run(_cli(*_args(model, run, recipe, steps, "--resume")))
    start, trained = _events(run)[-2:]
    assert start["event"] == "start" and trained["event"] == "trained", _events(run)
    assert start["first_step"] == ckpt + 1, (start, ckpt)
    if ckpt:
        assert f"resumed from checkpoints/step-{ckpt:06d} (step {ckpt}): continuing at step {ckpt + 1}" in stdout
        assert start["resumed_from"] == f"step-{ckpt:06d}"
    # only the steps after the checkpoint were trained, and only their prompts were drawn
    assert trained["steps_this_process"] == steps - ckpt and trained["last_step"] == steps
    drawn_before = start["items_drawn"]
    assert drawn_before + trained["items_drawn_this_process"] == straight["items_drawn"]
    assert (drawn_before == 0) == (ckpt == 0)
    values = _values(run / "metrics.jsonl")
    assert [r["step"] for r in values] == list(range(1, steps + 1))
    assert values == straight["values"]
    if "completions" in straight:  # the rollouts' text too: rows past the checkpoint dropped, then logged again
        assert (run / "completions.jsonl").read_text() == straight["completions"]


@pytest.fixture(scope="module")
def straight_runs(tiny_dir, tmp_path_factory):
    """One uninterrupted run per recipe, its values, prompts drawn and wall time."""
    cache = {}

    def get(recipe):
        if recipe not in cache:
            run = tmp_path_factory.mktemp(f"straight-{recipe}") / "run"
            _run(_cli(*_args(tiny_dir, run, recipe)))
            start, trained = _events(run)
            cache[recipe] = {"values": _values(run / "metrics.jsonl"), "train_seconds": trained["time"] - start["time"],
                             "completions": (run / "completions.jsonl").read_text(),
                             "items_drawn": start["items_drawn"] + trained["items_drawn_this_process"]}
        return cache[recipe]

    return get


@pytest.mark.slow
def test_a_run_killed_after_its_step_6_checkpoint_resumes_at_step_7(tiny_dir, tmp_path):
    straight_dir, killed = tmp_path / "straight", tmp_path / "killed"
    _run(_cli(*_args(tiny_dir, straight_dir, "grpo", 12, "save_every=6")))
    straight = {"values": _values(straight_dir / "metrics.jsonl"), "items_drawn": 12 * PROMPTS}
    proc = subprocess.Popen(_cli(*_args(tiny_dir, killed, "grpo", 12, "save_every=6")), env=ENV,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ckpt = killed / "checkpoints" / "step-000006"
    deadline = time.monotonic() + 300
    while not ckpt.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    still_running = proc.poll() is None
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert still_running and ckpt.exists(), "the run ended before its step-6 checkpoint could be seen"
    assert not (killed / "summary.json").exists() and latest_checkpoint(killed) == ckpt
    assert [e["event"] for e in _events(killed)] == ["start"]  # the killed process never finished training
    _resume_and_check(tiny_dir, killed, "grpo", straight, steps=12)
    start = _events(killed)[-2]
    assert start["first_step"] == 7 and start["items_drawn"] == 6 * PROMPTS and start["pid"] != _events(killed)[0]["pid"]


@pytest.mark.slow
@pytest.mark.parametrize("recipe,point", [("grpo", "rename")] + [  # the default tier's one kill-and-resume test
    pytest.param(r, p, marks=pytest.mark.slow) for r in ("grpo", "dapo", "mu_grpo") for p in ("state", "rename")
    if (r, p) != ("grpo", "rename")])
def test_a_run_killed_inside_a_save_resumes_from_the_previous_checkpoint(recipe, point, tiny_dir, tmp_path,
                                                                          straight_runs):
    # the process SIGKILLs itself inside the step-6 save: step 3 stays the latest checkpoint, the
    # half-written folder is ignored, and the resumed run redoes steps 4-8 exactly
    straight, run = straight_runs(recipe), tmp_path / "run"
    killed = subprocess.run([sys.executable, "-c", KILL_IN_SAVE, point, "6", *_args(tiny_dir, run, recipe)],
                            env=ENV, capture_output=True, text=True, timeout=600)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert (run / "checkpoints" / ".tmp-step-000006").is_dir()  # killed inside the save, not after it
    assert _ckpt_step(run) == 3
    _resume_and_check(tiny_dir, run, recipe, straight)
    assert not (run / "checkpoints" / ".tmp-step-000006").exists()  # the redone save replaced the leftover


@pytest.mark.slow
@pytest.mark.parametrize("recipe", ["grpo", "dapo", "mu_grpo"])
def test_runs_killed_at_random_moments_resume_to_the_straight_run(recipe, tiny_dir, tmp_path, straight_runs):
    # SIGKILL at a seeded random moment of the training phase (inside a step, a save, or just after
    # training: wherever it lands), twice in a row on the same run, then resume to the end
    straight, run = straight_runs(recipe), tmp_path / "run"
    rng = random.Random(f"{recipe}-kills")
    for trial in range(2):
        resume = ["--resume"] if trial else []
        seen = len(_events(run)) if trial else 0
        proc = subprocess.Popen(_cli(*_args(tiny_dir, run, recipe), *resume), env=ENV,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while proc.poll() is None and not ((run / "events.jsonl").exists() and len(_events(run)) > seen):
            time.sleep(0.005)  # training starts when the process logs its start event
        time.sleep(rng.uniform(0.0, 1.1) * straight["train_seconds"])  # picks the moment; no time is asserted
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    _resume_and_check(tiny_dir, run, recipe, straight)
