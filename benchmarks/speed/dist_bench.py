"""1 process against N torchrun (gloo) processes on the default run, in one run of this script.

Prints a table and writes ``benchmarks/results/dist_bench.json``: wall-clock, mean seconds per step
and its parts (generate, score, update, and the collectives' share ``time/comm``), and whether the
logged metrics agree (they must: rollouts are keyed by prompt). On a 2-core machine 2 processes
cannot be faster than 1 (each gets one core); the figure to read is the overhead.

    python benchmarks/speed/dist_bench.py --steps 40 --nproc 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PARTS = ("time/generate", "time/score", "time/update", "time/comm")
CHECKED = ("reward/mean", "accuracy", "loss/total", "grad_norm", "entropy/mean")


def run(nproc: int, steps: int, out: Path, extra: list[str]) -> dict:
    cmd = [
        sys.executable,
        "-m",
        "reasonrl",
        "train",
        f"--steps={steps}",
        f"--out={out}",
        f"--nproc={nproc}",
        "final_eval_problems=0",
        "eval_every=0",
        *extra,
    ]
    t0 = time.perf_counter()
    subprocess.run(
        cmd,
        check=True,
        stdout=subprocess.DEVNULL,
        env={**os.environ, "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // nproc))},
    )
    wall = time.perf_counter() - t0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    step = [sum(r[k] for k in PARTS if k != "time/comm") for r in rows]
    return {
        "nproc": nproc,
        "wall_s": wall,
        "step_s": statistics.mean(step),
        **{k: statistics.mean(r[k] for r in rows) for k in PARTS},
        "metrics": rows,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--out", default="benchmarks/results/dist_bench.json")
    ap.add_argument("overrides", nargs="*", help="extra key=value run settings")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        res = [run(n, args.steps, Path(tmp) / f"n{n}", args.overrides) for n in (1, args.nproc)]
    one, many = res
    worst = max(abs(a[k] - b[k]) for a, b in zip(one["metrics"], many["metrics"]) for k in CHECKED if k in a)
    print("| processes | wall s | s/step | generate | score | update | comm (all-reduce + gathers) |")
    print("|---|---|---|---|---|---|---|")
    for r in res:
        print(
            f"| {r['nproc']} | {r['wall_s']:.1f} | {r['step_s']:.3f} | {r['time/generate']:.3f} | "
            f"{r['time/score']:.3f} | {r['time/update']:.3f} | {r['time/comm']:.3f} |"
        )
    print(
        f"wall ratio {many['wall_s'] / one['wall_s']:.2f}x, step ratio {many['step_s'] / one['step_s']:.2f}x; "
        f"largest metric difference over {CHECKED}: {worst:.2e}; {os.cpu_count()} CPU cores"
    )
    summary = {
        "steps": args.steps,
        "cpu_count": os.cpu_count(),
        "max_metric_diff": worst,
        "runs": [{k: v for k, v in r.items() if k != "metrics"} for r in res],
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
