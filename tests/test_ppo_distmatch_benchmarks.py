"""The issue #32 and #33 benchmarks' --smoke modes (two steps, a few problems): their code paths, tables
and JSON run end to end, not their figures. The diffusion group needs the shipped masked-diffusion LM."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]


def _run(script, *args):
    env = {"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    res = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), "--smoke", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=1800,
        env=env,
        cwd=ROOT,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stdout


@pytest.mark.slow
def test_ppo_vs_grpo_smoke(tmp_path):
    out = _run("learning/ppo_vs_grpo.py", "--out", tmp_path / "runs", "--json", tmp_path / "ppo.json")
    rows = json.loads((tmp_path / "ppo.json").read_text())["rows"]
    assert set(rows) == {"grpo", "ppo"} and "recipe" in out
    # one seed of 20 greedy problems (final_eval_k=0): each final pass@1 is a whole number of problems out of 20,
    # and the row's mean is that run's own final (compare.json)
    report = json.loads((tmp_path / "runs" / "compare.json").read_text())
    for recipe, r in rows.items():
        own = [run["final"] for run in report["runs"] if run["recipe"] == recipe]
        assert r["finals"] == own and r["final_pass@1_mean"] == own[0] and abs(own[0] * 20 - round(own[0] * 20)) < 1e-9


@pytest.mark.slow
def test_rm_accuracy_smoke(tmp_path):
    out = _run("studies/rm_accuracy.py", "--out", tmp_path / "rm")
    assert (tmp_path / "rm" / "config.json").is_file() and out.strip()


@pytest.mark.slow
def test_distmatch_ar_smoke(tmp_path):
    _run("learning/distmatch.py", "--group", "ar", "--out", tmp_path)
    result = json.loads((tmp_path / "ar.json").read_text())
    assert [r["recipe"] for r in result["rows"]][0] == "grpo" and not any(r["errors"] for r in result["rows"])
