import json

import pytest
from typer.testing import CliRunner

from reasonrl.cli import app, parse_options

runner = CliRunner()


def invoke(*args):
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, f"{result.output}\n{result.exception!r}"
    return result


def test_parse_options_reads_yaml_scalars_but_keeps_operators():
    assert parse_options(["max_digits=2", "ops=-", "x=[1, 2]", "flag=true", "name=a b"]) == {
        "max_digits": 2,
        "ops": "-",
        "x": [1, 2],
        "flag": True,
        "name": "a b",
    }


def test_tasks_lists_builtin_and_reasoning_gym():
    rows = json.loads(invoke("tasks", "--json").stdout)
    names = {r["name"] for r in rows}
    assert {"arithmetic", "rg:chain_sum", "rg:basic_arithmetic"} <= names
    assert next(r for r in rows if r["name"] == "rg:chain_sum")["options"]["max_terms"] == 6


@pytest.mark.slow
def test_short_pretrain_then_eval_on_reasoning_gym(tmp_path):
    # a short version of the command that regenerates the shipped base (README)
    out = tmp_path / "m"
    invoke(
        "pretrain",
        "--steps",
        6,
        "--batch-size",
        16,
        "--eval-every",
        3,
        "--eval-problems",
        10,
        "--until-pass",
        0.99,
        "--half",
        "--out",
        out,
    )
    assert (out / "model.safetensors").exists() and (out / "tokenizer.json").exists()
    report = tmp_path / "e.json"
    invoke(
        "eval",
        "--task",
        "rg:chain_sum",
        "--task-opt",
        "max_terms=3",
        "--model",
        out,
        "--problems",
        6,
        "--samples-per-problem",
        2,
        "--json",
        report,
        "--samples",
        tmp_path / "s.jsonl",
    )
    summary = json.loads(report.read_text())
    assert set(summary) >= {"pass@1", "pass@2", "avg@2", "maj@2", "n_problems"} and summary["n_problems"] == 6
    samples = [json.loads(line) for line in (tmp_path / "s.jsonl").read_text().splitlines()]
    assert len(samples) == 6 * 3 and {s["mode"] for s in samples} == {"greedy", "sampled"}


def test_bad_task_option_is_named():
    result = runner.invoke(app, ["eval", "--problems", "2", "--samples-per-problem", "0", "--task-opt", "digits=2"])
    assert result.exit_code != 0 and "digits" in str(result.exception) and "max_digits" in str(result.exception)


@pytest.mark.slow
def test_default_eval_on_the_shipped_base_is_in_the_learning_zone(tmp_path):
    # the bar: `reasonrl eval` with no arguments -> greedy pass@1 in [0.30, 0.55], pass@8 above it
    report = tmp_path / "e.json"
    invoke("eval", "--json", report)
    s = json.loads(report.read_text())
    assert s["n_problems"] == 500 and 0.30 <= s["pass@1"] <= 0.55 and s["pass@8"] > s["pass@1"]


def test_the_hubs_download_bars_stay_on_while_transformers_bars_are_off():
    # issue 46: transformers' disable_progress_bar also switches off huggingface_hub's bars, so a model download
    # was silent; the command line keeps transformers' loading/writing bars off and the hub's download bars on
    from huggingface_hub import utils as hub_utils
    from transformers.utils import logging as hf_logging

    from reasonrl.commands.common import quiet_transformers

    try:
        hub_utils.disable_progress_bars()
        quiet_transformers()
        assert not hub_utils.are_progress_bars_disabled() and not hf_logging.is_progress_bar_enabled()
    finally:
        hf_logging.enable_progress_bar()
