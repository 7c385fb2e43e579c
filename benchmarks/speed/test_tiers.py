"""Wall-clock time of the two test tiers: `pytest -q` (the default: unit tests and one short end-to-end
run per recipe) and `pytest -q -m slow` (the rest). A benchmark, never an assertion: run it on an idle
machine, it prints a table and writes JSON.

    python benchmarks/speed/test_tiers.py [--tiers default,slow] [--json benchmarks/results/test_tiers.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TIERS = {"default": [], "slow": ["-m", "slow"]}


def run_tier(name: str) -> dict:
    """Run one tier in a fresh process; its wall time and pytest's counts."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-rfE", "-p", "no:cacheprovider", *TIERS[name]]
    t0, c0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    seconds, c1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
    # CPU seconds of the tier and its subprocesses: on a shared machine the wall clock includes other
    # jobs' time, the CPU time does not (an idle 2-core machine runs the tier in about this / parallelism)
    cpu = (c1.ru_utime - c0.ru_utime) + (c1.ru_stime - c0.ru_stime)
    tail = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    counts = {kind: int(n) for n, kind in re.findall(r"(\d+) (passed|failed|skipped|deselected|errors?)", tail)}
    failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", proc.stdout, re.M)  # pytest -q's short summary (-rfE)
    return {
        "tier": name,
        "command": " ".join(["pytest", "-q", *TIERS[name]]),
        "seconds": round(seconds, 1),
        "cpu_seconds": round(cpu, 1),
        "exit_code": proc.returncode,
        "summary": tail,
        "failed_tests": failed,
        **counts,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiers", default="default,slow")
    ap.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "test_tiers.json"))
    args = ap.parse_args()
    rows = [run_tier(t) for t in args.tiers.split(",")]
    print(f"{'tier':<8} {'wall':>9} {'cpu':>9} {'passed':>7} {'failed':>7} {'skipped':>8}  command")
    for r in rows:
        print(
            f"{r['tier']:<8} {r['seconds']:>8.1f}s {r['cpu_seconds']:>8.1f}s {r.get('passed', 0):>7} "
            f"{r.get('failed', 0):>7} {r.get('skipped', 0):>8}  {r['command']}"
        )
    out = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "load_average_at_end": os.getloadavg(),
        },
        "tiers": rows,
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.json}")
    sys.exit(max(r["exit_code"] for r in rows))


if __name__ == "__main__":
    main()
