"""Paired statistics (reasonrl.eval.paired), the per-item results a run folder keeps, and the paired
columns of `reasonrl compare` and `reasonrl eval --against`."""

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from reasonrl.compare import RunResult, collect, paired_vs_first, table_rows
from reasonrl.errors import UserError
from reasonrl.eval.paired import (
    discordant,
    load_item_results,
    mcnemar_exact,
    paired_bootstrap_ci,
    paired_by_key,
    paired_tests,
    sign_test,
)

# The Physics-R1 paper's Estonian/English olympiad set (spec envs-selfplay-eval.md section 7(b)):
# 59 items, ET right on 18, EN right on 8, b = 13 only ET, c = 3 only EN, so 18 - 13 = 5 both and
# 59 - 5 - 13 - 3 = 38 neither. The spec gives counts, not the item order; the order used here is
# both, only-ET, only-EN, neither (see test_paper_bootstrap_ci for what the order changes).
PAPER_ET = [1] * 5 + [1] * 13 + [0] * 3 + [0] * 38
PAPER_EN = [1] * 5 + [0] * 13 + [1] * 3 + [0] * 38


def test_paper_counts_sign_test_and_exact_mcnemar():
    assert discordant(PAPER_ET, PAPER_EN) == (13, 3)
    assert (sum(PAPER_ET), sum(PAPER_EN), len(PAPER_ET)) == (18, 8, 59)
    # X ~ Bin(16, 1/2): P(X >= 13) = (C(16,13) + C(16,14) + C(16,15) + C(16,16)) / 2^16
    #                              = (560 + 120 + 16 + 1) / 65536 = 697 / 65536 = 0.010635...
    assert sign_test(13, 3, "greater") == 697 / 65536
    assert round(sign_test(13, 3), 4) == 0.0106  # the paper's one-sided 0.011
    # exact McNemar = two-sided sign test = 2 * 697 / 65536 = 0.021271 (paper: 0.021)
    assert mcnemar_exact(13, 3) == 1394 / 65536 and round(mcnemar_exact(13, 3), 4) == 0.0213
    assert sign_test(3, 13, "less") == 697 / 65536  # the same tail seen from the other side


@pytest.mark.parametrize(
    "b,c,alternative,expected",
    [
        (2, 0, "greater", 0.25),  # n = 2: P(X >= 2) = 1/4
        (2, 0, "two-sided", 0.5),  # 2 * 1/4
        (2, 0, "less", 1.0),  # P(X <= 2) = 1
        (1, 1, "greater", 0.75),  # n = 2: P(X >= 1) = 3/4
        (1, 1, "two-sided", 1.0),  # min(1, 2 * 3/4)
        (0, 3, "less", 0.125),  # n = 3: P(X <= 0) = 1/8
        (0, 3, "two-sided", 0.25),  # 2 * 1/8
        (5, 1, "greater", 7 / 64),  # n = 6: (C(6,5) + C(6,6)) / 64 = 7/64 = 0.109375
        (0, 0, "two-sided", 1.0),  # no discordant pair: no evidence
        (0, 0, "greater", 1.0),
    ],
)
def test_sign_test_hand_computed(b, c, alternative, expected):
    assert sign_test(b, c, alternative) == pytest.approx(expected, abs=1e-15)


def test_sign_test_and_mcnemar_match_scipy_binomtest():
    from scipy.stats import binomtest

    for b in range(0, 25, 3):
        for c in range(0, 25, 4):
            if b + c == 0:
                continue
            for alt in ("greater", "less", "two-sided"):
                assert sign_test(b, c, alt) == pytest.approx(
                    binomtest(b, b + c, 0.5, alternative=alt).pvalue, rel=1e-12, abs=1e-300
                ), (b, c, alt)
            assert mcnemar_exact(b, c) == pytest.approx(binomtest(b, b + c, 0.5).pvalue, rel=1e-12)
    # a large count stays exact and finite (integer tail, one rounding): scipy agrees
    assert sign_test(700, 600, "greater") == pytest.approx(binomtest(700, 1300, alternative="greater").pvalue, rel=1e-9)


def test_sign_test_rejects_bad_arguments():
    with pytest.raises(ValueError, match="alternative"):
        sign_test(1, 2, "bigger")
    with pytest.raises(ValueError, match="non-negative"):
        sign_test(-1, 2)


def test_paper_bootstrap_ci():
    ci = paired_bootstrap_ci(PAPER_ET, PAPER_EN, B=10_000, seed=0)
    # difference of means: (18 - 8) / 59 = 10/59 = 0.16949 (16.9 points)
    assert ci.diff == pytest.approx(10 / 59)
    # spec: [5.08, 28.81] pp with seed 0 (paper: [+5.1, +28.9]). A resampled difference is a
    # multiple of 1/59, so the bounds are grid points: 3/59 = 5.08 pp and 17/59 = 28.81 pp.
    assert 100 * ci.low == pytest.approx(100 * 3 / 59) and round(100 * ci.low, 2) == 5.08
    assert 100 * ci.high == pytest.approx(100 * 17 / 59) and round(100 * ci.high, 2) == 28.81


def test_bootstrap_matches_scipy_and_a_direct_numpy_draw():
    from scipy import stats

    rng = np.random.default_rng(5)
    x, y = rng.integers(0, 2, 300), rng.integers(0, 2, 300)
    ours = paired_bootstrap_ci(x, y, B=3000, seed=3)
    ref = stats.bootstrap(
        (x, y),
        lambda a, b, axis=-1: a.mean(axis) - b.mean(axis),
        paired=True,
        vectorized=True,
        n_resamples=3000,
        method="percentile",
        rng=np.random.default_rng(3),
    ).confidence_interval
    assert (ours.low, ours.high) == pytest.approx((ref.low, ref.high), abs=1e-12)
    # 20,000 items: the resamples are drawn in blocks of rows; the stream equals one (B, n) draw
    x, y = rng.integers(0, 2, 20_000), rng.integers(0, 2, 20_000)
    d = (x - y).astype(float)
    means = d[np.random.default_rng(1).integers(0, 20_000, (500, 20_000))].mean(1)
    blocked = paired_bootstrap_ci(x, y, B=500, seed=1, level=0.9)
    assert (blocked.low, blocked.high) == pytest.approx(tuple(np.percentile(means, [5, 95])), abs=1e-15)


def test_bootstrap_degenerate_cases_are_exact():
    # every item: x right, y wrong -> every resample has difference 1; equal flags -> 0
    assert paired_bootstrap_ci([1, 1, 1], [0, 0, 0], B=50) == (1.0, 1.0, 1.0)
    assert paired_bootstrap_ci([1, 0, 1], [1, 0, 1], B=50) == (0.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="B >= 1"):
        paired_bootstrap_ci([1], [0], B=0)
    with pytest.raises(ValueError, match="level"):
        paired_bootstrap_ci([1], [0], level=95)


def test_flags_are_checked():
    with pytest.raises(ValueError, match="same items"):
        discordant([1, 0], [1])
    with pytest.raises(ValueError, match="item 1 is 2"):
        discordant([1, 2], [0, 0])
    with pytest.raises(ValueError, match="at least one item"):
        discordant([], [])
    assert discordant([True, False, True, False], [False, True, True, False]) == (1, 1)


def test_paired_tests_summary_hand_computed():
    # x: 1 1 1 0 ; y: 0 0 1 1 -> b = 2 (items 0, 1), c = 1 (item 3); n = 3:
    # P(X >= 2) = (3 + 1) / 8 = 0.5, two-sided min(1, 2 * 0.5) = 1; accuracies 0.75 / 0.5
    res = paired_tests([1, 1, 1, 0], [0, 0, 1, 1], B=200)
    assert (res["b"], res["c"], res["n_items"]) == (2, 1, 4)
    assert res["sign_p_greater"] == 0.5 and res["mcnemar_p"] == 1.0
    assert (res["acc_x"], res["acc_y"], res["diff"]) == pytest.approx((0.75, 0.5, 0.25))
    assert res["ci_low"] <= 0.25 <= res["ci_high"]


def test_paired_by_key_aligns_and_names_missing_keys():
    res = paired_by_key({"q2": True, "q1": False}, {"q1": True, "q2": False}, B=10)
    assert (res["b"], res["c"]) == (1, 1)  # q2 only mine, q1 only the other
    with pytest.raises(UserError, match=r"1 missing from this evaluation \['q3'\].*1 missing from the other \['q2'\]"):
        paired_by_key({"q1": True, "q2": False}, {"q1": True, "q3": False})


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_load_item_results_keeps_greedy_records_and_fails_loudly(tmp_path):
    rows = [
        {"key": "a", "mode": "greedy", "correct": True},
        {"key": "a", "mode": "sampled", "correct": False},
        {"key": "b", "mode": "greedy", "correct": False},
    ]
    assert load_item_results(_jsonl(tmp_path / "s.jsonl", rows)) == {"a": True, "b": False}
    with pytest.raises(UserError, match="appears twice"):
        load_item_results(_jsonl(tmp_path / "d.jsonl", rows[:1] * 2))
    with pytest.raises(UserError, match="without 'key'"):
        load_item_results(_jsonl(tmp_path / "old.jsonl", [{"problem": 0, "mode": "greedy", "correct": True}]))
    with pytest.raises(UserError, match="no greedy"):
        load_item_results(_jsonl(tmp_path / "s2.jsonl", rows[1:2]))
    with pytest.raises(UserError, match="no per-item results file"):
        load_item_results(tmp_path / "nope.jsonl")


def _run_folder(path: Path, flags: dict[str, bool]) -> Path:
    """A finished run folder as run.py writes it, by hand: summary, metrics, after_items.jsonl."""
    path.mkdir(parents=True)
    acc = sum(flags.values()) / len(flags)
    (path / "summary.json").write_text(
        json.dumps({"train_seconds": 1.0, "before": {"pass@1": 0.1}, "after": {"pass@1": acc}})
    )
    (path / "metrics.jsonl").write_text(json.dumps({"step": 1, "tokens/generated": 10.0}) + "\n")
    _jsonl(
        path / "after_items.jsonl",
        [
            {"problem": i, "key": k, "mode": "greedy", "score": float(v), "correct": v}
            for i, (k, v) in enumerate(flags.items())
        ],
    )
    return path


def test_compare_pools_items_over_seeds(tmp_path):
    T, F = True, False
    base = {0: {"p1": T, "p2": F, "p3": F, "p4": T}, 1: {"p1": F, "p2": F, "p3": T, "p4": T}}
    new = {0: {"p1": T, "p2": T, "p3": T, "p4": F}, 1: {"p1": T, "p2": F, "p3": T, "p4": T}}
    results = [
        collect(name, s, _run_folder(tmp_path / f"{name}-{s}", flags[s]))
        for name, flags in (("base", base), ("new", new))
        for s in (0, 1)
    ]
    first, second = table_rows(results, ["base", "new"])
    assert first["paired_vs_first"] is None and "paired_skipped" not in first
    pt = second["paired_vs_first"]
    # seed 0: new right / base wrong on p2, p3 (b += 2); base right / new wrong on p4 (c += 1)
    # seed 1: new right / base wrong on p1 (b += 1); none the other way
    # pooled: 8 pairs, b = 3, c = 1; n = 4: P(X >= 3) = (4 + 1) / 16 = 0.3125, McNemar 0.625
    assert (pt["n_items"], pt["b"], pt["c"], pt["seeds"]) == (8, 3, 1, [0, 1])
    assert pt["sign_p_greater"] == 0.3125 and pt["mcnemar_p"] == 0.625
    assert pt["acc_x"] == 6 / 8 and pt["acc_y"] == 4 / 8 and pt["diff"] == pytest.approx(2 / 8)
    assert second["p_vs_first"] is not None  # Welch over the two seeds is still there


def test_compare_pairs_only_seeds_both_ran_and_reports_why_it_cannot(tmp_path):
    a0 = collect("a", 0, _run_folder(tmp_path / "a0", {"p1": True, "p2": False}))
    b0 = collect("b", 0, _run_folder(tmp_path / "b0", {"p1": False, "p2": True}))
    b1 = collect("b", 1, _run_folder(tmp_path / "b1", {"p1": True, "p2": True}))
    crashed = RunResult("a", 1, tmp_path, ok=False, error="boom")
    pt, why = paired_vs_first([a0, crashed, b0, b1], "b", "a")
    assert why == "" and pt["seeds"] == [0] and (pt["b"], pt["c"]) == (1, 1)  # seed 1 of a crashed
    other_items = collect("b", 0, _run_folder(tmp_path / "bx", {"p1": True, "p9": True}))
    pt, why = paired_vs_first([a0, other_items], "b", "a")
    assert pt is None and "seed 0" in why and "p9" in why and "p2" in why
    no_items = dataclasses.replace(b0, items={})  # a run with final_eval_problems=0
    row = table_rows([a0, no_items], ["a", "b"])[1]
    assert row["paired_vs_first"] is None and "after_items.jsonl" in row["paired_skipped"]


def test_compare_table_shows_the_paired_columns(tmp_path):
    from rich.console import Console

    from reasonrl.commands.evaluate import _compare_table

    a0 = collect("a", 0, _run_folder(tmp_path / "a0", {"p1": True, "p2": False, "p3": False}))
    b0 = collect("b", 0, _run_folder(tmp_path / "b0", {"p1": True, "p2": True, "p3": True}))
    report = {"task": "t", "steps": 1, "seeds": 1, "table": table_rows([a0, b0], ["a", "b"])}
    console = Console(width=250, record=True)
    console.print(_compare_table(report, tmp_path))
    text = console.export_text()
    # b = 2, c = 0: McNemar 2 * 1/4 = 0.5; difference 3/3 - 1/3 = +0.667
    assert "McNemar p (b/c)" in text and "0.5 (2/0)" in text and "+0.667 [" in text


@pytest.mark.slow
def test_run_folder_keeps_per_item_results_and_eval_against_reads_them(tiny_dir, tmp_path):
    from reasonrl.cli import app
    from reasonrl.config.train import TrainConfig
    from reasonrl.recipes import get_recipe
    from reasonrl.loop.run import train_run

    cfg = TrainConfig(
        model=str(tiny_dir),
        out=str(tmp_path / "run"),
        steps=1,
        prompts_per_step=2,
        eval_every=0,
        final_eval_problems=4,
        final_eval_k=0,
        save_every=0,
    )
    summary = train_run(cfg, dataclasses.replace(get_recipe("grpo"), group_size=2))
    items = load_item_results(tmp_path / "run" / "after_items.jsonl")
    assert len(items) == 4 and sum(items.values()) / 4 == summary["after"]["pass@1"]
    runner = CliRunner()
    samples = tmp_path / "s.jsonl"
    res = runner.invoke(
        app,
        [
            "eval",
            "--model",
            str(tiny_dir),
            "--problems",
            "4",
            "--samples-per-problem",
            "0",
            "--samples",
            str(samples),
            "--json",
            str(tmp_path / "e.json"),
            "--against",
            str(tmp_path / "run" / "after_items.jsonl"),
        ],
    )
    assert res.exit_code == 0, res.output
    against = json.loads((tmp_path / "e.json").read_text())["against"]
    assert against["n_items"] == 4 and against["acc_y"] == summary["after"]["pass@1"]  # the same 4 problems
    res = runner.invoke(
        app,
        [
            "eval",
            "--model",
            str(tiny_dir),
            "--problems",
            "4",
            "--samples-per-problem",
            "0",
            "--json",
            str(tmp_path / "f.json"),
            "--against",
            str(samples),
        ],
    )
    assert res.exit_code == 0, res.output
    same = json.loads((tmp_path / "f.json").read_text())["against"]  # one model against itself
    assert (same["b"], same["c"], same["mcnemar_p"]) == (0, 0, 1.0)
    res = runner.invoke(
        app,
        ["eval", "--model", str(tiny_dir), "--problems", "3", "--samples-per-problem", "0", "--against", str(samples)],
    )
    assert res.exit_code != 0 and "1 missing from this evaluation" in str(res.exception)
