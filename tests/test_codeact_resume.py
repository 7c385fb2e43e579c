"""The codeact recipe killed mid-run resumes to the run never interrupted (issue #31): its episodes are seeded
per item and turn, so the resumed process replays the same turns, observations and rewards (real processes,
SIGKILL after the step-2 checkpoint, as tests/test_resume.py does for the single-turn recipes)."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("fhir.resources")

from reasonrl.loop.checkpoint import latest_checkpoint  # noqa: E402

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def _train(model, out, *extra):
    return [
        sys.executable,
        "-m",
        "reasonrl.cli",
        "train",
        "--recipe",
        "codeact",
        "--model",
        str(model),
        "--out",
        str(out),
        "--steps",
        "4",
        "prompts_per_step=2",
        "group_size=4",
        "eval_every=0",
        "final_eval_problems=0",
        "save_every=2",
        "sampling.max_new_tokens=32",
        "task_options.n_patients=10",
        *extra,
    ]


def _values(run):
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith(("time/", "tokens_per_s"))} for r in rows]


@pytest.mark.slow
def test_a_codeact_run_killed_after_a_checkpoint_resumes_exactly(tiny_dir, tmp_path):
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    done = subprocess.run(_train(tiny_dir, straight), env=ENV, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    proc = subprocess.Popen(_train(tiny_dir, killed), env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ckpt, deadline = killed / "checkpoints" / "step-000002", time.monotonic() + 600
    while not ckpt.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    still_running = proc.poll() is None
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert still_running and latest_checkpoint(killed) == ckpt, "the run ended before its step-2 checkpoint was seen"
    done = subprocess.run(_train(tiny_dir, killed, "--resume"), env=ENV, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "resumed from checkpoints/step-000002 (step 2): continuing at step 3" in done.stdout
    want, got = _values(straight), _values(killed)
    assert [r["step"] for r in got] == [1, 2, 3, 4] and got == want
    assert all("episode/turns_mean" in r for r in got)  # the rows were episodes
