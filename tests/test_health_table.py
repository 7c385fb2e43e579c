"""benchmarks/learning/health_table.py and the one result format it reads (benchmarks/learning/measurements.py):
each kind of source JSON converted right (hand-made files in tmp_path, the expected numbers written here by hand, so a
converter that picks a wrong field, or none, fails), the table built from the converted files, and the committed
table unchanged: docs/health.md pastes it, and the committed measurements are the conversions of the committed
result files."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).parents[1] / "benchmarks" / "learning"
sys.path.insert(0, str(BENCH))  # health_table imports measurements, its sibling (as when run as a script)
SPEC = importlib.util.spec_from_file_location("health_table", BENCH / "health_table.py")
ht = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(ht)
import measurements as ms  # noqa: E402 - after the path above


def _write(root, rel, obj):
    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    (root / rel).write_text(json.dumps(obj))


def _build(recipes, sources, root):
    """Convert each source's file into its measurement, then build the table from the measurements only."""
    ms.write_all(sources, root)
    for src in sources:  # the raw files go: the table must read nothing but the measurements
        (root / src["path"]).unlink(missing_ok=True)
    return ht.build(recipes, sources, root)


def _row(recipe, mean, std, runs=3, p=None, paired=None, **extra):
    return {
        "recipe": recipe,
        "runs_ok": runs,
        "final_mean": mean,
        "final_std": std,
        "per_seed": [mean] * runs,
        "p_vs_first": p,
        "paired_vs_first": paired,
        **extra,
    }


@pytest.fixture
def table(tmp_path):
    paired = {"diff": -0.05, "ci_low": -0.08, "ci_high": -0.02, "mcnemar_p": 0.001}
    # compare_merge-style: no steps in the JSON (declared), s/step and its ratio in the table
    _write(
        tmp_path,
        "a.json",
        {
            "first": "grpo",
            "table": [
                _row("grpo", 0.55, 0.03, median_s_per_step=1.2, s_per_step_vs_first=1.0),
                _row("alpha", 0.50, 0.02, p=0.04, paired=paired, median_s_per_step=3.0, s_per_step_vs_first=2.5),
                _row("alpha:k=1", 0.52, 0.01, p=0.2, median_s_per_step=2.4, s_per_step_vs_first=2.0),
            ],
        },
    )
    # `reasonrl compare`-style where the recipe is the first and the baseline (gspo) second; diagnostics per run
    _write(
        tmp_path,
        "b.json",
        {
            "recipes": ["beta", "gspo"],
            "steps": 30,
            "table": [_row("beta", 0.60, 0.01, runs=2), _row("gspo", 0.57, 0.02, runs=2, p=0.3, paired=paired)],
        },
    )
    _write(
        tmp_path,
        "b_diag.json",
        {
            "beta-seed0": {"after": {"truncation_rate": 0.1, "format_rate": 1.0, "mean_length": 20.0}},
            "beta-seed1": {"after": {"truncation_rate": 0.3, "format_rate": 0.8, "mean_length": 30.0}},
            "gspo-seed0": {"after": {"truncation_rate": 0.9, "format_rate": 0.0, "mean_length": 99.0}},
        },
    )
    # distmatch-style: greedy pass@1, the paired test under another key, s/step per recipe
    _write(
        tmp_path,
        "c.json",
        {
            "steps": 60,
            "rows": [
                {"recipe": "grpo", "runs_ok": 3, "greedy_pass@1": 0.64, "greedy_pass@1_std": 0.08, "s_per_step": 1.5},
                {
                    "recipe": "gamma",
                    "runs_ok": 3,
                    "greedy_pass@1": 0.60,
                    "greedy_pass@1_std": 0.05,
                    "s_per_step": 3.0,
                    "vs_first": {"pass@1": {"welch_p": 0.13}},
                    "greedy_paired_vs_first": paired,
                },
            ],
        },
    )
    # grlo_transfer-style: per-seed rows and [mean, std] summaries
    _write(
        tmp_path,
        "d.json",
        {
            "settings": {"steps": "60"},
            "rows": {
                "start": {"arithmetic": 0.42},
                "grlo-seed0": {"arithmetic": 0.35},
                "grlo-seed1": {"arithmetic": 0.39},
                "grpo-seed0": {"arithmetic": 0.61},
                "grpo-seed1": {"arithmetic": 0.55},
            },
            "summary": {"grlo/arithmetic": [0.37, 0.028], "grpo/arithmetic": [0.58, 0.042]},
        },
    )
    sources = [
        dict(path="a.json", kind="compare", setting="s1", doc="x.md", steps=60, primary={"alpha": "alpha"}),
        dict(
            path="b.json",
            kind="compare",
            setting="s2",
            doc="x.md",
            baseline="gspo",
            primary={"beta": "beta"},
            diagnostics="b_diag.json",
        ),
        dict(path="c.json", kind="distmatch", setting="s3", doc="x.md", primary={"gamma": "gamma"}),
        dict(path="d.json", kind="grlo", setting="s4", doc="x.md", primary={"grlo": "grlo"}),
        dict(path="missing.json", kind="compare", setting="s1", doc="x.md", primary={"delta": "delta"}),
    ]
    return _build(["grpo", "alpha", "beta", "gamma", "grlo", "delta"], sources, tmp_path)


def test_compare_reader_and_ratio(table):
    alpha = table["rows"][1]
    assert (alpha["pass1_mean"], alpha["pass1_std"], alpha["seeds"], alpha["steps"]) == (0.50, 0.02, 3, 60)
    assert (alpha["baseline"], alpha["baseline_pass1_mean"], alpha["baseline_pass1_std"]) == ("grpo", 0.55, 0.03)
    assert alpha["welch_p"] == 0.04 and alpha["paired"] == {
        "diff": -0.05,
        "low": -0.08,
        "high": -0.02,
        "mcnemar_p": 0.001,
    }
    assert (alpha["s_per_step"], alpha["baseline_s_per_step"], alpha["s_per_step_x"]) == (3.0, 1.2, 2.5)
    assert alpha["eval_truncation"] is None and alpha["eval_format"] is None  # not in the JSON: left empty


def test_baseline_is_first_turns_the_paired_test_round_and_diagnostics_are_seed_means(table):
    beta = table["rows"][2]
    assert (beta["pass1_mean"], beta["seeds"], beta["steps"], beta["baseline_pass1_mean"]) == (0.60, 2, 30, 0.57)
    assert beta["welch_p"] == 0.3  # gspo's p against beta: the same test
    assert beta["paired"] == {"diff": 0.05, "low": 0.02, "high": 0.08, "mcnemar_p": 0.001}
    # beta's two seeds only: (0.1 + 0.3) / 2, (1.0 + 0.8) / 2, (20 + 30) / 2
    assert beta["eval_truncation"] == pytest.approx(0.2) and beta["eval_format"] == pytest.approx(0.9)
    assert beta["eval_mean_length"] == pytest.approx(25.0)


def test_distmatch_and_grlo_readers(table):
    gamma, grlo = table["rows"][3], table["rows"][4]
    assert (gamma["pass1_mean"], gamma["pass1_std"], gamma["baseline_pass1_mean"]) == (0.60, 0.05, 0.64)
    assert gamma["welch_p"] is None  # the JSON's Welch p is on sampled pass@1, not greedy
    assert gamma["paired"]["diff"] == -0.05 and gamma["s_per_step_x"] == pytest.approx(2.0)  # 3.0 / 1.5
    assert (grlo["pass1_mean"], grlo["pass1_std"], grlo["seeds"], grlo["steps"]) == (0.37, 0.028, 2, 60)
    assert grlo["per_seed"] == [0.35, 0.39] and grlo["baseline_pass1_mean"] == 0.58 and grlo["welch_p"] is None


def test_primary_other_and_not_measured(table):
    assert table["rows"][0]["recipe"] == "grpo" and not table["rows"][0]["measured"]  # only ever a baseline here
    delta = table["rows"][5]
    assert not delta["measured"] and "--recipes grpo,delta --seeds 3 --steps 60" in delta["command"]
    assert table["missing_sources"] == ["missing.json"] and table["measured"] == 4
    (other,) = table["other"]
    assert (other["recipe"], other["entry"], other["pass1_mean"], other["s_per_step_x"]) == (
        "alpha",
        "alpha:k=1",
        0.52,
        2.0,
    )
    md = ht.markdown(table)
    assert "| alpha | 0.500 ± 0.020 | 3 x 60 | grpo 0.550 ± 0.030 | 0.04 | -0.050 [-0.080, -0.020] |" in md
    assert "| delta | not measured |" in md


def test_two_primary_sources_for_one_recipe_is_an_error(tmp_path):
    _write(tmp_path, "a.json", {"first": "grpo", "table": [_row("grpo", 0.5, 0.0), _row("alpha", 0.4, 0.0)]})
    src = dict(path="a.json", kind="compare", setting="s", doc="x.md", steps=1, primary={"alpha": "alpha"})
    with pytest.raises(ValueError, match="two primary sources"):
        _build(["grpo", "alpha"], [src, dict(src)], tmp_path)


def test_prompt_policy_reader_against_no_prompt(tmp_path):
    # prompt_policy_bench.py --merge: the worker's accuracy with the final one-shot prompt and with none
    _write(
        tmp_path,
        "pp.json",
        {
            "steps": 30,
            "worker": "base",
            "none": {"per_seed": [0.57, 0.56, 0.58], "mean": 0.57, "std": 0.01},
            "one_shot_final": {"per_seed": [0.57, 0.40, 0.58], "mean": 0.5167, "std": 0.1012},
            "one_shot_start": {"per_seed": [0.0, 0.0, 0.0], "mean": 0.0, "std": 0.0},
        },
    )
    src = dict(
        path="pp.json",
        kind="prompt_policy",
        setting="s5",
        doc="x.md",
        baseline="none",
        primary={"prompt_policy": "prompt_policy"},
    )
    (row,) = _build(["prompt_policy"], [src], tmp_path)["rows"]
    assert (row["pass1_mean"], row["pass1_std"], row["seeds"], row["steps"]) == (0.5167, 0.1012, 3, 30)
    assert row["per_seed"] == [0.57, 0.40, 0.58]
    assert (row["baseline"], row["baseline_pass1_mean"], row["welch_p"]) == ("none", 0.57, None)


def test_no_tests_across_tasks_and_the_codeact_reader_names_its_recipe(tmp_path):
    paired = {"diff": -0.5, "ci_low": -0.6, "ci_high": -0.4, "mcnemar_p": 0.001}
    _write(
        tmp_path,
        "a.json",
        {
            "first": "grpo",
            "table": [
                _row("grpo", 0.59, 0.05, median_s_per_step=0.8),
                _row("pop", 0.0, 0.0, p=0.002, paired=paired, median_s_per_step=0.6, s_per_step_vs_first=0.75),
            ],
        },
    )
    # codeact_fhir.py --recipe codeact_judge: the recipe and its s/step under the new keys
    _write(
        tmp_path,
        "j.json",
        {
            "settings": {"steps": "20"},
            "seeds": {"0": {"after": 0.69}, "1": {"after": 0.58}},
            "summary": {
                "recipe": "judge_agent",
                "after_mean": 0.635,
                "after_std": 0.078,
                "agent_s_per_step": 29.0,
                "grpo_arithmetic_s_per_step": 0.8,
            },
        },
    )
    sources = [
        dict(path="a.json", kind="compare", setting="s", doc="x.md", steps=60, primary={"pop": "pop"}, tests=False),
        dict(path="j.json", kind="codeact", setting="t", doc="x.md", primary={"judge_agent": "judge_agent"}),
    ]
    pop, agent = _build(["pop", "judge_agent"], sources, tmp_path)["rows"]
    assert (pop["pass1_mean"], pop["baseline_pass1_mean"]) == (0.0, 0.59)
    assert pop["welch_p"] is None and pop["paired"] is None and pop["s_per_step_x"] == 0.75  # s/step still shown
    assert (agent["pass1_mean"], agent["per_seed"], agent["steps"]) == (0.635, [0.69, 0.58], 20)
    assert agent["s_per_step"] == 29.0 and agent["s_per_step_x"] == pytest.approx(29.0 / 0.8)


def test_populora_reader_against_the_single_agent(tmp_path):
    # populora_compare.py: the population's mean student against the compute-matched AZR agent, 2 seeds x 30 steps
    stat = lambda vals, mean, std: {"per_seed": vals, "mean": mean, "std": std}  # noqa: E731
    _write(
        tmp_path,
        "pop.json",
        {
            "args": {"steps": 30},
            "rows": [
                {"seed": 0, "populora": {"seconds": 300.0}, "azr": {"seconds": 100.0}},
                {"seed": 1, "populora": {"seconds": 600.0}, "azr": {"seconds": 150.0}},
            ],
            "summary": {
                "pop_mean": stat([0.20, 0.24], 0.22, 0.028),
                "pop_best": stat([0.3, 0.3], 0.3, 0.0),
                "azr": stat([0.21, 0.19], 0.20, 0.014),
                "wall_ratio": stat([3.0, 4.0], 3.5, 0.7),
                "welch_p_pop_mean_vs_azr": 0.52,
                "paired_pop_mean_vs_azr": {"diff": 0.02, "ci_low": -0.03, "ci_high": 0.07},
            },
        },
    )
    src = dict(
        path="pop.json", kind="populora", setting="s", doc="x.md", baseline="azr", primary={"populora": "populora"}
    )
    (row,) = _build(["populora"], [src], tmp_path)["rows"]
    assert (row["pass1_mean"], row["per_seed"], row["seeds"], row["steps"]) == (0.22, [0.20, 0.24], 2, 30)
    assert (row["baseline"], row["baseline_pass1_mean"], row["welch_p"]) == ("azr", 0.20, 0.52)
    assert row["paired"] == {"diff": 0.02, "low": -0.03, "high": 0.07, "mcnemar_p": None}
    # s/step: populora (10 + 20) / 2 = 15, the agent (3.33 + 5) / 2 = 4.17; the ratio is the JSON's wall ratio
    assert row["s_per_step"] == pytest.approx(15.0) and row["baseline_s_per_step"] == pytest.approx(25 / 6)
    assert row["s_per_step_x"] == 3.5


def test_real_model_reader_one_health_run_per_recipe(tmp_path):
    # real_model_recipes.py: one seed per recipe; a recipe that failed has a row with ran false and nothing else
    _write(
        tmp_path,
        "rm.json",
        {
            "steps": 10,
            "settings": ["lora.r=16", "group_size=4"],
            "rows": [
                {
                    "recipe": "dapo",
                    "ran": True,
                    "after_pass@1": 0.406,
                    "after_truncation_rate": 0.05,
                    "after_format_rate": 1.0,
                    "after_mean_length": 51.5,
                    "s_per_step": 80.5,
                    "peak_rss_mib": 3100,
                },
                {"recipe": "lze", "ran": False, "exit": 1},
            ],
        },
    )
    src = dict(path="rm.json", kind="real_model", setting="smollm2", doc="x.md", primary={}, tests=False)
    table = _build(["grpo", "dapo", "lze"], [src], tmp_path)
    dapo, lze = table["other"]
    assert (dapo["entry"], dapo["pass1_mean"], dapo["seeds"], dapo["per_seed"], dapo["steps"]) == (
        "dapo",
        0.406,
        1,
        [0.406],
        10,
    )
    assert (dapo["eval_truncation"], dapo["eval_format"], dapo["eval_mean_length"], dapo["s_per_step"]) == (
        0.05,
        1.0,
        51.5,
        80.5,
    )
    assert dapo["baseline_pass1_mean"] is None and dapo["welch_p"] is None and dapo["s_per_step_x"] is None
    assert (lze["entry"], lze["pass1_mean"], lze["seeds"], lze["measured"]) == ("lze", None, 0, False)


def test_the_committed_table_is_unchanged_and_its_measurements_up_to_date():
    # docs/health.md pastes `python benchmarks/learning/health_table.py --markdown` as printed: the table built from the
    # committed measurements must be in it verbatim (before the one format, the same text came from six readers
    # of the raw files), and converting the committed result files again must give the committed measurements
    assert ms.write_all(ht.SOURCES, check=True) == []
    table = ht.build(ht.recipe_order())  # the README's recipe order, as main() prints it
    assert table["missing_sources"] == []
    assert ht.markdown(table) in (Path(__file__).parents[1] / "docs" / "health.md").read_text()


def test_a_measurement_of_another_format_or_with_a_missing_field_is_refused(tmp_path):
    entry = {f: None for f in ms.FIELDS}
    good = {
        "format": ms.FORMAT,
        "source": "a.json",
        "kind": "compare",
        "steps": 1,
        "first": None,
        "entries": {"x": entry},
    }
    _write(tmp_path, "a.measurement.json", good)
    assert ms.read_measurement(tmp_path / "a.measurement.json", "a.json")[0]["x"]["mean"] is None
    for bad in (
        {**good, "format": "other/1"},
        {**good, "source": "b.json"},
        {**good, "entries": {"x": {k: v for k, v in entry.items() if k != "s_per_step"}}},
        {**good, "entries": {"x": {**entry, "paired_vs_first": {"diff": 0.1}}}},
    ):
        _write(tmp_path, "a.measurement.json", bad)
        with pytest.raises(ValueError, match="a.measurement.json"):
            ms.read_measurement(tmp_path / "a.measurement.json", "a.json")
