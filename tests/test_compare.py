import json
import math
from pathlib import Path

import pytest

import yaml

from reasonrl.compare import RunResult, area_under, collect, compare, parse_variant, run_dir_name, table_rows


def test_area_under_the_curve_is_the_mean_accuracy_over_training():
    # points (step, seconds, acc): (0, 0.4), (10, 0.6), (30, 0.6)
    # trapezoids: 10 * (0.4+0.6)/2 = 5 ; 20 * (0.6+0.6)/2 = 12 ; total 17 over 30 steps = 0.566667
    assert area_under([(0, 0.0, 0.4), (10, 5.0, 0.6), (30, 15.0, 0.6)]) == pytest.approx(17 / 30)
    assert area_under([(0, 0.0, 0.3)]) == 0.3


def _res(recipe, seed, final, ok=True):
    return RunResult(recipe, seed, Path("."), ok=ok, final=final, auc=final - 0.1, seconds=10.0 + seed, tokens=100.0)


def test_table_mean_std_best_and_welch_against_the_first_recipe():
    from scipy import stats

    results = [
        _res("a", 0, 0.5),
        _res("a", 1, 0.6),
        _res("a", 2, 0.7),
        _res("b", 0, 0.7),
        _res("b", 1, 0.8),
        _res("b", 2, float("nan"), ok=False),
    ]
    a, b = table_rows(results, ["a", "b"])
    # a: mean 0.6, std (ddof 1) sqrt(((0.1)^2 + 0 + (0.1)^2) / 2) = 0.1 ; b: two ok runs, mean 0.75
    assert a["final_mean"] == pytest.approx(0.6) and a["final_std"] == pytest.approx(0.1) and a["best"] == 0.7
    assert a["p_vs_first"] is None and a["seconds"] == pytest.approx(11.0)
    assert b["runs_ok"] == 2 and b["runs_failed"] == 1 and b["final_mean"] == pytest.approx(0.75)
    assert b["p_vs_first"] == pytest.approx(stats.ttest_ind([0.7, 0.8], [0.5, 0.6, 0.7], equal_var=False).pvalue)


def test_collect_reads_a_run_folder(tmp_path):
    (tmp_path / "summary.json").write_text(
        json.dumps({"train_seconds": 3.0, "before": {"pass@1": 0.4}, "after": {"pass@1": 0.7}})
    )
    rows = [
        {"step": 1, "time/generate": 1.0, "time/update": 0.5, "tokens/generated": 50.0},
        {"step": 2, "time/generate": 1.0, "time/update": 0.5, "tokens/generated": 60.0, "eval/pass@1": 0.6},
    ]
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    res = collect("grpo", 0, tmp_path)
    assert res.curve == [(0, 0.0, 0.4), (2, 3.0, 0.6)] and res.final == 0.7 and res.tokens == 110.0
    assert res.auc == pytest.approx((0.4 + 0.6) / 2)


def test_variant_entries_parse_into_a_recipe_and_its_overrides():
    assert parse_variant("vspo") == ("vspo", [])
    assert parse_variant("vspo:steering=null:group_size=4") == ("vspo", ["steering=null", "group_size=4"])
    with pytest.raises(ValueError, match="bad part"):
        parse_variant("dapo:clip_high")
    assert run_dir_name("vspo:steering=null") == "vspo__steering=null"


@pytest.mark.slow
def test_compare_runs_processes_and_reports_a_crash_without_stopping(tiny_dir, tmp_path):
    extra = [
        f"model={tiny_dir}",
        "prompts_per_step=2",
        "group_size=2",
        "eval_every=1",
        "eval_problems=4",
        "final_eval_problems=4",
        "final_eval_k=0",
        "save_every=0",
    ]
    # one good comparison, then one whose run crashes (an unknown task): the crash is reported
    # a variant entry: the recipe with its own override, in its own run folder
    report = compare(["grpo:loss.clip_high=0.3"], 1, 2, tmp_path, extra=extra)
    assert report["table"][0]["runs_ok"] == 1 and (tmp_path / "compare.png").stat().st_size > 0
    saved = yaml.safe_load((tmp_path / "grpo__loss.clip_high=0.3-seed0" / "config.yaml").read_text())
    assert saved["loss"]["clip_high"] == 0.3 and saved["recipe"] == "grpo"
    crashed = compare(["grpo"], 1, 2, tmp_path / "bad", task="no-such-task", extra=extra)
    run = crashed["runs"][0]
    assert not run["ok"] and "no-such-task" in run["error"] and crashed["table"][0]["runs_failed"] == 1
    # compare.json stays strict JSON: the crashed run's NaN final is written as null
    strict = json.loads(
        (tmp_path / "bad" / "compare.json").read_text(), parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}")
    )
    assert strict["runs"][0]["final"] is None


def test_zero_variance_p_value_is_null_in_compare_json():
    from reasonrl.compare import _json_safe

    # two recipes whose seeds all end at 0.3: Welch's t is 0/0, scipy gives NaN
    rows = table_rows([_res("a", 0, 0.3), _res("a", 1, 0.3), _res("b", 0, 0.3), _res("b", 1, 0.3)], ["a", "b"])
    assert math.isnan(rows[1]["p_vs_first"])
    assert _json_safe(rows)[1]["p_vs_first"] is None and _json_safe({"x": [float("inf"), 1.0]}) == {"x": [None, 1.0]}


def test_config_diff_names_every_differing_dotted_key():
    have = {"seed": 0, "loss": {"clip_high": 0.28, "clip_low": 0.2}, "tracking": ["jsonl"]}
    want = {"seed": 0, "loss": {"clip_high": 0.3, "clip_low": 0.2}, "tracking": ["jsonl"], "new": 1}
    from reasonrl.compare import config_diff

    assert config_diff(have, want) == ["loss.clip_high: 0.28 in the folder, 0.3 now", "new: None in the folder, 1 now"]
    assert config_diff(have, have) == []
    from reasonrl.compare import differing

    assert differing(have, want) == [("loss.clip_high", 0.28, 0.3), ("new", None, 1)]


def _fake_finished(run_dir: Path, config: dict, final: float) -> None:
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    (run_dir / "summary.json").write_text(json.dumps({"train_seconds": 1.0, "after": {"pass@1": final}}))
    (run_dir / "metrics.jsonl").write_text(json.dumps({"step": 1, "time/update": 1.0}) + "\n")


def test_resume_collects_finished_folders_continues_killed_ones_and_refuses_other_configs(tmp_path, monkeypatch):
    import subprocess
    from reasonrl.errors import UserError

    calls = []

    def fake_run(cmd, **kw):  # a trained run: record the command, write the folder it would leave
        calls.append(cmd)
        out = Path(cmd[cmd.index("--out") + 1])
        out.mkdir(parents=True, exist_ok=True)
        (out / "summary.json").write_text(json.dumps({"train_seconds": 2.0, "after": {"pass@1": 0.5}}))
        (out / "metrics.jsonl").write_text("")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(subprocess, "run", fake_run)
    expected = lambda recipe, seed, run_dir: {"recipe": recipe, "seed": seed, "out": str(run_dir)}  # noqa: E731
    _fake_finished(tmp_path / "grpo-seed0", expected("grpo", 0, tmp_path / "grpo-seed0"), final=0.123)
    killed = tmp_path / "grpo-seed1"  # config written, then killed before summary.json
    killed.mkdir()
    (killed / "config.yaml").write_text(yaml.safe_dump(expected("grpo", 1, killed)))
    report = compare(["grpo"], 3, 2, tmp_path, expected=expected)
    # seed 0 reused as is (a retrain would have written 0.5), seed 1 continued, seed 2 trained fresh
    assert [r["final"] for r in report["runs"]] == [0.123, 0.5, 0.5]
    assert len(calls) == 2 and "--resume" in calls[0] and "--resume" not in calls[1]
    assert calls[0][calls[0].index("--out") + 1] == str(killed)
    # a folder from another configuration is refused, naming the key
    other = tmp_path / "other"
    _fake_finished(other / "grpo-seed0", {**expected("grpo", 0, other / "grpo-seed0"), "seed": 7}, final=0.1)
    with pytest.raises(UserError, match="seed: 7 in the folder, 0 now"):
        compare(["grpo"], 1, 2, other, expected=expected)
    # without resume nothing is reused: the finished folder is trained again (train refuses checkpoints itself)
    calls.clear()
    compare(["grpo"], 1, 2, tmp_path)
    assert len(calls) == 1 and "--resume" not in calls[0]


@pytest.mark.slow
def test_compare_resume_through_the_cli_reuses_a_real_run(tiny_dir, tmp_path):
    from typer.testing import CliRunner

    from reasonrl.cli import app

    args = [
        "compare",
        "--recipes",
        "grpo",
        "--steps",
        "2",
        "--out",
        str(tmp_path),
        f"model={tiny_dir}",
        "prompts_per_step=2",
        "group_size=2",
        "eval_every=0",
        "final_eval_problems=4",
        "final_eval_k=0",
        "save_every=0",
    ]
    first = CliRunner().invoke(app, [*args, "--seeds", "1"])
    assert first.exit_code == 0, first.output
    summary = tmp_path / "grpo-seed0" / "summary.json"
    marked = {**json.loads(summary.read_text()), "after": {"pass@1": 0.123}}  # a retrain would overwrite it
    summary.write_text(json.dumps(marked))
    second = CliRunner().invoke(app, [*args, "--seeds", "2", "--resume"])
    assert second.exit_code == 0, second.output
    runs = json.loads((tmp_path / "compare.json").read_text())["runs"]
    assert runs[0]["final"] == 0.123 and runs[1]["ok"] and (tmp_path / "grpo-seed1" / "summary.json").exists()
    # another override than the folder's run: refused before anything trains
    third = CliRunner().invoke(app, [*args, "--seeds", "1", "--resume", "optim.lr=0.5"])
    assert third.exit_code != 0 and "optim.lr" in str(third.exception)


def test_compare_items_jsonl_keeps_each_runs_per_item_results_and_final_summary(tmp_path, monkeypatch):
    import subprocess

    def fake_run(cmd, **kw):  # seed s gets problem "b" right only when s == 1, "a" always
        out = Path(cmd[cmd.index("--out") + 1])
        seed = int(out.name[-1])  # the folder is grpo-seed<s>
        out.mkdir(parents=True, exist_ok=True)
        (out / "summary.json").write_text(
            json.dumps({"train_seconds": 1.0, "after": {"pass@1": 0.5 + 0.5 * seed, "mean_length": 7.0}})
        )
        (out / "metrics.jsonl").write_text("")
        (out / "after_items.jsonl").write_text(
            json.dumps({"key": "a", "correct": True}) + "\n" + json.dumps({"key": "b", "correct": seed == 1}) + "\n"
        )
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(subprocess, "run", fake_run)
    compare(["grpo"], 2, 2, tmp_path)
    rows = [json.loads(line) for line in (tmp_path / "compare_items.jsonl").read_text().splitlines()]
    assert [(r["recipe"], r["seed"], r["ok"]) for r in rows] == [("grpo", 0, True), ("grpo", 1, True)]
    assert rows[0]["items"] == {"a": True, "b": False} and rows[1]["items"] == {"a": True, "b": True}
    assert rows[1]["after"] == {"pass@1": 1.0, "mean_length": 7.0}
    # compare.json stays small: the items and summaries live only in compare_items.jsonl
    assert "items" not in json.loads((tmp_path / "compare.json").read_text())["runs"][0]
