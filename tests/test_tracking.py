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
        {"step": 1, "reward/mean": 0.4, "accuracy": 0.5, "length/mean": 10.0, "length/max": 20,
         "loss/approx_kl": 0.01, "note": "text"},
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
