import importlib.util
import json
import math

import pytest

from reasonrl.loop.plots import plot_curves
from reasonrl.loop.tracking import JsonlSink, make_tracker, numeric_only, read_metrics


def _log_steps(tracker, steps):
    for s in steps:
        tracker.log({"reward/mean": 0.1 * s, "note": f"s{s}"}, step=s)


def test_jsonl_written_and_read_back(tmp_path):
    tracker = make_tracker([], tmp_path, {"lr": 1e-3}, "run")
    tracker.log({"reward/mean": 0.5, "loss/kl": float("nan"), "note": "hello"}, step=0)
    # Flushed per line: readable before close.
    assert read_metrics(tmp_path / "metrics.jsonl")[0]["step"] == 0
    tracker.log({"reward/mean": 0.75}, step=1)
    tracker.close()
    recs = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in recs] == [0, 1]
    assert recs[0]["reward/mean"] == 0.5 and recs[0]["note"] == "hello"
    assert math.isnan(recs[0]["loss/kl"])  # Python's default NaN token round-trips
    assert recs[1] == {"step": 1, "reward/mean": 0.75}


def test_jsonl_rejects_step_key(tmp_path):
    sink = JsonlSink(tmp_path / "metrics.jsonl", None)
    with pytest.raises(ValueError, match="step"):
        sink.log({"step": 3}, step=3)
    sink.close()


def test_resume_matches_straight_run_and_leaves_no_temp(tmp_path):
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    with make_tracker(["jsonl"], straight, {}, "a") as t:
        _log_steps(t, range(6))
    # Interrupted run: got to step 4, but its last checkpoint was at step 2.
    with make_tracker(["jsonl"], resumed, {}, "b") as t:
        _log_steps(t, range(5))
    with open(resumed / "metrics.jsonl", "a") as fh:
        fh.write('{"step": 5, "rew')  # a line cut short by the kill
    with make_tracker(["jsonl"], resumed, {}, "b", resume_from_step=2) as t:
        assert [r["step"] for r in read_metrics(resumed / "metrics.jsonl")] == [0, 1, 2]
        _log_steps(t, range(3, 6))
    assert (resumed / "metrics.jsonl").read_bytes() == (straight / "metrics.jsonl").read_bytes()
    assert sorted(p.name for p in resumed.iterdir()) == ["metrics.jsonl"]


def test_resume_without_file_fails(tmp_path):
    with pytest.raises(FileNotFoundError):
        JsonlSink(tmp_path / "metrics.jsonl", resume_from_step=3)


def test_fresh_run_starts_file_anew(tmp_path):
    with make_tracker([], tmp_path, {}, "a") as t:
        _log_steps(t, range(3))
    with make_tracker([], tmp_path, {}, "a") as t:
        _log_steps(t, [0])
    assert len(read_metrics(tmp_path / "metrics.jsonl")) == 1


def test_unknown_kind(tmp_path):
    with pytest.raises(ValueError, match="valid kinds.*jsonl.*tensorboard.*wandb.*trackio"):
        make_tracker(["jsonl", "mlflow"], tmp_path, {}, "run")


@pytest.mark.parametrize("kind", ["wandb", "trackio"])
def test_missing_package_error(tmp_path, kind):
    if importlib.util.find_spec(kind) is not None:
        pytest.skip(f"{kind} is installed here")
    with pytest.raises(ImportError) as info:
        make_tracker([kind], tmp_path, {}, "run")
    assert str(info.value) == (
        f"tracking {kind!r} was requested but the package {kind!r} is not installed: pip install {kind}"
    )
    # Validation happens before any sink opens, so nothing was created.
    assert not (tmp_path / "metrics.jsonl").exists()


def test_tensorboard_writes_event_file(tmp_path):
    if importlib.util.find_spec("tensorboard") is None:
        pytest.skip("tensorboard is not installed")
    with make_tracker(["tensorboard"], tmp_path, {}, "run") as t:
        t.log({"reward/mean": 0.5, "note": "text stays jsonl-only"}, step=1)
    events = list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    assert events and events[0].stat().st_size > 0


def test_numeric_only_drops_strings():
    assert numeric_only({"a": 1, "b": 0.5, "c": "x", "d": None, "e": True}) == {"a": 1.0, "b": 0.5, "e": 1.0}


def test_invalid_step(tmp_path):
    with make_tracker([], tmp_path, {}, "run") as t:
        with pytest.raises(ValueError, match="step"):
            t.log({"a": 1}, step=-1)


def test_plot_curves_with_missing_keys(tmp_path):
    records = [
        {"step": 0, "reward/mean": 0.2, "reward/std": 0.1, "accuracy": 0.3, "length/mean": 12.0},
        {
            "step": 1,
            "reward/mean": 0.4,
            "accuracy": 0.5,
            "length/mean": 10.0,
            "length/max": 20,
            "loss/approx_kl": 0.01,
            "note": "text",
        },
        {"step": 2, "reward/mean": float("nan"), "eval/pass@1": 0.45},
    ]
    out = plot_curves(records, tmp_path / "sub" / "curves.png", eval_records=[{"step": 2, "eval/pass@1": 0.5}])
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 1000
    empty = plot_curves([], tmp_path / "empty.png")
    assert empty.stat().st_size > 1000


def test_metrics_lines_are_plain_json_objects(tmp_path):
    with make_tracker([], tmp_path, {}, "run") as t:
        t.log({"x": 1}, step=7)
    line = (tmp_path / "metrics.jsonl").read_text()
    assert line.endswith("\n") and json.loads(line) == {"step": 7, "x": 1}


# ---- issue 46: every sink exercised with its real package (wandb offline, TensorBoard, trackio locally) ----


def test_a_string_names_one_sink_not_its_letters():
    from reasonrl.loop.tracking import tracking_kinds, tracking_problems

    assert tracking_kinds("jsonl") == ["jsonl"] and tracking_kinds("jsonl, tensorboard") == ["jsonl", "tensorboard"]
    assert tracking_kinds(["jsonl"]) == ["jsonl"]
    assert tracking_problems("jsonl") == []
    assert tracking_problems("wandbb") == [
        "config key 'tracking' names the unknown sink 'wandbb' (did you mean "
        "'wandb'?); valid sinks: jsonl, tensorboard, wandb, trackio"
    ]


def test_tensorboard_events_hold_the_logged_scalars(tmp_path):
    pytest.importorskip("tensorboard")  # in the [test] extra (issue 46): CI runs this
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    with make_tracker("tensorboard", tmp_path, {}, "run") as t:
        t.log({"reward/mean": 0.5, "note": "text stays jsonl-only"}, step=1)
        t.log({"reward/mean": 0.25}, step=2)
    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    assert acc.Tags()["scalars"] == ["reward/mean"]
    assert [(e.step, e.value) for e in acc.Scalars("reward/mean")] == [(1, 0.5), (2, 0.25)]


def _wandb_ids(run_dir):
    """The run ids of the offline wandb runs in ``run_dir`` (folders offline-run-<time>-<id>)."""
    return sorted(p.name.rsplit("-", 1)[1] for p in (run_dir / "wandb").glob("offline-run-*"))


def test_wandb_offline_run_and_its_resume_share_one_id(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    run = tmp_path / "run"
    with make_tracker(["wandb"], run, {"seed": 0}, "run") as t:
        t.log({"reward/mean": 0.5}, step=1)
        first = t.sinks[1].run_id
    assert (run / "wandb_run_id").read_text().strip() == first
    with make_tracker(["wandb"], run, {"seed": 0}, "run", resume_from_step=1) as t:  # --resume: the same wandb run
        t.log({"reward/mean": 0.75}, step=2)
        assert t.sinks[1].run_id == first
    assert _wandb_ids(run) == [first, first]
    with make_tracker(["wandb"], run, {"seed": 0}, "run") as t:  # a fresh run in the folder: a new wandb run
        fresh = t.sinks[1].run_id
    assert fresh != first and sorted(_wandb_ids(run)) == sorted([first, first, fresh])


_TRACKIO_RUN = """
import json, sys
from pathlib import Path
from reasonrl.loop.tracking import make_tracker
from trackio.sqlite_storage import SQLiteStorage
run = Path(sys.argv[1])
with make_tracker(["trackio"], run, {}, "run") as t:
    t.log({"reward/mean": 0.5}, step=1)
    t.log({"reward/mean": 0.25, "note": "x"}, step=2)
with make_tracker(["trackio"], run, {}, "run", resume_from_step=2) as t:
    t.log({"reward/mean": 0.125}, step=3)
logs = SQLiteStorage.get_logs("reasonrl", "run")
print(json.dumps({"runs": SQLiteStorage.get_runs("reasonrl"),
                  "rows": [[m["step"], m["reward/mean"]] for m in logs if "reward/mean" in m]}))
"""


def test_trackio_logs_locally(tmp_path):
    """In a process of its own: trackio reads TRACKIO_DIR (its local store) once, at import."""
    import os
    import subprocess
    import sys

    pytest.importorskip("trackio")
    env = {**os.environ, "TRACKIO_DIR": str(tmp_path / "store")}
    done = subprocess.run(
        [sys.executable, "-c", _TRACKIO_RUN, str(tmp_path / "run")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["runs"] == ["run"]  # the resumed process continued the same named run
    assert found["rows"] == [[1, 0.5], [2, 0.25], [3, 0.125]]
    assert (tmp_path / "store").is_dir()


def test_config_reads_a_string_as_one_sink_and_a_missing_package_is_one_line(monkeypatch):
    import reasonrl.loop.tracking as tracking
    from reasonrl.config.train import split_config

    assert split_config({"tracking": "wandb"})[0].tracking == ["wandb"]  # was ['w', 'a', 'n', 'd', 'b']
    assert split_config({"tracking": "jsonl,tensorboard"})[0].tracking == ["jsonl", "tensorboard"]
    real = importlib.util.find_spec
    monkeypatch.setattr(
        tracking.importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a)
    )
    assert tracking.tracking_problems(["jsonl", "wandb"]) == [
        "config key 'tracking' asks for 'wandb', whose package 'wandb' is not installed: pip install wandb "
        "(or drop wandb from tracking)"
    ]
