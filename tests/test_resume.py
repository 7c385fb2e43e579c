"""Resume is proven, not assumed: real processes are SIGKILLed (after a checkpoint, inside a save, at a
random moment), resumed with ``--resume``, and must (a) report that they loaded the checkpoint and
continued from the step after it, (b) train only the remaining steps and draw only their prompts
(``events.jsonl``), and (c) end with the same ``metrics.jsonl`` values (and ``completions.jsonl``
bytes) as a run never interrupted.

A deterministic restart from step 1 would pass (c) alone, so (a) and (b) are what make these tests
about resuming. Each run is a separate ``python -m reasonrl.cli train`` process on the tiny model.
"""

import random
import signal
import subprocess
import sys
import time

import pytest

from reasonrl.loop.checkpoint import latest_checkpoint

from harness import (
    ENV,
    KILL_IN_SAVE,
    RESUME_PROMPTS,
    ckpt_step,
    cli_cmd,
    metric_values,
    read_events,
    resume_and_check,
    run_ok,
    train_args,
)


@pytest.fixture(scope="module")
def straight_runs(tiny_dir, tmp_path_factory):
    """One uninterrupted run per recipe, its values, prompts drawn and wall time."""
    cache = {}

    def get(recipe):
        if recipe not in cache:
            run = tmp_path_factory.mktemp(f"straight-{recipe}") / "run"
            run_ok(cli_cmd(*train_args(tiny_dir, run, recipe)))
            start, trained = read_events(run)
            cache[recipe] = {
                "values": metric_values(run / "metrics.jsonl"),
                "train_seconds": trained["time"] - start["time"],
                "completions": (run / "completions.jsonl").read_text(),
                "items_drawn": start["items_drawn"] + trained["items_drawn_this_process"],
            }
        return cache[recipe]

    return get


@pytest.mark.slow
def test_a_run_killed_after_its_step_6_checkpoint_resumes_at_step_7(tiny_dir, tmp_path):
    straight_dir, killed = tmp_path / "straight", tmp_path / "killed"
    run_ok(cli_cmd(*train_args(tiny_dir, straight_dir, "grpo", 12, "save_every=6")))
    straight = {"values": metric_values(straight_dir / "metrics.jsonl"), "items_drawn": 12 * RESUME_PROMPTS}
    proc = subprocess.Popen(
        cli_cmd(*train_args(tiny_dir, killed, "grpo", 12, "save_every=6")),
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    ckpt = killed / "checkpoints" / "step-000006"
    deadline = time.monotonic() + 300
    while not ckpt.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    still_running = proc.poll() is None
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert still_running and ckpt.exists(), "the run ended before its step-6 checkpoint could be seen"
    assert not (killed / "summary.json").exists() and latest_checkpoint(killed) == ckpt
    assert [e["event"] for e in read_events(killed)] == ["start"]  # the killed process never finished training
    resume_and_check(tiny_dir, killed, "grpo", straight, steps=12)
    start = read_events(killed)[-2]
    assert (
        start["first_step"] == 7
        and start["items_drawn"] == 6 * RESUME_PROMPTS
        and start["pid"] != read_events(killed)[0]["pid"]
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "recipe,point",
    [("grpo", "rename")]
    + [  # the default tier's one kill-and-resume test
        pytest.param(r, p, marks=pytest.mark.slow)
        for r in ("grpo", "dapo", "mu_grpo")
        for p in ("state", "rename")
        if (r, p) != ("grpo", "rename")
    ],
)
def test_a_run_killed_inside_a_save_resumes_from_the_previous_checkpoint(
    recipe, point, tiny_dir, tmp_path, straight_runs
):
    # the process SIGKILLs itself inside the step-6 save: step 3 stays the latest checkpoint, the
    # half-written folder is ignored, and the resumed run redoes steps 4-8 exactly
    straight, run = straight_runs(recipe), tmp_path / "run"
    killed = subprocess.run(
        [sys.executable, "-c", KILL_IN_SAVE, point, "6", *train_args(tiny_dir, run, recipe)],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert (run / "checkpoints" / ".tmp-step-000006").is_dir()  # killed inside the save, not after it
    assert ckpt_step(run) == 3
    resume_and_check(tiny_dir, run, recipe, straight)
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
        seen = len(read_events(run)) if trial else 0
        proc = subprocess.Popen(
            cli_cmd(*train_args(tiny_dir, run, recipe), *resume),
            env=ENV,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        while proc.poll() is None and not ((run / "events.jsonl").exists() and len(read_events(run)) > seen):
            time.sleep(0.005)  # training starts when the process logs its start event
        time.sleep(rng.uniform(0.0, 1.1) * straight["train_seconds"])  # picks the moment; no time is asserted
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    resume_and_check(tiny_dir, run, recipe, straight)
