"""What fest's demo term costs and does, per step, read from a `reasonrl compare` folder (issue 13).

    python benchmarks/fest_costs.py runs/compare_fest [benchmarks/results/fest/costs.json]

For each recipe (runs named <recipe>-seed<k>): mean seconds per step (generation, update, whole
step from the step's own timers), tokens generated per step, and for fest the demo term's own
metrics (pairs per step, demo prompts' rollout accuracy, alpha, the mean DPO loss and margin), each
averaged over every step of every seed. Prints a table and writes the JSON.
"""
from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path
from statistics import mean

KEYS = ("time/generate", "time/update", "tokens/generated", "accuracy", "fest/pairs", "fest/demo_accuracy",
        "fest/alpha", "fest/dpo_loss_term", "fest/margin_term")


def read(folder: Path) -> dict[str, dict[str, float]]:
    by_recipe: dict[str, list[dict]] = defaultdict(list)
    for run in sorted(p for p in folder.iterdir() if (p / "metrics.jsonl").is_file()):
        recipe = run.name.rsplit("-seed", 1)[0]
        by_recipe[recipe] += [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    out = {}
    for recipe, rows in by_recipe.items():
        stats = {k: mean(r[k] for r in rows) for k in KEYS if all(k in r for r in rows)}
        stats["seconds/step"] = mean(r["time/generate"] + r["time/score"] + r["time/update"] for r in rows)
        stats["steps"] = len(rows)
        out[recipe] = stats
    return out


def main() -> None:
    folder = Path(sys.argv[1])
    dest = Path(sys.argv[2]) if len(sys.argv) > 2 else Path("benchmarks/results/fest/costs.json")
    table = read(folder)
    cols = ["steps", "seconds/step", *KEYS]
    print("| recipe | " + " | ".join(cols) + " |")
    print("|---" * (len(cols) + 1) + "|")
    for recipe, stats in table.items():
        print(f"| {recipe} | " + " | ".join(f"{stats[c]:.3g}" if c in stats else "-" for c in cols) + " |")
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps({"folder": str(folder), "recipes": table}, indent=2) + "\n")


if __name__ == "__main__":
    main()
