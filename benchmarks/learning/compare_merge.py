"""One table from several ``reasonrl compare`` folders run with the same settings (e.g. two compares
run side by side, one per core, that share the first recipe's runs), with the same statistics
``reasonrl compare`` prints: final held-out greedy pass@1 (mean, std over seeds), the mean over the
training curve (auc), Welch and paired tests against the first recipe, plus the median seconds per
step (``time/*`` phases, step 1 left out) and generated tokens.

    python benchmarks/learning/compare_merge.py runs/cmp_data runs/cmp_teacher --first grpo \
        --json benchmarks/results/compare_13_14/table.json --only tgpo,rkl_opd --png docs/img/x.png

A recipe entry found in two folders is an error (its runs would be counted twice).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

from reasonrl.compare import _json_safe, collect, plot_compare, table_rows  # noqa: E402
from step_seconds import step_seconds  # noqa: E402  (benchmarks/learning/step_seconds.py: s/step from time/* phases)


def runs_of(folders: list[Path]) -> list:
    """Every finished run (summary.json present) of every folder, as :func:`collect` reads it."""
    seen: dict[str, Path] = {}
    results = []
    for folder in folders:
        for run in json.loads((folder / "compare.json").read_text())["runs"]:
            if not run["ok"]:
                continue
            if seen.setdefault(run["recipe"], folder) != folder:
                raise SystemExit(f"{run['recipe']} is in both {seen[run['recipe']]} and {folder}")
            results.append(collect(run["recipe"], run["seed"], Path(run["run_dir"])))
    return results


def at_seconds(curves: list[list[tuple[int, float, float]]], t: float) -> float | None:
    """Mean over seeds of held-out pass@1 at ``t`` training seconds, linear between evaluations
    (None when a seed's curve ends before ``t``)."""
    vals = []
    for curve in curves:
        pts = [(sec, acc) for _, sec, acc in curve]
        hit = next((i for i, (sec, _) in enumerate(pts) if sec >= t), None)
        if hit is None:
            return None
        (s0, a0), (s1, a1) = pts[max(hit - 1, 0)], pts[hit]
        vals.append(a1 if s1 == s0 else a0 + (a1 - a0) * (t - s0) / (s1 - s0))
    return sum(vals) / len(vals)


def per_second(results: list, recipes: list[str], long_folder: Path) -> list[dict]:
    """Each recipe's in-run pass@1 at its last evaluation against a longer baseline run's (the
    ``--per-second`` folder, e.g. grpo for twice the steps) at the same training seconds."""
    base = runs_of([long_folder])
    rows = []
    for name in recipes:
        runs = [x for x in results if x.recipe == name]
        t = sum(x.curve[-1][1] for x in runs) / len(runs)  # mean seconds to the last evaluation
        mine = sum(x.curve[-1][2] for x in runs) / len(runs)
        rows.append(
            {
                "recipe": name,
                "seconds": t,
                "pass@1_last_eval": mine,
                "baseline_at_same_seconds": at_seconds([b.curve for b in base], t),
            }
        )
    return rows


def diff_ci(paired: dict) -> str:
    """``+0.012 [-0.010,+0.034]``: the paired difference in pass@1 against the first, bootstrap 95% CI."""
    return f"{paired['diff']:+.3f} [{paired['ci_low']:+.3f},{paired['ci_high']:+.3f}]" if paired else "-"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="+", type=Path)
    ap.add_argument("--first", required=True, help="the recipe entry every other is tested against")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--only", help="comma-separated recipe entries to keep (default: all)")
    ap.add_argument("--png", type=Path, help="held-out pass@1 against steps and seconds, as compare.png")
    ap.add_argument(
        "--per-second",
        type=Path,
        help="a compare folder of the first recipe run longer: its in-run pass@1 at each recipe's training seconds",
    )
    args = ap.parse_args()
    results = runs_of(args.folders)
    if args.only:
        keep = {args.first, *args.only.split(",")}
        results = [r for r in results if r.recipe in keep]
    recipes = list(dict.fromkeys([args.first] + [r.recipe for r in results]))  # first, then in folder order
    rows = table_rows(results, recipes)
    s_step = {
        r: statistics.median(statistics.median(step_seconds(x.run_dir)) for x in results if x.recipe == r)
        for r in recipes
    }
    print(
        f"{'recipe':28} {'seeds':>5} {'final':>7} {'std':>6} {'auc':>6} {'p Welch':>8} {'McNemar':>8} "
        f"{'paired diff [95% CI]':>22} {'s/step':>7} {'x first':>7} {'gen tok':>8}"
    )
    for row in rows:
        ci = row.get("paired_vs_first") or {}
        paired = ci.get("mcnemar_p")
        row["median_s_per_step"] = s_step[row["recipe"]]
        row["s_per_step_vs_first"] = s_step[row["recipe"]] / s_step[args.first]
        p = row["p_vs_first"]
        print(
            f"{row['recipe'][:28]:28} {row['runs_ok']:>5} {row.get('final_mean', float('nan')):>7.3f} "
            f"{row.get('final_std', float('nan')):>6.3f} {row.get('auc', float('nan')):>6.3f} "
            f"{'-' if p is None else f'{p:.3f}':>8} {'-' if paired is None else f'{paired:.3f}':>8} "
            f"{diff_ci(ci):>22} "
            f"{row['median_s_per_step']:>7.2f} {row['s_per_step_vs_first']:>7.2f} {row.get('tokens', 0):>8.0f}"
        )
    secs = per_second(results, recipes, args.per_second) if args.per_second else None
    for row in secs or []:
        base = row["baseline_at_same_seconds"]
        print(
            f"per second: {row['recipe']:24} {row['seconds']:7.1f} s  pass@1 {row['pass@1_last_eval']:.3f}  "
            f"baseline at the same seconds {'-' if base is None else f'{base:.3f}'}"
        )
    if args.png:
        plot_compare(results, recipes, args.png)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                _json_safe(
                    {"folders": [str(f) for f in args.folders], "first": args.first, "table": rows, "per_second": secs}
                ),
                indent=2,
                default=str,
            )
        )


if __name__ == "__main__":
    main()
