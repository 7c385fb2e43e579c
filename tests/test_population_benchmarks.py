"""The issue #30 benchmarks' --smoke modes (fresh tiny models, two steps): their code paths, tables and JSON,
not their figures."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).parents[1] / "benchmarks"


def _run(script, out, *extra):
    env = {"PYTHONPATH": str(Path(__file__).parents[1] / "src"), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    res = subprocess.run([sys.executable, str(BENCH / script), "--smoke", "--json", str(out), "--runs",
                          str(out.parent / "runs"), *extra], capture_output=True, text=True, timeout=1800, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stdout, json.loads(out.read_text())


@pytest.mark.slow
def test_populora_compare_smoke(tmp_path):
    stdout, data = _run("populora_compare.py", tmp_path / "pop.json")
    assert "| seed | pop best | pop mean | pop worst | single AZR |" in stdout
    (row,) = data["rows"]
    assert set(row["populora"]["held_out"]) == {"s0", "s1"} and set(row["azr"]["held_out"]) == {"default"}
    assert row["populora"]["pbt_total"] == 4.0  # PBT at both steps: one teacher and one student each time
    assert row["summary"]["pop_worst"] <= row["summary"]["pop_mean"] <= row["summary"]["pop_best"]


@pytest.mark.slow
def test_prompt_policy_bench_smoke(tmp_path):
    stdout, data = _run("prompt_policy_bench.py", tmp_path / "pp.json", "--worker", "oracle")
    assert "| hint 1 |" in stdout and "| one-shot @ step 2 | 16 |" in stdout  # 2 contexts x G 2 x M 2 per step
    assert [p["train_worker_calls"] for p in data["curve"]] == [0, 8, 16]
    assert data["best_hint"].startswith("hint")


def test_prompt_policy_bench_nudge_template_is_the_warm_starts_hint_format():
    """--worker-template nudge: a hint-reading warm start (pretrain --contexts, NudgeRL's hinted prompt) must see the
    prompter's hint exactly as it learned to read one, and the bare problem when the prompt is empty."""
    import importlib.util

    from reasonrl.parts.nudge import HintSampling
    from reasonrl.prompting.workers import worker_input
    from reasonrl.tasks import Item

    spec = importlib.util.spec_from_file_location("prompt_policy_bench", BENCH / "prompt_policy_bench.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    item = Item(key="k", prompt="Q: 12+9=?\n", answer="21", meta={})
    want = HintSampling().template.format(hint="column 1 carries 1", prompt=item.prompt)
    assert worker_input("column 1 carries 1", item, bench.TEMPLATES["nudge"]) == want
    assert worker_input("", item, bench.TEMPLATES["nudge"]) == item.prompt
    assert worker_input("h", item, bench.TEMPLATES["plain"]) == "h\nQ: 12+9=?\n"
