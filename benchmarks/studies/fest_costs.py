"""What fest's demo term costs and does, per step, read from a `reasonrl compare` folder (issue 13).

    python benchmarks/studies/fest_costs.py runs/compare_fest [benchmarks/results/fest/costs.json]

For each recipe (finished runs named <recipe>-seed<k>): held-out greedy pass@1 before and after and
training seconds (mean over seeds), mean seconds per step (generation, update, whole
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

KEYS = (
    "time/generate",
    "time/update",
    "tokens/generated",
    "accuracy",
    "fest/pairs",
    "fest/demo_accuracy",
    "fest/alpha",
    "fest/dpo_loss_term",
    "fest/margin_term",
)


def read(folder: Path) -> dict[str, dict[str, float]]:
    """Finished runs only (those with a summary.json): their steps' metrics and held-out pass@1."""
    by_recipe: dict[str, list[dict]] = defaultdict(list)
    finals: dict[str, list[dict]] = defaultdict(list)
    for run in sorted(p for p in folder.iterdir() if (p / "summary.json").is_file()):
        recipe = run.name.rsplit("-seed", 1)[0]
        by_recipe[recipe] += [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        finals[recipe].append(json.loads((run / "summary.json").read_text()))
    out = {}
    for recipe, rows in by_recipe.items():
        stats = {k: mean(r[k] for r in rows) for k in KEYS if all(k in r for r in rows)}
        stats["seeds"] = len(finals[recipe])
        stats["pass@1 before"] = mean(f["before"]["pass@1"] for f in finals[recipe])
        stats["pass@1 after"] = mean(f["after"]["pass@1"] for f in finals[recipe])
        stats["train seconds"] = mean(f["train_seconds"] for f in finals[recipe])
        stats["seconds/step"] = mean(r["time/generate"] + r["time/score"] + r["time/update"] for r in rows)
        stats["steps"] = len(rows)
        out[recipe] = stats
    return out


def main() -> None:
    folder = Path(sys.argv[1])
    dest = Path(sys.argv[2]) if len(sys.argv) > 2 else Path("benchmarks/results/fest/costs.json")
    table = read(folder)
    cols = ["seeds", "steps", "pass@1 before", "pass@1 after", "train seconds", "seconds/step", *KEYS]
    print("| recipe | " + " | ".join(cols) + " |")
    print("|---" * (len(cols) + 1) + "|")
    for recipe, stats in table.items():
        print(f"| {recipe} | " + " | ".join(f"{stats[c]:.3g}" if c in stats else "-" for c in cols) + " |")
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps({"folder": str(folder), "recipes": table}, indent=2) + "\n")


if __name__ == "__main__":
    main()
