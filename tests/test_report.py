"""reasonrl report: the pages of a run folder and a compare folder (built by the real writers, see
report_folders.py), escaping, self-containment, named errors for what is not a folder it knows."""

import json
import re

import pytest
from report_folders import EVIL, write_audit, write_compare, write_run

from reasonrl.cli import main
from reasonrl.errors import MissingPathError, UserError
from reasonrl.report import build_report, write_report
from reasonrl.report.compare_page import differing_keys
from reasonrl.report.html import esc, fmt, table
from reasonrl.report.run_page import downsample, step_seconds
from reasonrl.loop.run import sample_lines

from harness import COMPARE_SECTIONS, RUN_SECTIONS


def cell(text: str, left: bool = False) -> str:
    return f"<td class=l>{text}</td>" if left else f"<td>{text}</td>"


def assert_self_contained(page: str) -> None:
    assert "http://" not in page and "https://" not in page
    assert not re.search(r"""(src|href)=["'](?!data:|#)""", page)  # only data: images and in-page anchors
    assert "<script" not in page.lower()
    assert "default-src 'none'" in page  # the CSP: the browser itself refuses any other source


# --- pure helpers ---------------------------------------------------------------------------------


def test_downsample_keeps_first_and_last_evenly():
    assert downsample(10, 4) == [0, 3, 6, 9]  # round(i * 9 / 3) for i = 0..3
    assert downsample(5, 20) == [0, 1, 2, 3, 4]  # fewer rows than the cap: all
    assert downsample(101, 3) == [0, 50, 100]  # round(i * 100 / 2)


def test_step_seconds_sums_time_phases_only():
    assert step_seconds({"step": 3, "time/generate": 1.5, "time/update": 0.25, "tokens/generated": 99}) == 1.75


def test_fmt_and_esc():
    assert fmt(None) == "-" and fmt(3) == "3" and fmt(True) == "True"
    assert fmt(0.123456) == "0.1235"  # 4 significant figures
    assert fmt(0.015625, 3) == "0.0156"  # 1/64, 3 figures (round half to even on the exact binary value)
    assert fmt(123456.7) == "123457"  # beyond 4 digits: no exponent, whole number
    assert fmt(float("nan")) == "nan"
    assert esc('<a href="x">&') == "&lt;a href=&quot;x&quot;&gt;&amp;"
    assert table(("k", "v"), [("<b>", 1)]) == (
        "<table><thead><tr><th class=l>k</th><th>v</th></tr></thead>"
        "<tbody><tr><td class=l>&lt;b&gt;</td><td>1</td></tr></tbody></table>"
    )


def test_sample_lines_first_ten_of_each_kind():
    recs = [
        {
            "key": f"k{i}",
            "mode": "greedy",
            "prompt": "p",
            "answer": "a",
            "completion": "c",
            "extracted": "a",
            "score": float(i % 2),
            "correct": i % 2 == 1,
            "length": 3,
            "finish": "eos",
        }
        for i in range(30)
    ]
    recs.append({**recs[1], "key": "sampled", "mode": "sampled"})  # sampled records are never picked
    rows = [json.loads(line) for line in sample_lines(recs).splitlines()]
    # correct: odd i -> k1, k3, ..., k19 (the first ten); wrong: even i -> k0, k2, ..., k18
    assert [r["key"] for r in rows] == [f"k{i}" for i in range(1, 20, 2)] + [f"k{i}" for i in range(0, 19, 2)]
    assert set(rows[0]) == {
        "key",
        "prompt",
        "answer",
        "completion",
        "extracted",
        "score",
        "correct",
        "length",
        "finish",
    }


def test_differing_keys_without_per_run_keys():
    a = {"lr": 1, "loss": {"clip": 0.2, "agg": "x"}, "out": "a", "seed": 0}
    b = {"lr": 1, "loss": {"clip": 0.28, "agg": "x"}, "out": "b", "seed": 1}
    c = {"lr": 2, "loss": {"clip": 0.2, "agg": "x"}, "out": "c", "seed": 0}
    assert differing_keys({"r1": a, "r2": b, "r3": c}) == ["loss.clip", "lr"]  # out, seed left out
    assert differing_keys({"r1": a, "r2": dict(a, out="z")}) == []


# --- a run folder -------------------------------------------------------------------------------


def test_run_page_sections_values_and_escaping(tmp_path):
    run = write_run(tmp_path / "run", n_right=6, before_right=5)
    page = build_report(run)
    for anchor in RUN_SECTIONS:
        assert f'<section id="{anchor}">' in page, anchor
    assert "reasonrl run: grpo on arithmetic" in page
    # before 5/10, after 6/10: change +0.1
    assert cell("pass@1", left=True) + cell("0.5") + cell("0.6") + cell("0.1") in page
    # step 2: reward 0.2, accuracy 0.2, eval 0.5 + 0.1 * 2/4 = 0.55, length 22, kl 0.02, seconds 1.5 + 0.25
    assert cell("2", left=True) + "".join(cell(v) for v in ("0.2", "0.2", "0.55", "22", "0.02", "0.5")) in page
    assert cell("1.75") in page
    assert "data:image/png;base64," in page  # the curves
    assert "the first 6 correct and the first 4 wrong" in page  # 6 right, 4 wrong of 10
    assert "&lt;script&gt;alert(&#x27;pwned&#x27;)&lt;/script&gt;" in page and EVIL not in page
    assert "No audit.json here" in page
    assert_self_contained(page)


def test_run_page_shows_the_latest_training_rollouts_newest_first(tmp_path):
    page = build_report(write_run(tmp_path / "run"))  # 4 steps x 2 rows in completions.jsonl
    shown = page.split('<section id="training">')[1].split("</section>")[0]
    assert "in the last 3 logged steps (6 of 8 rows in completions.jsonl)" in shown
    # steps 4, 3, 2 (newest first, row 1 before row 0); step 1 is not shown
    keys = ["key-4-1", "key-4-0", "key-3-1", "key-3-0", "key-2-1", "key-2-0"]
    assert [shown.index(k) for k in keys] == sorted(shown.index(k) for k in keys) and "key-1-0" not in shown
    assert "step 3 row 1 says 4" in shown and "What is 3 + 1?" in shown
    assert "&lt;|im_start|&gt;user" in shown  # the templated prompt, escaped
    assert "reward 0.75 (correct 1 · overlong -0.5) · advantage 0.5" in shown
    assert "&lt;script&gt;alert(&#x27;pwned&#x27;)&lt;/script&gt;" in shown and EVIL not in page
    old = build_report(write_run(tmp_path / "old", completions=False))
    assert "No completions.jsonl in" in old


def test_run_page_older_and_unfinished_runs_say_what_is_missing(tmp_path):
    old = build_report(write_run(tmp_path / "old", samples=False))
    assert "No samples.jsonl in" in old
    unfinished = build_report(write_run(tmp_path / "live", finished=False))
    assert "Not finished: no summary.json; 4 steps logged so far." in unfinished
    assert "The run has not finished: no after evaluation." in unfinished


def test_run_page_shows_the_audit(tmp_path):
    run = write_run(tmp_path / "run")
    write_audit(run)
    page = build_report(run)
    assert "audit.json" in page and "No audit.json here" not in page
    assert cell("embed", left=True) + cell("0.85") + cell("3") + cell("40.1") in page
    assert cell("total", left=True) + cell("") + cell("") + cell("44.5") in page
    assert "2 training items linked to an evaluation item and removed; 8998 kept" in page
    assert "t-&lt;b&gt;99&lt;/b&gt;" in page and "paraphrase" in page


# --- a compare folder ----------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:Precision loss:RuntimeWarning")  # scipy's Welch on dr_grpo's [0.3, 0.3]
def test_compare_page_table_paired_tests_config_diff(tmp_path, monkeypatch):
    cmp = write_compare(tmp_path / "cmp", monkeypatch)
    write_audit(cmp)
    page = build_report(cmp)
    for anchor in COMPARE_SECTIONS:
        assert f'<section id="{anchor}">' in page, anchor
    # grpo finals 0.6, 0.7: mean 0.65, std sqrt(2 * 0.05^2 / 1) = 0.0707; AUC (0.55 + 0.6) / 2 = 0.575
    assert cell("grpo", left=True) + cell("0.65 ± 0.0707") + cell("0.7") + cell("0.575") in page
    assert cell("-") + cell("reference") in page  # grpo: no Welch p against itself, the paired reference
    # dr_grpo (x) against grpo (y), pooled over seeds 0 and 1: b = 0, c = 3 + 4 = 7 (items 3-5, 3-6).
    # McNemar 2 * P(X <= 0 | n=7) = 2/128 = 0.0156; sign p (x better) P(X >= 0) = 1;
    # Δ = 6/20 - 13/20 = -0.350; Welch on [0.3, 0.3] vs [0.6, 0.7]: t = -0.35 / sqrt(0.005/2) = -7,
    # df = 1 (Cauchy): p = 1 - 2 atan(7) / pi = 0.0903
    assert cell("dr_grpo", left=True) + cell("0.3 ± 0") in page
    row = page[page.index(cell("dr_grpo", left=True) + cell("0.3 ± 0")) :]
    row = row[: row.index("</tr>")]
    assert cell("0.0903") in row and cell("0.0156 (0/7)") in row and cell("1") in row
    assert "-0.350 [" in row and cell("20 (seeds 0, 1)") in row and cell("2 ok / 0 failed") in row
    # config keys that differ between recipes (config_diff), without out and seed
    assert cell("recipe", left=True) + cell("grpo", left=True) + cell("dr_grpo", left=True) in page
    assert cell("loss.agg", left=True) in page and cell("advantage.estimator", left=True) in page
    assert cell("seed", left=True) not in page.split('<section id="config">')[1].split("</table>")[0]
    assert "&lt;script&gt;" in page and EVIL not in page  # grpo's samples, escaped
    assert "No samples.jsonl in the first successful run of dr_grpo" in page
    assert cell("linked_train") not in page and "8998 kept" in page
    assert_self_contained(page)


@pytest.mark.filterwarnings("ignore:Precision loss:RuntimeWarning")
def test_compare_page_shows_a_failed_run(tmp_path, monkeypatch):
    cmp = write_compare(tmp_path / "cmp", monkeypatch)
    report = json.loads((cmp / "compare.json").read_text())
    report["runs"][3].update(ok=False, error="RuntimeError: boom <here>", final=None, curve=[])
    (cmp / "compare.json").write_text(json.dumps(report))
    page = build_report(cmp)
    assert "failed: RuntimeError: boom &lt;here&gt;" in page


# --- errors and the command -----------------------------------------------------------------------


def test_not_a_known_folder_is_a_named_user_error(tmp_path):
    with pytest.raises(MissingPathError, match="does not exist"):
        build_report(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(
        MissingPathError, match=r"no compare.json\) nor a run folder \(no config.yaml and no metrics.jsonl"
    ):
        build_report(tmp_path / "empty")
    half = tmp_path / "half"
    half.mkdir()
    (half / "config.yaml").write_text("recipe: grpo\n")
    with pytest.raises(MissingPathError, match=r"\(no metrics.jsonl\)"):
        build_report(half)
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(MissingPathError, match="is a file"):
        build_report(tmp_path / "file.txt")


def test_broken_folder_pieces_name_file_and_line(tmp_path, monkeypatch):
    run = write_run(tmp_path / "run")
    with open(run / "metrics.jsonl", "a") as fh:
        fh.write("{not json\n")
    with pytest.raises(UserError, match=r"metrics.jsonl:5"):  # 4 steps, then the bad line
        build_report(run)
    cmp = tmp_path / "cmp"
    cmp.mkdir()
    (cmp / "compare.json").write_text(json.dumps({"recipes": ["grpo"], "runs": []}))
    with pytest.raises(UserError, match=r"compare.json: no 'table'"):
        build_report(cmp)
    good = write_run(tmp_path / "run2")
    write_audit(good)
    (good / "audit" / "audit.json").write_text(json.dumps({"stages": ["jaccard"], "seconds": {}}))
    with pytest.raises(UserError, match=r"audit.json: no 'counts'"):
        build_report(good)


def test_report_command_writes_and_prints_the_path(tmp_path, capsys):
    run = write_run(tmp_path / "run")
    with pytest.raises(SystemExit) as done:  # typer ends with sys.exit(0)
        main(["report", str(run)])
    assert done.value.code == 0
    assert (run / "report.html").is_file() and str(run / "report.html") in capsys.readouterr().out
    out = write_report(run, tmp_path / "pages" / "r.html")
    assert out.read_text() == (run / "report.html").read_text()  # the same page wherever it goes
    with pytest.raises(UserError, match="is a folder; give the HTML file"):
        write_report(run, tmp_path)
    with pytest.raises(SystemExit) as exc:
        main(["report", str(tmp_path / "nowhere")])
    assert exc.value.code == 2 and "does not exist" in capsys.readouterr().err


@pytest.mark.slow
def test_report_of_a_real_tiny_run(tiny_dir, tmp_path):
    """train_run writes samples.jsonl beside after_items.jsonl, and the page shows those completions."""
    from reasonrl.config.train import TrainConfig
    from reasonrl.recipes import get_recipe
    from reasonrl.loop.run import train_run

    cfg = TrainConfig(
        model=str(tiny_dir),
        out=str(tmp_path / "run"),
        steps=2,
        prompts_per_step=4,
        eval_every=2,
        eval_problems=4,
        final_eval_problems=6,
        final_eval_k=0,
        save_every=2,
    )
    train_run(cfg, get_recipe("grpo"))
    run = tmp_path / "run"
    items = [json.loads(line) for line in (run / "after_items.jsonl").read_text().splitlines()]
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    # 6 problems, fewer than 10 of each kind: every one is a sample, correct ones first, same verdicts
    right = [i["key"] for i in items if i["correct"]]
    assert [s["key"] for s in samples] == right + [i["key"] for i in items if not i["correct"]]
    page = build_report(run)
    assert f"the first {len(right)} correct and the first {6 - len(right)} wrong" in page
    assert all(esc(s["completion"]) in page for s in samples)
