"""Resume with a selector is bit-exact: the approach of test_resume.py (a real CLI process SIGKILLs
itself inside its step-6 save, a second process resumes from step 3) on the lze recipe. The resumed
process must report the checkpoint and the selector state it loaded (``events.jsonl``), train only
steps 4-8, and end with the uninterrupted run's ``metrics.jsonl`` values, selector metrics included."""

import signal
import subprocess
import sys

import pytest

from harness import ENV, KILL_IN_SAVE, cli_cmd, metric_values, read_events, run_ok

RESUME_STEPS = 8
# pool 8, 4 prompts a step: an epoch every 2 steps, so the checkpoint at step 3 is mid-epoch 1 and
# holds the anchors of all 8 prompts; one-digit problems so that some are solved and pruned
LZE_ARGS = [
    "prompts_per_step=4",
    "group_size=4",
    "eval_every=0",
    "final_eval_problems=0",
    "save_every=3",
    "data.pool=8",
    "task_options.max_digits=1",
]


def _args(model, out, *extra):
    return [
        "train",
        "--recipe",
        "lze",
        "--model",
        str(model),
        "--out",
        str(out),
        "--steps",
        str(RESUME_STEPS),
        *LZE_ARGS,
        *extra,
    ]


@pytest.mark.slow
def test_an_lze_run_killed_inside_a_save_resumes_bit_exactly(tiny_dir, tmp_path):
    straight_dir, run = tmp_path / "straight", tmp_path / "run"
    run_ok(cli_cmd(*_args(tiny_dir, straight_dir)))
    straight = metric_values(straight_dir / "metrics.jsonl")
    killed = subprocess.run(
        [sys.executable, "-c", KILL_IN_SAVE, "rename", "6", *_args(tiny_dir, run)],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    stdout = run_ok(cli_cmd(*_args(tiny_dir, run, "--resume")))
    assert "resumed from checkpoints/step-000003 (step 3): continuing at step 4" in stdout
    start, trained = read_events(run)[-2:]
    # the resumed process loaded the selector's state of all 8 pool prompts, and trained steps 4-8 only
    assert start["resumed_from"] == "step-000003" and start["selector_prompts"] == 8
    assert start["first_step"] == 4 and trained["steps_this_process"] == 5
    values = metric_values(run / "metrics.jsonl")
    assert [r["step"] for r in values] == list(range(1, RESUME_STEPS + 1))
    assert values == straight  # every logged number, select/* included, equal to the uninterrupted run
    assert any(r["select/kept"] < r["select/groups"] for r in values[3:])  # selection acted after the resume
    assert values[-1]["select/epoch"] >= 3.0  # 32 draws over a pool of 8 (more when pruned prompts are skipped)


@pytest.mark.slow
def test_lze_with_one_and_two_processes_logs_the_same_metrics(tmp_path, tiny_dir):
    # every rank holds the gathered batch and the same selector state and seeds: the state is replicated,
    # so two ranks must select exactly what one process selects (test_dist.py's acceptance check)
    from harness import same_metrics, train_nproc

    extra = [f"--model={tiny_dir}", "data.pool=8"]
    one, two = train_nproc(tmp_path, "lze", 1, extra), train_nproc(tmp_path, "lze", 2, extra)
    same_metrics(one, two)
    assert any(m["select/kept"] < m["select/groups"] for m in one)  # the selection acted, on both
