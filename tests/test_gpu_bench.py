"""benchmarks/speed/gpu_bench.py: every row in its own process, any failure recorded as its row, rows
compared like with like (issue 27)."""

import json

import pytest


def gpu_bench():
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).parents[1] / "benchmarks" / "speed" / "gpu_bench.py"
    spec = importlib.util.spec_from_file_location("gpu_bench", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_bench"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_gpu_bench_records_any_failure_as_its_row_and_compares_like_with_like():
    gb = gpu_bench()
    run = gb.Run("reasonrl-mixed", "reasonrl", "mixed")
    died = gb.row_of(run, -9, None, "step 1\n  Killed\n")  # no row written: the process's death is the error
    assert died["error"] == "process died (killed by signal 9): Killed"
    assert gb.row_of(run, 1, None, "")["error"] == "process died (exit code 1): no output"
    raised = {**gb.dataclasses.asdict(run), "error": "AttributeError: 'autocast' object has no attribute 'prev'"}
    assert gb.row_of(run, 0, json.dumps(raised), "") == raised  # what the child wrote wins
    fig = dict(s_generate=1.0, s_update=1.0, gen_tokens_per_s=100.0, peak_mem_gb=None)
    rows = [
        raised,
        {**gb.dataclasses.asdict(gb.Run("reasonrl-bf16", "reasonrl", "bf16")), "s_per_step": 2.0, **fig},
        {**gb.dataclasses.asdict(gb.Run("trl-bf16", "trl", "bf16")), "s_per_step": 3.0, **fig},
        {**gb.dataclasses.asdict(gb.Run("trl-mixed", "trl", "mixed")), "skipped": "TRL is not installed"},
    ]
    rat = gb.ratios(rows)
    assert rat == {"reasonrl-bf16": {"speedup_vs_trl": 1.5, "memory_vs_trl": None}}  # 3.0 / 2.0; mixed has no peer
    text = gb.table(rows, rat)
    assert "| reasonrl-mixed | mixed (bf16 compute, fp32 weights) | error: AttributeError:" in text
    assert "| reasonrl-bf16 | bf16 (pure: bf16 weights) | 2.00 | 1.00 | 100 | 1.00 | n/a | 1.50x |" in text
    assert "| trl-mixed | mixed (bf16 compute, fp32 weights) | skipped: TRL is not installed |" in text


@pytest.mark.slow
def test_gpu_bench_smoke_prints_every_row(tmp_path):
    # every row of the GPU benchmark, each in its own process, on a CPU (tiny shapes, one step):
    # ~100 s on 2 cores (11 processes, each importing torch and transformers)
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).parents[1] / "benchmarks" / "speed" / "gpu_bench.py"
    out = subprocess.run(
        [sys.executable, str(script), "--smoke", "--json", str(tmp_path / "b.json")],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "| run | precision | s/step | generate s | new tokens/s | update s |" in out.stdout
    runs = json.loads((tmp_path / "b.json").read_text())["runs"]
    assert [r["name"] for r in runs] == [r.name for r in gpu_bench().RUNS]
    for r in runs:
        assert f"| {r['name']} |" in out.stdout
        if r["fw"] == "reasonrl":  # TRL may fail on a CPU (its error is then its row), reasonrl may not
            assert "error" not in r and r["s_per_step"] > 0 and r["mean_new_tokens"] > 0, r.get("traceback")
