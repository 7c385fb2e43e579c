"""Task diagnostics (leak rate, leak-free accuracy, set Jaccard, level accuracy...) of a comparison.

    python benchmarks/learning/task_diagnostics.py runs/task_methods/tempo [--reeval] [--problems 200]

``reasonrl compare`` tables greedy pass@1; a task's own diagnostics (``Task.diagnostics``) say *how*
a method changed the policy. Each run's ``summary.json`` already holds them before and after
training; ``--reeval`` instead re-evaluates the base and every run's final model on the same
held-out problems (use it after a task gains a diagnostic, e.g. the temporal task's ``clean_pass``).
Prints a per-recipe table (mean over seeds, per-seed values in brackets) and writes
``diagnostics.json`` beside ``compare.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import yaml

from reasonrl.eval.runner import EvalConfig, evaluate
from reasonrl.models.loading import load_model
from reasonrl.rollout import HFEngine
from reasonrl.tasks import get_task

SKIP = {"n_problems", "truncation_rate"}


def reevaluate(model_dir: str, task, problems: int) -> dict[str, float]:
    model, tok = load_model(model_dir)
    summary, _ = evaluate(HFEngine(model, tok), task, EvalConfig(n_problems=problems, samples_per_problem=0))
    return summary


def collect(compare_dir: Path, reeval: bool, problems: int) -> dict[str, dict]:
    """{"base": metrics, "<recipe>-seed<k>": {"before": ..., "after": ...}} for every run that finished."""
    report = json.loads((compare_dir / "compare.json").read_text())
    out: dict[str, dict] = {}
    for run in report["runs"]:
        run_dir = Path(run["run_dir"])
        if not run["ok"]:
            continue
        if reeval:
            cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
            task = get_task(cfg["task"], **cfg["task_options"])
            if "base" not in out:
                out["base"] = reevaluate(cfg["model"], task, problems)
            after = reevaluate(str(run_dir / "final"), task, problems)
            out[run_dir.name] = {"before": out["base"], "after": after}
        else:
            summary = json.loads((run_dir / "summary.json").read_text())
            out[run_dir.name] = {"before": summary["before"], "after": summary["after"]}
    return out


def table(runs: dict[str, dict]) -> list[str]:
    """Markdown rows: recipe, then each metric as 'mean (seed values)' after training, base first."""
    metrics = [k for k in next(v for k, v in runs.items() if k != "base")["after"] if k not in SKIP]
    first = next(v["before"] for k, v in runs.items() if k != "base")
    lines = [
        "| run | " + " | ".join(metrics) + " |",
        "|---" * (len(metrics) + 1) + "|",
        "| base | " + " | ".join(f"{first[m]:.3f}" for m in metrics) + " |",
    ]
    recipes = sorted({k.rsplit("-seed", 1)[0] for k in runs if k != "base"})
    for recipe in recipes:
        seeds = [v["after"] for k, v in sorted(runs.items()) if k.rsplit("-seed", 1)[0] == recipe]
        cells = [
            f"{statistics.mean(s[m] for s in seeds):.3f} ({' / '.join(f'{s[m]:.3f}' for s in seeds)})" for m in metrics
        ]
        lines.append(f"| {recipe} | " + " | ".join(cells) + " |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("compare_dir", type=Path)
    ap.add_argument("--reeval", action="store_true", help="re-evaluate the base and the final models")
    ap.add_argument("--problems", type=int, default=200, help="held-out problems with --reeval")
    args = ap.parse_args()
    runs = collect(args.compare_dir, args.reeval, args.problems)
    print("\n".join(table(runs)))
    (args.compare_dir / "diagnostics.json").write_text(json.dumps(runs, indent=1))


if __name__ == "__main__":
    main()
