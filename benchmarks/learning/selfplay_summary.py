"""What the self-play loop did in each run of a comparison: the proposer's side of AZR / EvoEnv.

    python benchmarks/learning/selfplay_summary.py runs/selfplay/azr [--prefix azr/]

``reasonrl compare`` tables the solver's held-out accuracy; this reads every run's ``metrics.jsonl``
and tables, per recipe (mean over seeds, per-seed values in brackets), the self-play metrics at the
first and the last logged step (e.g. AZR's valid-proposal rates, p_hat, program size and depth;
EvoEnv's admissions, pool size, rejections by stage, generator reward) and the step seconds. Writes
``selfplay.json`` beside ``compare.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def run_rows(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def window(rows: list[dict], key: str, first: bool, n: int = 5) -> float | None:
    """Mean of ``key`` over the first (or last) ``n`` steps that logged it."""
    vals = [r[key] for r in rows if isinstance(r.get(key), (int, float))]
    vals = vals[:n] if first else vals[-n:]
    return statistics.fmean(vals) if vals else None


def summarise(compare_dir: Path, prefix: str) -> dict[str, dict[str, dict[str, list[float]]]]:
    report = json.loads((compare_dir / "compare.json").read_text())
    out: dict[str, dict[str, dict[str, list[float]]]] = {}
    for run in report["runs"]:
        rows = run_rows(Path(run["run_dir"]))
        keys = sorted({k for r in rows for k in r if k.startswith(prefix)} | {"time/step", "accuracy"})
        mine = out.setdefault(run["recipe"], {})
        for key in keys:
            for side in ("first", "last"):
                v = window(rows, key, side == "first")
                if v is not None:
                    mine.setdefault(f"{key} ({side})", []).append(v)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("compare_dir", type=Path)
    ap.add_argument("--prefix", default="", help="metric prefix to report (azr/, evoenv/)")
    args = ap.parse_args()
    table = summarise(args.compare_dir, args.prefix)
    for recipe, metrics in table.items():
        print(f"\n{recipe}")
        for key, vals in metrics.items():
            print(f"  {key:48s} {statistics.fmean(vals):9.3f}  [{', '.join(f'{v:.3f}' for v in vals)}]")
    (args.compare_dir / "selfplay.json").write_text(json.dumps(table, indent=1))


if __name__ == "__main__":
    main()
