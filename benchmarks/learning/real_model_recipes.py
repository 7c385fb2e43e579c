"""More recipes on the real model (issue 42 item 6): each for a few steps from SmolLM2-135M-Instruct
on word_math, small steps (2 prompts x 4 samples, 96 new tokens) with the LoRA settings of
benchmarks/learning/real_model.py: whether it runs, what its own part did (its metrics), its peak memory,
seconds per step, and held-out greedy pass@1 afterwards (a health check, one seed: not a comparison).

    OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/learning/real_model_recipes.py --recipes dapo,cipo,lze \\
        --out benchmarks/results/real_model/recipes.json

Each recipe trains in a process of its own (`--child`), which reports its peak resident memory
(``ru_maxrss``) when it ends; the eval is `reasonrl eval` of the run's final/ (the merged model).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

MODEL = "smollm2-135m-instruct"
TASK = "word_math"
SETTINGS = [
    "lora.r=16",
    "lora.alpha=32",
    "optim.lr=3e-4",
    "optim.warmup_steps=1",
    "group_size=4",
    "prompts_per_step=2",
    "sampling.temperature=0.7",
    "sampling.max_new_tokens=96",
    "micro_batch_size=16",
    "final_eval_problems=0",
    "eval_every=0",
    "save_every=0",
]
# each recipe's own metrics (what its part did), read from metrics.jsonl
PART_METRICS = {
    "dapo": ("dynamic/groups_kept", "dynamic/rounds", "dynamic/batch_short"),
    "cipo": ("cipo/groups", "cipo/accuracy", "cipo/rho"),
    "lze": ("select/kept_frac", "select/pruned", "select/update_tokens_saved"),
}


def child(recipe: str, steps: int, out: Path) -> None:
    """Train one recipe in this process; write its peak RSS (MiB) beside the run."""
    from reasonrl.cli import main as cli_main

    try:
        cli_main(
            [
                "train",
                "--recipe",
                recipe,
                "--model",
                MODEL,
                "--task",
                TASK,
                "--steps",
                str(steps),
                "--out",
                str(out),
                *SETTINGS,
            ]
        )
    except SystemExit as stop:  # typer ends the command with SystemExit(0)
        if stop.code not in (0, None):
            raise
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
    (out / "peak_rss_mib.txt").write_text(f"{peak:.0f}\n")


def part_summary(metrics: list[dict], recipe: str) -> dict:
    """Mean over the steps of each of the recipe's own metrics that the run logged."""
    out = {}
    for key in PART_METRICS.get(recipe, ()):
        vals = [m[key] for m in metrics if isinstance(m.get(key), (int, float))]
        if vals:
            out[key] = round(statistics.fmean(vals), 4)
    prefix = {k.split("/")[0] for k in PART_METRICS.get(recipe, ())}
    out["logged_keys"] = sorted({k for m in metrics for k in m if k.split("/")[0] in prefix})
    return out


def measure(recipe: str, steps: int, problems: int, runs: Path) -> dict:
    run_dir = runs / recipe
    start = time.perf_counter()
    done = subprocess.run([sys.executable, __file__, "--child", recipe, "--steps", str(steps), "--runs", str(runs)])
    train_s = time.perf_counter() - start
    row = {
        "recipe": recipe,
        "ran": done.returncode == 0,
        "exit": done.returncode,
        "train_minutes": round(train_s / 60, 2),
    }
    if done.returncode != 0:
        return row
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    evaluation = runs / f"{recipe}_eval.json"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "reasonrl.cli",
            "eval",
            "--model",
            str(run_dir / "final"),
            "--task",
            TASK,
            "--problems",
            str(problems),
            "--samples-per-problem",
            "0",
            "--json",
            str(evaluation),
        ],
        check=True,
    )
    after = json.loads(evaluation.read_text())
    step_s = [m["time/generate"] + m["time/score"] + m["time/update"] for m in metrics]
    row.update(
        steps=len(metrics),
        peak_rss_mib=int((run_dir / "peak_rss_mib.txt").read_text()),
        s_per_step=round(statistics.median(step_s), 1),
        train_accuracy_first3=round(statistics.fmean(m["accuracy"] for m in metrics[:3]), 3),
        train_accuracy_last3=round(statistics.fmean(m["accuracy"] for m in metrics[-3:]), 3),
        length_first3=round(statistics.fmean(m["length/mean"] for m in metrics[:3]), 1),
        length_last3=round(statistics.fmean(m["length/mean"] for m in metrics[-3:]), 1),
        part=part_summary(metrics, recipe),
        load_average=round(os.getloadavg()[0], 2),
        **{f"after_{k}": after[k] for k in ("pass@1", "format_rate", "mean_length", "truncation_rate")},
    )
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--recipes", default="dapo,cipo,lze")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--problems", type=int, default=32)
    ap.add_argument("--runs", type=Path, default=Path("runs/real_model_recipes"))
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/real_model/recipes.json"))
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.steps, args.runs / args.child)
        return
    args.runs.mkdir(parents=True, exist_ok=True)
    rows = []
    for recipe in args.recipes.split(","):
        rows.append(measure(recipe, args.steps, args.problems, args.runs))
        result = {
            "model": MODEL,
            "task": TASK,
            "steps": args.steps,
            "problems": args.problems,
            "settings": SETTINGS,
            "threads": os.environ.get("OMP_NUM_THREADS", "torch default"),
            "rows": rows,
            "command": "OMP_NUM_THREADS="
            + os.environ.get("OMP_NUM_THREADS", "")
            + " python benchmarks/learning/real_model_recipes.py "
            + " ".join(sys.argv[1:]),
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")  # after each recipe: a stopped run keeps its rows
    for r in rows:
        print(json.dumps(r))


if __name__ == "__main__":
    main()
