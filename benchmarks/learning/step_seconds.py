"""Median seconds per training step of every run in a compare folder, from each run's
``metrics.jsonl`` (the sum of a step's ``time/*`` phases: generation, scoring, update, second
rounds), with the ratio to the first recipe. Run it on a compare made on an otherwise idle machine:

    reasonrl compare --recipes grpo,ssopd,... --seeds 1 --steps 15 --out runs/steptime \
        model=$PWD/runs/ctxbase45 final_eval_problems=0 eval_every=0 save_every=0
    python benchmarks/learning/step_seconds.py runs/steptime \
        --out benchmarks/results/compare_selfteach/step_seconds.json

The first step is left out (one-time warm-up of kernels and caches).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from reasonrl.loop.tracking import read_metrics


def step_seconds(run_dir: Path) -> list[float]:
    rows = read_metrics(run_dir / "metrics.jsonl")
    return [sum(v for k, v in r.items() if k.startswith("time/")) for r in rows if r.get("step", 0) > 1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("compare", type=Path, help="a `reasonrl compare --out` folder")
    ap.add_argument("--out", type=Path, help="write the table as JSON here")
    args = ap.parse_args()
    report = json.loads((args.compare / "compare.json").read_text())
    rows = []
    for run in report["runs"]:
        secs = step_seconds(Path(run["run_dir"]))
        rows.append(
            {
                "recipe": run["recipe"],
                "seed": run["seed"],
                "steps": len(secs),
                "median_s_per_step": statistics.median(secs),
            }
        )
    first = rows[0]["median_s_per_step"]
    print(f"{'recipe':12} {'steps':>5} {'s/step':>8} {'x first':>8}")
    for r in rows:
        r["ratio_to_first"] = r["median_s_per_step"] / first
        print(f"{r['recipe']:12} {r['steps']:>5} {r['median_s_per_step']:>8.2f} {r['ratio_to_first']:>8.2f}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
