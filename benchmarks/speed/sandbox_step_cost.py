"""What the sandbox costs a self-play step (issue 41: one fresh fork per program and environment module).

Runs ``reasonrl train ARGS`` in this process with ``reasonrl.rewards.sandbox.run_python`` wrapped to
count its calls, their wall seconds and the sandboxed CPU seconds, and appends one row (the totals,
the run's s/step from its summary, the load average) to ``--json``. Point ``PYTHONPATH`` at an older
checkout's ``src`` to measure the code before a change with the same script, and alternate the two
(the machine's load drifts):

    OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/speed/sandbox_step_cost.py --json OUT.json --label after \
        -- train --recipe azr --task azr --steps 8 --out runs/sbx/azr-after-1 model=BASE eval_every=0 \
        final_eval_problems=0 save_every=0

``--summary OUT.json`` prints the table of a finished file (medians per label and recipe).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path


def measure(label: str, argv: list[str]) -> dict:
    import reasonrl.rewards.sandbox as sb
    from reasonrl.cli import app

    real, stats = sb.run_python, {"calls": 0, "wall_s": 0.0, "cpu_s": 0.0}

    def counted(*a, **k):  # the callers look run_python up on the package when they run
        t = time.perf_counter()
        r = real(*a, **k)
        stats["wall_s"] += time.perf_counter() - t
        stats["cpu_s"] += r.cpu_seconds or 0.0
        stats["calls"] += 1
        return r

    sb.run_python = counted
    load = os.getloadavg()[0]
    sys.argv = ["reasonrl", *argv]
    try:
        app(standalone_mode=False)
    finally:
        sb.run_python = real
    out = Path(argv[argv.index("--out") + 1])
    summary = json.loads((out / "summary.json").read_text())
    steps = sum(1 for _ in (out / "metrics.jsonl").open())
    return {
        "label": label,
        "recipe": summary["recipe"],
        "steps": steps,
        "s_per_step": summary["train_seconds"] / steps,
        "sandbox": stats,
        "load_average": [round(load, 2), round(os.getloadavg()[0], 2)],
        "argv": argv,
    }


def table(rows: list[dict]) -> str:
    lines = [
        "| recipe | code | runs | s/step (median) | sandbox wall s/step | sandbox CPU s/step | calls/step |",
        "|---|---|---|---|---|---|---|",
    ]
    keys = sorted({(r["recipe"], r["label"]) for r in rows})
    for recipe, label in keys:
        rs = [r for r in rows if (r["recipe"], r["label"]) == (recipe, label)]
        med = lambda f: statistics.median(f(r) for r in rs)  # noqa: E731, B023 - used in this iteration only
        lines.append(
            f"| {recipe} | {label} | {len(rs)} | {med(lambda r: r['s_per_step']):.1f} | "
            f"{med(lambda r: r['sandbox']['wall_s'] / r['steps']):.2f} | "
            f"{med(lambda r: r['sandbox']['cpu_s'] / r['steps']):.3f} | "
            f"{med(lambda r: r['sandbox']['calls'] / r['steps']):.1f} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", type=Path, default=Path("benchmarks/results/sandbox_step_cost.json"))
    ap.add_argument("--label", default="after")
    ap.add_argument("--summary", action="store_true", help="print the table of --json and exit")
    ap.add_argument("argv", nargs=argparse.REMAINDER, help="-- then the reasonrl command line (train ...)")
    args = ap.parse_args()
    data = json.loads(args.json.read_text()) if args.json.exists() else {"rows": []}
    if not args.summary:
        argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
        data["rows"].append(measure(args.label, argv))
        data["command"] = (
            "OMP_NUM_THREADS=1 python benchmarks/speed/sandbox_step_cost.py --json FILE --label LABEL -- train ..."
        )
        args.json.write_text(json.dumps(data, indent=1) + "\n")
    print(table(data["rows"]))


if __name__ == "__main__":
    main()
