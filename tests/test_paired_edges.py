"""Edges of the paired tests (issue 45: the mutation survivors of ``eval/paired.py``): the per-item values
bootstrap by hand, what ``paired_tests`` / ``paired_by_key`` pass through, and every way
``load_item_results`` reads or refuses a file. Numbers are worked out in the comments."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import numpy as np
import pytest

from reasonrl.errors import UserError
from reasonrl.eval.paired import (
    BootstrapCI,
    load_item_results,
    pair_by_key,
    paired_bootstrap_ci,
    paired_bootstrap_values_ci,
    paired_by_key,
    paired_tests,
    sign_test,
)


def test_values_bootstrap_of_two_items_by_hand():
    # d = x - y = [0.0, 1.0] (values, not flags: 0.75 - 0.75 and 1.0 - 0.0); a resample of 2 items has mean
    # 0 (both item 0, prob 1/4), 0.5 (one of each, 1/2) or 1 (both item 1, 1/4). With B = 4000 about 1000
    # resamples are 0 and 1000 are 1 (sd ~27), so the 2.5% and 97.5% percentiles are 0 and 1, and the 30% and
    # 70% ones fall inside the block of 0.5s (sorted positions ~1000..3000 hold 0.5; 0.3 * 3999 = 1200).
    x, y = [0.75, 1.0], [0.75, 0.0]
    assert paired_bootstrap_values_ci(x, y, B=4000, seed=0) == BootstrapCI(0.5, 0.0, 1.0)
    assert paired_bootstrap_values_ci(x, y, B=4000, seed=0, level=0.4) == BootstrapCI(0.5, 0.5, 0.5)
    # constant differences: every resample has the same mean 0.25
    assert paired_bootstrap_values_ci([0.5, 0.75], [0.25, 0.5], B=20) == BootstrapCI(0.25, 0.25, 0.25)


def test_values_bootstrap_bounds_are_inclusive_and_shapes_checked():
    assert paired_bootstrap_values_ci([0.0, 1.0], [1.0, 0.0], B=5).diff == 0.0  # 0 and 1 are in [0, 1]
    for x, y in (([-0.01], [0.0]), ([1.01], [0.0]), ([0.0], [-0.01]), ([0.5], [1.01])):
        with pytest.raises(ValueError, match=r"^paired values must lie in \[0, 1\]"):
            paired_bootstrap_values_ci(x, y, B=5)
    for x, y, shapes in (
        ([[0.5]], [[0.5]], "(1, 1), (1, 1)"),
        ([0.5, 0.5], [0.5], "(2,), (1,)"),
        ([], [], "(0,), (0,)"),
    ):
        with pytest.raises(
            ValueError, match=rf"same items, got shapes {shapes.replace('(', '[(]').replace(')', '[)]')}$"
        ):
            paired_bootstrap_values_ci(x, y, B=5)


@pytest.mark.parametrize("level", [0.0, 1.0, -0.5])
def test_level_must_lie_strictly_between_0_and_1(level):
    with pytest.raises(ValueError, match=rf"0 < level < 1, got {level}"):
        paired_bootstrap_values_ci([0.5], [0.5], level=level)
    assert paired_bootstrap_values_ci([0.5], [0.5], B=1, level=0.999).diff == 0.0  # just inside: fine


def test_one_resample_is_enough_and_zero_is_refused():
    # B = 1: one resample of the single item, its mean 1 - 0 = 1 at every percentile
    assert paired_bootstrap_ci([1], [0], B=1) == BootstrapCI(1.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="B >= 1 resamples, got 0"):
        paired_bootstrap_values_ci([0.5], [0.5], B=0)


def test_paired_tests_passes_its_bootstrap_settings_through():
    x, y = [1, 0, 1, 1, 0, 0, 1], [0, 0, 1, 0, 1, 0, 0]  # b = 3 (items 0, 3, 6), c = 1 (item 4)
    res = paired_tests(x, y, B=300, seed=7)
    ci = paired_bootstrap_ci(x, y, B=300, seed=7)
    assert (res["diff"], res["ci_low"], res["ci_high"]) == tuple(ci)
    assert (res["bootstrap_B"], res["bootstrap_seed"]) == (300, 7)
    # another seed gives another interval on these items (so the seed above really reached the bootstrap)
    assert paired_bootstrap_ci(x, y, B=300, seed=0) != ci
    # diff = 4/7 - 2/7 = 2/7
    assert res["diff"] == pytest.approx(2 / 7)


def test_paired_tests_one_sided_p_is_for_x_better():
    # x = 0 0 1, y = 1 1 1: b = 0, c = 2, n = 2. "greater" (x better): P(X >= 0) = 1;
    # McNemar: min(1, 2 * min(P(X >= 0), P(X <= 0))) = 2 * 1/4 = 0.5
    res = paired_tests([0, 0, 1], [1, 1, 1], B=10)
    assert (res["b"], res["c"], res["sign_p_greater"], res["mcnemar_p"]) == (0, 2, 1.0, 0.5)
    assert (res["acc_x"], res["acc_y"]) == pytest.approx((1 / 3, 1.0))


def test_paired_by_key_aligns_sorted_keys_and_passes_b_and_seed():
    mine = {"q3": True, "q1": True, "q2": False, "q4": True}
    other = {"q1": False, "q2": True, "q3": True, "q4": False}
    # sorted keys q1..q4: x = 1 0 1 1, y = 0 1 1 0 -> b = 2 (q1, q4), c = 1 (q2)
    assert pair_by_key(mine, other) == ([True, False, True, True], [False, True, True, False])
    res = paired_by_key(mine, other, B=40, seed=3)
    assert res == paired_tests([1, 0, 1, 1], [0, 1, 1, 0], B=40, seed=3)
    assert (res["b"], res["c"], res["bootstrap_B"], res["bootstrap_seed"]) == (2, 1, 40, 3)


def test_pair_by_key_gives_bools_and_names_at_most_five_missing_keys():
    xs, ys = pair_by_key({"a": 1, "b": 0}, {"a": 0, "b": 1})
    assert [type(v) for v in xs + ys] == [bool] * 4 and (xs, ys) == ([True, False], [False, True])
    mine = {f"k{i}": True for i in range(8)}  # k0..k7; the other has k0 and z0..z6
    other = {"k0": True, **{f"z{i}": False for i in range(7)}}
    with pytest.raises(UserError) as err:
        pair_by_key(mine, other)
    assert str(err.value) == (
        "paired tests need the same problems on both sides: 7 missing from this evaluation "
        "['z0', 'z1', 'z2', 'z3', 'z4'], 7 missing from the other ['k1', 'k2', 'k3', 'k4', 'k5']; evaluate both "
        "with the same task, number of problems and eval seed"
    )
    # one side's extra key alone is enough to refuse
    with pytest.raises(UserError, match=r"0 missing from this evaluation \[\], 1 missing from the other \['k1'\]"):
        pair_by_key({"k0": True, "k1": True}, {"k0": False})
    with pytest.raises(UserError, match=r"1 missing from this evaluation \['k1'\], 0 missing from the other \[\]"):
        pair_by_key({"k0": True}, {"k0": False, "k1": True})


def test_defaults_are_the_papers_bootstrap():
    # Physics-R1 reports B = 10,000 resamples with seed 0: the defaults of every entry point
    x, y = [1, 0, 1, 1, 0], [0, 0, 1, 0, 1]
    res = paired_tests(x, y)
    assert (res["bootstrap_B"], res["bootstrap_seed"]) == (10_000, 0)
    assert paired_by_key(dict(zip("abcde", x)), dict(zip("abcde", y))) == res
    ci = paired_bootstrap_ci(x, y, B=10_000, seed=0, level=0.95)
    assert paired_bootstrap_ci(x, y) == ci == (res["diff"], res["ci_low"], res["ci_high"])
    xv, yv = [0.5, 1.0, 0.0, 0.75, 0.2, 0.9, 0.4], [0.25, 0.0, 0.0, 0.5, 0.6, 0.1, 0.4]
    assert paired_bootstrap_values_ci(xv, yv) == paired_bootstrap_values_ci(xv, yv, B=10_000, seed=0, level=0.95)
    # and another seed or B moves the interval on these items, so the comparisons above can fail
    assert paired_bootstrap_values_ci(xv, yv, seed=1) != paired_bootstrap_values_ci(xv, yv)
    # with 0/1 flags the resampled means lie on the grid k/n, so one resample more or less rarely moves a
    # percentile: the default B is pinned on the signature (the documented API), the seed by its effect
    for fn in (paired_bootstrap_ci, paired_bootstrap_values_ci):
        assert inspect.signature(fn).parameters["B"].default == 10_000
    # per-item values spread over [0, 1]: the resampled means are (almost) all distinct, so one resample more moves
    # the percentiles, and the default is seen by its effect too
    xu, yu = np.random.default_rng(7).random(200), np.random.default_rng(8).random(200)
    default = paired_bootstrap_values_ci(xu, yu)
    assert default == paired_bootstrap_values_ci(xu, yu, B=10_000) != paired_bootstrap_values_ci(xu, yu, B=10_001)
    xs = np.random.default_rng(1).integers(0, 2, 59)
    ys = np.random.default_rng(2).integers(0, 2, 59)
    assert paired_bootstrap_ci(xs, ys) == paired_bootstrap_ci(xs, ys, seed=0) != paired_bootstrap_ci(xs, ys, seed=1)


def test_blocks_of_resamples_give_the_same_stream_as_one_draw():
    # n = 2^20 items: (1 << 22) // n = 4 resample rows per block, so B = 10 is drawn in blocks of 4, 4, 2;
    # the documented claim: the result equals one (B, n) draw from default_rng(seed)
    n, B = 1 << 20, 10
    x = np.random.default_rng(5).integers(0, 2, n)
    y = np.random.default_rng(6).integers(0, 2, n)
    d = x.astype(np.float64) - y
    means = d[np.random.default_rng(3).integers(0, n, (B, n))].mean(axis=1)  # (B,)
    low, high = np.percentile(means, [2.5, 97.5])
    assert paired_bootstrap_ci(x, y, B=B, seed=3) == BootstrapCI(float(d.mean()), float(low), float(high))


def test_sign_test_boundaries():
    assert sign_test(1, 0, "greater") == 0.5  # n = 1: P(X >= 1) = 1/2
    assert sign_test(0, 0, "less") == sign_test(0, 0) == 1.0  # no discordant pair: no evidence
    for b, c in ((1.5, 2), (2, 1.5), (-1, 1), (1, -1)):
        with pytest.raises(ValueError, match=rf"^sign_test needs non-negative integer counts, got b={b!r}, c={c!r}$"):
            sign_test(b, c)
    with pytest.raises(ValueError, match=r"^sign_test: alternative='both'; use one of greater, less, two-sided$"):
        sign_test(1, 1, "both")


def test_flag_errors_name_the_side_and_the_item():
    with pytest.raises(ValueError, match=r"^x must be a flat sequence of per-item 0/1 flags, got shape \(1, 2\)$"):
        paired_tests([[1, 0]], [1, 0])
    with pytest.raises(ValueError, match=r"^y must be a flat sequence of per-item 0/1 flags, got shape \(1, 2\)$"):
        paired_tests([1, 0], [[1, 0]])
    with pytest.raises(ValueError, match=r"^x must hold 0/1 correctness flags; item 2 is 0.5$"):
        paired_tests([1, 0, 0.5], [1, 0, 1])
    with pytest.raises(ValueError, match=r"^y must hold 0/1 correctness flags; item 0 is 3$"):
        paired_tests([1, 0], [3, 0])
    with pytest.raises(ValueError, match=r"^paired tests need at least one item, got none$"):
        paired_tests([], [])


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def test_load_item_results_skips_blank_lines_and_defaults_to_greedy(tmp_path):
    rows = [
        json.dumps({"key": "a", "correct": 1}),  # no mode: a greedy record; 1 reads as True
        "",
        "   ",
        json.dumps({"key": "b", "mode": "sampled", "correct": True}),
        json.dumps({"key": "c", "mode": "greedy", "correct": 0}),
    ]
    got = load_item_results(_write(tmp_path / "r.jsonl", rows))
    assert got == {"a": True, "c": False} and [type(v) for v in got.values()] == [bool, bool]


def test_load_item_results_names_the_offending_line(tmp_path):
    # line numbers are 1-based and count blank lines: the bad record is on line 3
    ok = json.dumps({"key": "a", "correct": True})
    cases = [
        ([ok, "", "{not json"], r":3: not a JSON record \("),
        (
            [ok, "", json.dumps({"key": "b"})],
            r":3: a record without 'key' and 'correct'; re-run `reasonrl eval "
            r"--samples` with this version \(records now carry the problem key\)$",
        ),
        ([ok, "", json.dumps({"correct": True})], r":3: a record without 'key' and 'correct'"),
        ([ok, "", ok], r":3: problem key 'a' appears twice among the greedy records"),
    ]
    for i, (lines, msg) in enumerate(cases):
        path = _write(tmp_path / f"bad{i}.jsonl", lines)
        with pytest.raises(UserError, match=rf"^{path}{msg}"):
            load_item_results(path)
    # a repeated key among sampled records is fine: only greedy records are keyed
    sampled = json.dumps({"key": "a", "mode": "sampled", "correct": False})
    assert load_item_results(_write(tmp_path / "s.jsonl", [ok, sampled, sampled])) == {"a": True}


def test_load_item_results_refuses_a_folder_and_an_empty_file(tmp_path):
    with pytest.raises(UserError, match=rf"^no per-item results file at {tmp_path}; write one with"):
        load_item_results(tmp_path)  # a folder is not a results file
    with pytest.raises(UserError, match=r"holds no greedy per-item records$"):
        load_item_results(_write(tmp_path / "blank.jsonl", ["", ""]))
    assert load_item_results(str(_write(tmp_path / "one.jsonl", [json.dumps({"key": "k", "correct": False})]))) == {
        "k": False
    }  # a str path works as well as a Path
