"""Eval settings (issue 15 item 3): pass@k for several k from n >= k samples, maj@k with its tie and
equivalence rules, per-item rows (NAME.items.jsonl), the renamed options. Expected numbers are worked
out by hand in the comments."""

import json
from math import comb

import pytest
from fakes import Scripted

from reasonrl import cli
from reasonrl.errors import UserError
from reasonrl.eval.majority import MathEquivalence, group_answers, majority_vote_grouped
from reasonrl.eval.metrics import maj_at_k, mean_pass_at_k, pass_at_k
from reasonrl.eval.paired import load_item_results
from reasonrl.eval.runner import EvalConfig, evaluate_items, items_path, write_jsonl
from reasonrl.seeds import stable_seed
from reasonrl.tasks import get_task, take_items

# ---------------------------------------------------------------- unbiased pass@k, n = 16, c = 4


def test_pass_at_k_n16_c4_by_hand():
    # pass@k = 1 - C(n-c, k) / C(n, k) with n = 16, c = 4, n - c = 12:
    #   k = 1:  1 - C(12,1)/C(16,1) = 1 - 12/16 = 0.25
    #   k = 4:  1 - C(12,4)/C(16,4) = 1 - 495/1820 = 1325/1820 = 0.728022
    #   k = 16: n - c = 12 < 16, every 16-subset holds a correct sample -> 1.0
    assert (comb(12, 4), comb(16, 4)) == (495, 1820)
    assert pass_at_k(16, 4, 1) == pytest.approx(0.25, abs=1e-12)
    assert pass_at_k(16, 4, 4) == pytest.approx(1325 / 1820, abs=1e-12)
    assert pass_at_k(16, 4, 16) == 1.0


def test_pass_at_k_edges_k_equals_n_and_c_zero():
    # k = n: the one n-subset is all samples -> 1 when any is correct, 0 when none (C(16,16)/C(16,16) = 1)
    assert pass_at_k(16, 1, 16) == 1.0 and pass_at_k(16, 0, 16) == 0.0
    # c = 0: C(n, k) / C(n, k) = 1 -> pass@k = 0 for every k
    assert [pass_at_k(16, 0, k) for k in (1, 4, 16)] == [0.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="k=17 > n=16"):
        pass_at_k(16, 4, 17)


# ---------------------------------------------------------------- maj@k: ties and equivalence


def test_majority_tie_goes_to_the_answer_seen_first():
    # "3" and "5" twice each: tie -> "3" (seen first); only "5" samples were judged correct -> wrong
    assert majority_vote_grouped(["3", "5", "5", "3"], [False, True, True, False]) == ("3", False)
    # first 3 samples: "5" twice beats "3" once -> correct
    assert majority_vote_grouped(["3", "5", "5"], [False, True, True]) == ("5", True)
    # None never votes; all None -> no answer, counted wrong
    assert majority_vote_grouped([None, "7", None], [False, True, False]) == ("7", True)
    assert majority_vote_grouped([None, None], [False, False]) == (None, False)


def test_exact_grouping_agrees_with_metrics_maj_at_k():
    answers = [["3", "5", "5", "3"], ["1", None, "1"], [None, None]]
    correct = [[False, True, True, False], [True, False, True], [False, False]]
    # by hand: problem 0 tie -> "3" wrong (0); problem 1 "1" right (1); problem 2 no answer (0) -> 1/3
    mine = [majority_vote_grouped(a, c)[1] for a, c in zip(answers, correct)]
    assert sum(mine) / 3 == maj_at_k(answers, correct) == pytest.approx(1 / 3)


def test_math_verify_equivalence_groups_one_half():
    answers = ["2", "0.5", "1/2", "\\frac{1}{2}", "2"]
    # exact strings: "2" twice is the biggest group -> "2"
    assert group_answers(answers) == [0, 1, 2, 3, 0]
    assert majority_vote_grouped(answers, [False, True, True, True, False]) == ("2", False)
    # math-verify: 0.5 = 1/2 = \frac{1}{2} is one group of 3 (labelled by its first member, index 1) -> wins
    eq = MathEquivalence()
    assert group_answers(answers, eq) == [0, 1, 1, 1, 0]
    assert majority_vote_grouped(answers, [False, True, True, True, False], eq) == ("0.5", True)
    assert not eq("@@", "2") and eq("@@", "@@") and not eq("", "0")  # not math: equal to itself only


# ---------------------------------------------------------------- evaluate_items on scripted outputs

# sampled correctness (True right, False the wrong answer gold+1, None no answer line), n = 4
TABLE = {0: [True, False, False, True], 1: [False] * 4, 2: [True] * 4, 3: [None, True, False, False]}


def _scripted_eval(**cfg):
    task = get_task("arithmetic")
    items = take_items(task, "test", 4, seed=0)
    gen = Scripted(items, greedy=lambda i: i % 2 == 0, sampled=lambda i, j: TABLE[i][j])
    return (items, *evaluate_items(gen, task, EvalConfig(n_problems=4, samples_per_problem=4, ks=(1, 2, 4), **cfg)))


def test_several_k_summary_and_item_rows_by_hand():
    items, summary, records, rows = _scripted_eval()
    # c per problem = 2, 0, 4, 1 (n = 4); C(4,2) = 6
    #   pass@1 = c/4           -> 0.5, 0, 1, 0.25              mean 0.4375 (= avg@4)
    #   pass@2 = 1 - C(4-c,2)/6 -> 1-1/6, 0, 1, 1-3/6=0.5      mean (5/6 + 1.5)/4 = 7/12
    #   pass@4                 -> 1, 0, 1, 1 (n-c = 3 < 4)     mean 0.75
    # maj over the first k samples (wrong answers are all gold+1, so they group):
    #   p0 [R, W, W, R]: k=1 R; k=2 tie -> R (first); k=4 tie 2-2 -> R        -> 1, 1, 1
    #   p1 all W -> 0, 0, 0;  p2 all R -> 1, 1, 1
    #   p3 [none, R, W, W]: k=1 no answer -> 0; k=2 R -> 1; k=4 W (2 vs 1) -> 0
    #   maj@1 = 2/4, maj@2 = 3/4, maj@4 = 2/4
    # greedy: problems 0 and 2 right -> pass@1 = 0.5
    assert summary["pass@1"] == 0.5 and summary["samples_per_problem"] == 4
    assert summary["pass@1_sampled"] == pytest.approx(0.4375) and summary["avg@4"] == pytest.approx(0.4375)
    assert summary["pass@2"] == pytest.approx(7 / 12) and summary["pass@4"] == pytest.approx(0.75)
    assert (summary["maj@1"], summary["maj@2"], summary["maj@4"]) == (0.5, 0.75, 0.5)
    correct = [[bool(v) for v in TABLE[i]] for i in range(4)]  # the metrics library agrees
    assert summary["pass@2"] == pytest.approx(mean_pass_at_k(correct, 2))
    assert [r["c"] for r in rows] == [2, 0, 4, 1] and [r["correct"] for r in rows] == [True, False, True, False]
    assert [r["maj@2"] for r in rows] == [1, 0, 1, 1] and rows[3]["maj_answer@1"] is None
    assert rows[3]["maj_answer@2"] == items[3].answer and rows[1]["maj_answer@4"] == str(int(items[1].answer) + 1)
    assert rows[0]["pass@2"] == pytest.approx(5 / 6) and rows[0]["key"] == items[0].key
    assert set(rows[0]) >= {"problem", "key", "prompt", "answer", "n", "c", "pass@4", "maj@4", "maj_answer@4"}
    assert len(records) == 4 + 16


def test_items_jsonl_is_written_beside_the_summary_and_serves_against(tmp_path):
    _, _, _, rows = _scripted_eval()
    path = write_jsonl(rows, items_path(tmp_path / "out" / "base.json"))
    assert path == tmp_path / "out" / "base.items.jsonl"
    back = [json.loads(line) for line in path.read_text().splitlines()]
    assert back == rows and not list(path.parent.glob(".*.tmp"))  # atomic: no temporary left behind
    # greedy correctness by key, as `eval --against` reads it
    assert load_item_results(path) == {r["key"]: r["correct"] for r in rows}


def test_sample_seed_temperature_and_top_p_reach_the_engine():
    task = get_task("arithmetic")
    items = take_items(task, "test", 3, seed=0)
    seen = []

    class Recording(Scripted):
        def generate(self, prompts, n, sampling, seeds=None):
            if sampling.temperature > 0:
                seen.append((sampling.temperature, sampling.top_p, seeds))
            return super().generate(prompts, n, sampling, seeds)

    gen = Recording(items, greedy=lambda i: True, sampled=lambda i, j: True)
    evaluate_items(
        gen, task, EvalConfig(n_problems=3, samples_per_problem=2, temperature=0.7, top_p=0.9, seed=0, sample_seed=7)
    )
    # rows keyed by (sample seed, problem index): independent of how problems are batched
    assert seen == [(0.7, 0.9, [stable_seed(7, "eval", i) for i in range(3)])]


def test_k_above_n_is_rejected_by_the_config():
    with pytest.raises(UserError, match="k=5 needs 1 <= k <= samples_per_problem = 4"):
        EvalConfig(samples_per_problem=4, ks=(1, 5))
    assert EvalConfig(samples_per_problem=4).k_values == (4,) and EvalConfig(samples_per_problem=0).k_values == ()


# ---------------------------------------------------------------- the command line


def _cli_error(argv, capfd, monkeypatch):
    monkeypatch.delenv("REASONRL_DEBUG", raising=False)
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    return exit_.value.code, capfd.readouterr().err


def test_old_n_option_points_to_problems(capfd, monkeypatch):
    code, err = _cli_error(["eval", "--n", "6"], capfd, monkeypatch)
    assert code == 2 and "--n 6" in err and "--problems" in err and "Traceback" not in err


@pytest.mark.parametrize(
    "k,needle", [("1,8", "k=8 > --samples-per-problem 4"), ("1,x", "'x' is not an integer"), ("0", "k=0 must be >= 1")]
)
def test_bad_k_list_is_named(k, needle, capfd, monkeypatch):
    code, err = _cli_error(["eval", "--samples-per-problem", "4", "--k", k], capfd, monkeypatch)
    assert code == 2 and needle in err


def test_cli_several_k_on_the_tiny_model(tiny_dir, tmp_path):
    from typer.testing import CliRunner

    out = tmp_path / "e.json"
    res = CliRunner().invoke(
        cli.app,
        [
            "eval",
            "--model",
            str(tiny_dir),
            "--problems",
            "4",
            "--samples-per-problem",
            "4",
            "--k",
            "1,2,4",
            "--temperature",
            "0.8",
            "--top-p",
            "0.95",
            "--sample-seed",
            "3",
            "--maj-equiv",
            "--json",
            str(out),
            "--samples",
            str(tmp_path / "s.jsonl"),
        ],
    )
    assert res.exit_code == 0, f"{res.output}\n{res.exception!r}"
    summary = json.loads(out.read_text())
    assert summary["settings"]["ks"] == [1, 2, 4] and summary["settings"]["sample_seed"] == 3
    rows = [json.loads(line) for line in (tmp_path / "e.items.jsonl").read_text().splitlines()]
    samples = [json.loads(line) for line in (tmp_path / "s.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and len(samples) == 4 * (1 + 4)
    for row in rows:  # c counts this problem's correct samples; each estimate is pass_at_k(4, c, k)
        mine = [s for s in samples if s["mode"] == "sampled" and s["problem"] == row["problem"]]
        assert row["c"] == sum(s["correct"] for s in mine) and row["n"] == 4
        assert [row["pass@1_sampled"], row["pass@2"], row["pass@4"]] == [pass_at_k(4, row["c"], k) for k in (1, 2, 4)]
    for key in ("pass@1_sampled", "pass@2", "pass@4", "avg@4", "maj@1", "maj@2", "maj@4"):
        assert summary[key] == pytest.approx(sum(r[key] for r in rows) / 4), key
