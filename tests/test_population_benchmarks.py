"""The issue #30 benchmarks' --smoke modes (fresh tiny models, two steps): their code paths, tables and JSON,
not their figures."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).parents[1] / "benchmarks" / "learning"


def _run(script, out, *extra):
    env = {"PYTHONPATH": str(Path(__file__).parents[1] / "src"), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    res = subprocess.run(
        [
            sys.executable,
            str(BENCH / script),
            "--smoke",
            "--json",
            str(out),
            "--runs",
            str(out.parent / "runs"),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=1800,
        env=env,
    )
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
    assert len(data["start"]["correct"]) == 4 and len(row["azr"]["held_out"]["default"]["correct"]) == 4


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


def _seed_row(seed, students, agent, wall):
    held = {f"s{i}": {"pass@1": sum(c) / len(c), "correct": c} for i, c in enumerate(students)}
    pop = [h["pass@1"] for h in held.values()]
    return {
        "seed": seed,
        "populora": {"held_out": held},
        "azr": {"held_out": {"default": {"pass@1": sum(agent) / len(agent), "correct": agent}}},
        "summary": {
            "pop_best": max(pop),
            "pop_mean": sum(pop) / len(pop),
            "pop_worst": min(pop),
            "azr": sum(agent) / len(agent),
            "wall_ratio": wall,
        },
    }


def test_populora_summary_over_seeds_and_merge(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("populora_compare", BENCH / "populora_compare.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    # seed 0: students 0.50 / 0.25, agent 0.25; seed 1: students 0.25 / 0.75, agent 0.50
    r0 = _seed_row(0, [[1, 1, 0, 0], [0, 0, 0, 1]], [1, 0, 0, 0], 4.0)
    r1 = _seed_row(1, [[1, 0, 0, 0], [1, 0, 1, 1]], [1, 1, 0, 0], 5.0)
    m = bench.summarise([r0, r1])
    assert m["pop_best"]["per_seed"] == [0.5, 0.75] and m["pop_best"]["mean"] == pytest.approx(0.625)
    assert m["pop_mean"]["per_seed"] == [0.375, 0.5] and m["pop_worst"]["per_seed"] == [0.25, 0.25]
    assert m["azr"]["std"] == pytest.approx(0.1767767)  # stdev(0.25, 0.5) = 0.25 / sqrt(2)
    assert m["wall_ratio"]["mean"] == pytest.approx(4.5) and 0.0 < m["welch_p_pop_mean_vs_azr"] < 1.0
    # per-problem population means [.5 .5 0 .5 | 1 0 .5 .5] vs the agent [1 0 0 0 | 1 1 0 0]:
    # differences -.5 .5 0 .5 | 0 -1 .5 .5, sum 0.5 over 8 pairs: +0.0625 (= 0.4375 - 0.375)
    assert m["paired_pop_mean_vs_azr"]["diff"] == pytest.approx(0.0625) and m["paired_pop_mean_vs_azr"]["pairs"] == 8
    # best students s0 (seed 0), s1 (seed 1): [1 1 0 0 | 1 0 1 1]; only best right at 3 problems, only agent at 1:
    # diff 5/8 - 3/8 = 0.25, McNemar two-sided 2 * P(X <= 1 | n 4) = 2 * 5/16 = 0.625
    best = m["paired_pop_best_vs_azr"]
    assert (best["b"], best["c"]) == (3, 1) and best["diff"] == pytest.approx(0.25)
    assert best["mcnemar_p"] == pytest.approx(0.625)
    args = {"model": "m", "steps": 30, "seeds": "0", "runs": "r", "json": "j"}
    start = {"pass@1": 0.25, "correct": [1, 0, 0, 0]}
    (tmp_path / "a.json").write_text(json.dumps({"args": args, "rows": [r1]}))  # written before --lr and the start
    (tmp_path / "b.json").write_text(
        json.dumps({"args": {**args, "runs": "r2", "lr": None}, "start": start, "rows": [r0]})
    )
    merged = bench.merge([tmp_path / "a.json", tmp_path / "b.json"])
    assert [r["seed"] for r in merged["rows"]] == [0, 1] and merged["args"]["seeds"] == "0,1"
    assert merged["start"] == start
    (tmp_path / "d.json").write_text(json.dumps({"args": {**args, "lr": 5e-4}, "rows": [r0]}))
    with pytest.raises(SystemExit, match="not one setting"):
        bench.merge([tmp_path / "a.json", tmp_path / "d.json"])
    other = {**start, "pass@1": 0.5}  # a --start-only file (its own flag is no setting) of another model
    (tmp_path / "e.json").write_text(json.dumps({"args": {**args, "start_only": True}, "start": other, "rows": []}))
    with pytest.raises(SystemExit, match="different models"):
        bench.merge([tmp_path / "b.json", tmp_path / "e.json"])
    (tmp_path / "c.json").write_text(json.dumps({"args": {**args, "steps": 60}, "rows": [r0]}))
    with pytest.raises(SystemExit, match="not one setting"):
        bench.merge([tmp_path / "a.json", tmp_path / "c.json"])
    with pytest.raises(SystemExit, match="a seed appears twice"):
        bench.merge([tmp_path / "b.json", tmp_path / "b.json"])
