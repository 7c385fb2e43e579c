"""Reward-model held-out pairwise accuracy on the explain task (issue 32, GRLO's reward model).

Judged pairs from the shipped base's own samples plus the task's edits (``reasonrl rm pairs``), a
Bradley-Terry model trained from the base (``reasonrl rm train``), and the share of held-out pairs
(prompts never trained on) it orders as the judge does, before and after training, overall and by
what separates the pair (correctness, completeness, concision: the judge's first differing field).
Prints a table, writes JSON, and leaves the reward model directory for benchmarks/learning/grlo_transfer.py:

    python benchmarks/studies/rm_accuracy.py --out runs/grlo_rm                    # the measured setting
    python benchmarks/studies/rm_accuracy.py --smoke --out /tmp/rm_smoke            # seconds: the plumbing only
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from reasonrl.data.preferences import judged_pairs, split_pairs
from reasonrl.models import load_model
from reasonrl.models.reward_model import load_reward_model
from reasonrl.loop.rm_train import RMConfig, pairwise_accuracy, train_rm
from reasonrl.tasks import get_task, take_items
from reasonrl.tasks.explain import judge

FIELDS = ("correct", "complete", "concise")


def deciding_field(key: str, pair: dict) -> str:
    """Which of the judge's fields first tells the pair's two sides apart."""
    a, b = judge(key, pair["chosen"]), judge(key, pair["rejected"])
    return next(f for f in FIELDS if getattr(a, f) != getattr(b, f))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("runs/grlo_rm"), help="reward model directory")
    ap.add_argument("--prompts", type=int, default=400)
    ap.add_argument("--samples", type=int, default=2)
    ap.add_argument("--per-prompt", type=int, default=4)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--model", default=None, help="the base (default: the shipped one)")
    ap.add_argument("--smoke", action="store_true", help="tiny numbers on tiny:tiny: checks the script runs")
    ap.add_argument("--json", type=Path, default=Path("benchmarks/results/grlo/rm_accuracy.json"))
    args = ap.parse_args()
    if args.smoke:
        args.prompts, args.samples, args.steps, args.batch_size, args.model = 12, 1, 2, 4, "tiny:tiny"
    task = get_task("explain")
    t0 = time.perf_counter()
    model, tok = load_model(args.model)
    pairs = [{**p, "margin": 0.0} for p in judged_pairs(model, tok, task, args.prompts, args.samples, args.per_prompt)]
    t_pairs = time.perf_counter() - t0
    cfg = RMConfig(model=args.model, steps=args.steps, batch_size=args.batch_size, lr=args.lr, eval_frac=0.2)
    res = train_rm(pairs, cfg, args.out)
    _, held = split_pairs(pairs, cfg.eval_frac, cfg.seed)
    keys = {it.prompt: it.key for it in take_items(task, "train", args.prompts, seed=0)}
    rm = load_reward_model(str(args.out))
    by = {f: [p for p in held if deciding_field(keys[p["prompt"]], p) == f] for f in FIELDS}
    row = {
        "pairs": len(pairs),
        "heldout_pairs": len(held),
        "heldout_accuracy_before": res["heldout_accuracy_before"],
        "heldout_accuracy": res["heldout_accuracy"],
        "pairs_seconds": t_pairs,
        "train_seconds": res["seconds"],
        **{f"heldout_accuracy_{f}": pairwise_accuracy(rm, ps, cfg.max_length) for f, ps in by.items()},
        **{f"heldout_pairs_{f}": len(ps) for f, ps in by.items()},
        "settings": vars(args) | {"out": str(args.out), "json": str(args.json)},
    }
    for k, v in row.items():
        if k != "settings":
            print(f"{k:32s} {v:.4f}" if isinstance(v, float) else f"{k:32s} {v}")
    if not args.smoke:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(row, indent=2))


if __name__ == "__main__":
    main()
