"""Behaviour rate of each VSPO comparison run's final policy, sampled WITHOUT steering.

    python benchmarks/learning/vspo_behaviour.py runs/task_methods/vspo [--problems 100] [--k 8]

The compare table reports greedy pass@1; VSPO's claim is that the unsteered policy internalises the
steered behaviour, so this samples each final model (temperature 0.8, as in training) on the same
held-out problems and prints a table of the spaced-style rate and accuracy per run and per recipe,
and writes behaviour.json beside compare.json.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from pathlib import Path

import torch

from reasonrl.models.loading import load_model
from reasonrl.rollout import HFEngine, SamplingParams
from reasonrl.tasks import get_task, take_items
from reasonrl.tasks.arithmetic import SPACED_RE


def measure(model_dir: Path, items, task, k: int) -> tuple[float, float]:
    model, tok = load_model(str(model_dir))
    sp = SamplingParams(temperature=0.8, max_new_tokens=task.max_new_tokens, seed=0)
    ro = HFEngine(model, tok).generate([it.prompt for it in items], k, sp)
    styled = sum(bool(re.search(SPACED_RE, t)) for t in ro.texts) / len(ro.texts)
    acc = sum(task.verify(t, items[r // k].answer, {}) for r, t in enumerate(ro.texts)) / len(ro.texts)
    return styled, acc


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("compare_dir", type=Path)
    ap.add_argument("--problems", type=int, default=100)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--base", type=Path, default=None, help="also measure this base model")
    args = ap.parse_args()
    torch.manual_seed(0)
    task = get_task("arithmetic", spaced_rate=0.05)
    items = take_items(task, "test", args.problems, seed=0)
    runs = sorted(p.parent.parent for p in args.compare_dir.glob("*/final/config.json"))
    rows = [("base", *measure(args.base, items, task, args.k))] if args.base else []
    rows += [(run.name, *measure(run / "final", items, task, args.k)) for run in runs]
    print(f"{'run':40s} {'spaced rate':>12s} {'accuracy':>9s}   (T=0.8, {args.problems} x {args.k} unsteered samples)")
    for name, styled, acc in rows:
        print(f"{name:40s} {styled:12.3f} {acc:9.3f}")
    by_recipe: dict[str, list[tuple[float, float]]] = {}
    for name, styled, acc in rows:
        by_recipe.setdefault(name.rsplit("-seed", 1)[0], []).append((styled, acc))
    for recipe, vals in by_recipe.items():
        s = [v[0] for v in vals]
        print(f"{recipe:40s} mean spaced rate {statistics.mean(s):.3f} over {len(s)} run(s)")
    (args.compare_dir / "behaviour.json").write_text(
        json.dumps([{"run": n, "spaced_rate": s, "accuracy": a} for n, s, a in rows], indent=2)
    )


if __name__ == "__main__":
    main()
