"""The package installed as a user installs it (issue 46): a fresh virtual environment, the CPU torch wheel, then
``pip install <repo>`` with no extras. ``reasonrl compare --seeds 2`` (Welch's test needs scipy) and an ``hf:``
dataset folder (datasets, pyarrow) must work there: both broke when scipy and datasets lived only in ``[test]``.

Slow tier: about 2 minutes (the install resolves from the package index or its cache, then two 1-step runs)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def _pip(py: Path, *args: str) -> None:
    done = subprocess.run([str(py), "-m", "pip", "install", "--quiet", *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def _source_copy(dest: Path) -> Path:
    """pyproject, README and src/ only: pip builds in the tree it is given, so the worktree stays clean."""
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, dest / name)
    shutil.copytree(ROOT / "src", dest / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    return dest


@pytest.fixture(scope="module")
def bare_venv(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("bare")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    _pip(py, "torch==2.13.0")  # the CPU wheel, first: unpinned torch pulls a multi-GB CUDA build
    _pip(py, str(_source_copy(base)))  # no extras
    return venv


def _run(venv: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": ""}  # the venv's reasonrl, not the worktree's src/
    return subprocess.run([str(venv / "bin" / "reasonrl"), *args], capture_output=True, text=True, cwd=cwd, env=env)


def test_no_extras_install_has_the_core_dependencies(bare_venv):
    py = bare_venv / "bin" / "python"
    # Welch's t on [0.1, 0.2] vs [0.3, 0.5]: means 0.15 and 0.4, variances 0.005 and 0.02 (ddof 1),
    # se = sqrt(0.005/2 + 0.02/2) = sqrt(0.0125) = 0.111803; t = -0.25 / 0.111803 = -2.23607
    code = (
        "from reasonrl.eval.metrics import welch_t_test; import datasets, pyarrow; "
        "print(round(welch_t_test([0.1, 0.2], [0.3, 0.5])[0], 5))"
    )
    done = subprocess.run([str(py), "-c", code], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": ""})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "-2.23607"


def test_compare_with_two_seeds_and_an_hf_folder_without_extras(bare_venv, tmp_path):
    data = tmp_path / "gsm"
    data.mkdir()
    for split, n in (("train", 6), ("test", 4)):  # the gsm8k layout: the preset reads the number after ####
        rows = [{"question": f"What is {i}+{i + 1}?", "answer": f"{i} plus {i + 1} #### {2 * i + 1}"} for i in range(n)]
        (data / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    done = _run(
        bare_venv,
        "compare",
        "--recipes",
        "grpo",
        "--seeds",
        "2",
        "--steps",
        "1",
        "--out",
        str(tmp_path / "c"),
        "prompts_per_step=2",
        "group_size=2",
        "eval_every=0",
        "final_eval_problems=4",
        "final_eval_k=0",
        "save_every=0",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    table = json.loads((tmp_path / "c" / "compare.json").read_text())["table"]
    assert table[0]["runs_ok"] == 2 and table[0]["runs_failed"] == 0
    done = _run(
        bare_venv,
        "eval",
        "--task",
        f"hf:{data}",
        "--problems",
        "2",
        "--samples-per-problem",
        "0",
        "--max-new-tokens",
        "8",
        "--json",
        str(tmp_path / "e.json"),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert json.loads((tmp_path / "e.json").read_text())["n_problems"] == 2
