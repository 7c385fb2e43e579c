"""pass@k to n and distinct correct solutions in `reasonrl compare` (the headline of the distribution-matching
recipes): the per-problem counts the final eval writes, the curve, and the paired statistics against the first
recipe, on numbers worked out by hand."""

import json
from pathlib import Path

import pytest

from reasonrl.compare import RunResult, load_samples, passk_report
from reasonrl.eval.paired import paired_bootstrap_ci, paired_bootstrap_values_ci
from reasonrl.eval.runner import distinct_correct, item_rows


def test_distinct_correct_counts_chains_and_answers():
    # three correct samples, two of them the same text: 2 chains, 1 answer; the wrong one counts for neither
    samples = [
        {"correct": True, "completion": "1+1+0=2\nA:2", "extracted": "2"},
        {"correct": True, "completion": "1+1+0=2\nA:2", "extracted": "2"},
        {"correct": True, "completion": "1+1=2\nA:2", "extracted": "2"},
        {"correct": False, "completion": "A:3", "extracted": "3"},
    ]
    assert distinct_correct(samples) == {"correct_chains": 2, "correct_answers": 1}
    greedy = [
        {
            "problem": 0,
            "key": "k",
            "prompt": "1+1=?\n",
            "answer": "2",
            "correct": True,
            "extracted": "2",
            "completion": "A:2",
            "finish": "eos",
        }
    ]
    (row,) = item_rows(greedy, samples, 4, (1,))
    assert (row["n"], row["c"], row["correct_chains"], row["correct_answers"]) == (4, 3, 2, 1)


def _run(recipe, seed, samples):
    return RunResult(
        recipe,
        seed,
        Path("."),
        ok=True,
        samples={
            k: {"n": n, "c": c, "correct_chains": c, "correct_answers": min(c, 1)} for k, (n, c) in samples.items()
        },
    )


def test_passk_curve_and_paired_difference_by_hand():
    # n = 4. Recipe a: p1 c = 2, p2 c = 0. Recipe b: p1 c = 1, p2 c = 4. pass@k = 1 - C(n - c, k) / C(n, k):
    # a: pass@1 = (2/4 + 0) / 2 = 0.25; pass@2 = (1 - C(2,2)/C(4,2) + 0) / 2 = (1 - 1/6) / 2 = 0.416667; pass@4 = 0.5
    # b: pass@1 = (1/4 + 1) / 2 = 0.625; pass@2 = (1 - C(3,2)/C(4,2) + 1) / 2 = (0.5 + 1) / 2 = 0.75; pass@4 = 1
    results = [_run("a", 0, {"p1": (4, 2), "p2": (4, 0)}), _run("b", 0, {"p1": (4, 1), "p2": (4, 4)})]
    rep = passk_report(results, ["a", "b"])
    assert rep["n"] == 4 and rep["ks"] == [1, 2, 3, 4]
    a, b = rep["recipes"]["a"], rep["recipes"]["b"]
    assert [round(v, 6) for v in a["pass_at_k"]] == [0.25, 0.416667, 0.5, 0.5]
    assert b["pass_at_k"][0] == pytest.approx(0.625) and b["pass_at_k"][1] == pytest.approx(0.75)
    assert b["pass_at_k"][3] == pytest.approx(1.0)
    assert a["correct_chains"] == pytest.approx(1.0) and b["correct_chains"] == pytest.approx(2.5)  # (2+0)/2, (1+4)/2
    # paired at k = 4: per problem b - a = [1 - 1, 1 - 0] -> mean 0.5; at k = 1: [0.25 - 0.5, 1 - 0] -> 0.375
    assert b["vs_first"]["pass@4"]["diff"] == pytest.approx(0.5) and b["vs_first"]["pass@4"]["pairs"] == 2
    assert b["vs_first"]["pass@1"]["diff"] == pytest.approx(0.375)
    assert "vs_first" not in a


def test_no_sampled_eval_gives_no_passk_report():
    assert passk_report([RunResult("a", 0, Path("."), ok=True)], ["a"]) is None


def test_load_samples_reads_the_final_eval_rows(tmp_path):
    path = tmp_path / "after.items.jsonl"
    path.write_text(
        json.dumps({"key": "k1", "n": 8, "c": 3, "correct_chains": 2, "correct_answers": 1})
        + "\n"
        + json.dumps({"key": "k2", "correct": True})
        + "\n"
    )  # a greedy-only row has no n: skipped
    assert load_samples(path) == {"k1": {"n": 8, "c": 3, "correct_chains": 2, "correct_answers": 1}}
    assert load_samples(tmp_path / "missing.jsonl") == {}


def test_values_bootstrap_agrees_with_the_flags_bootstrap_on_0_1_values():
    x, y = [1, 0, 1, 1, 0, 1], [0, 0, 1, 0, 0, 1]
    assert paired_bootstrap_values_ci(x, y, B=2000) == paired_bootstrap_ci(x, y, B=2000)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        paired_bootstrap_values_ci([1.5], [0.0])
