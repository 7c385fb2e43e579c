from reasonrl.eval.runner import EvalConfig, evaluate
from reasonrl.tasks import get_task, take_items

from fakes import Scripted


def test_eval_metrics_from_scripted_outputs_by_hand():
    task = get_task("arithmetic")
    items = take_items(task, "test", 4, seed=0)
    # greedy: problems 0 and 1 right -> pass@1 = 2/4 = 0.5
    # samples (k=2): p0 [right, wrong], p1 [wrong, wrong], p2 [right, right], p3 [garbage, wrong]
    #   pass@2 = mean(1, 0, 1, 0) = 0.5 ; avg@2 = mean(0.5, 0, 1, 0) = 0.375
    #   maj@2: p0 tie -> first seen (right) = 1; p1 0; p2 1; p3 the only parsed answer is wrong = 0 -> 0.5
    table = {0: [True, False], 1: [False, False], 2: [True, True], 3: [None, False]}
    gen = Scripted(items, greedy=lambda i: i < 2, sampled=lambda i, j: table[i][j])
    summary, records = evaluate(gen, task, EvalConfig(n_problems=4, samples_per_problem=2, seed=0))
    assert summary["pass@1"] == 0.5 and summary["n_problems"] == 4
    assert summary["pass@2"] == 0.5 and summary["avg@2"] == 0.375 and summary["maj@2"] == 0.5
    assert summary["format_rate"] == 1.0  # greedy outputs all carry an A: line
    assert len(records) == 4 + 8 and records[-2]["extracted"] is None


def test_eval_greedy_only_and_format_rate():
    task = get_task("arithmetic")
    items = take_items(task, "test", 5, seed=0)
    gen = Scripted(items, greedy=lambda i: True if i == 0 else None, sampled=lambda i, j: True)
    summary, _ = evaluate(gen, task, EvalConfig(n_problems=5, samples_per_problem=0))
    # one right, four without an answer line: pass@1 = 0.2, format_rate = 0.2
    assert summary["pass@1"] == 0.2 and summary["format_rate"] == 0.2 and "pass@8" not in summary


def test_the_items_files_keep_the_greedy_text_and_one_samples_text():
    import json

    from reasonrl.eval.runner import evaluate_items, item_lines

    task = get_task("arithmetic")
    items = take_items(task, "test", 2, seed=0)
    # greedy: p0 right (its demo), p1 wrong; samples: p0 [wrong, right], p1 [garbage, right]
    table = {0: [False, True], 1: [None, True]}
    gen = Scripted(items, greedy=lambda i: i == 0, sampled=lambda i, j: table[i][j])
    _, records, rows = evaluate_items(gen, task, EvalConfig(n_problems=2, samples_per_problem=2, seed=0))
    wrong = f"x\nA:{int(items[1].answer) + 1}"
    assert [r["completion"] for r in rows] == [items[0].demo, wrong] and [r["finish"] for r in rows] == ["eos"] * 2
    # the first sample of each problem: p0's wrong answer, p1's garbage
    assert [r["sample"] for r in rows] == [f"x\nA:{int(items[0].answer) + 1}", "garbage"]
    assert [r["sample_correct"] for r in rows] == [False, False] and [r["c"] for r in rows] == [1, 1]
    lines = [json.loads(line) for line in item_lines(records).splitlines()]  # after_items.jsonl
    assert [(r["key"], r["correct"], r["completion"], r["sample"]) for r in lines] == [
        (items[0].key, True, items[0].demo, rows[0]["sample"]),
        (items[1].key, False, wrong, "garbage"),
    ]
    greedy_only = [json.loads(line) for line in item_lines([r for r in records if r["mode"] == "greedy"]).splitlines()]
    assert "sample" not in greedy_only[0] and greedy_only[1]["completion"] == wrong
