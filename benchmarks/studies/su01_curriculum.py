"""SU-01's reverse-perplexity SFT curriculum against the task's own order, on the tiny reasoner
trained from scratch on arithmetic demonstrations: greedy held-out pass@1 at each eval and the
training loss, for each seed, with ``--curriculum none`` and ``--curriculum reverse_ppl`` on the same
items (the curriculum reorders the run's steps x batch_size draws, so both see the same examples).

    PYTHONPATH=src python benchmarks/studies/su01_curriculum.py --steps 150 --batch-size 32 --eval-every 50 \
        --eval-problems 200 --seeds 0,1 --threads 1 \
        --out benchmarks/results/su01/curriculum.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from reasonrl.models import build_tiny
from reasonrl.loop.sft import SFTConfig, demo_nll, sft
from reasonrl.tasks import get_task, take_items


def one_run(curriculum: str, seed: int, args) -> dict:
    model, tok = build_tiny("tiny", seed=seed)
    logs, t0 = [], time.perf_counter()
    cfg = SFTConfig(
        steps=args.steps,
        batch_size=args.batch_size,
        lr=args.lr,
        warmup=10,
        seed=seed,
        eval_every=args.eval_every,
        eval_problems=args.eval_problems,
        curriculum=curriculum,
    )
    task = get_task("arithmetic")
    sft(model, tok, task, cfg, log=logs.append)
    # the training loss of a curriculum run ends on its easiest examples: compare on held-out demonstrations
    heldout = statistics.mean(demo_nll(model, tok, take_items(task, "test", args.eval_problems, seed=0)))
    evals = [(m["step"], m["eval/pass@1"]) for m in logs if "eval/pass@1" in m]
    losses = [m["loss"] for m in logs]
    tail = max(1, len(losses) // 10)
    return {
        "curriculum": curriculum,
        "seed": seed,
        "evals": evals,
        "final_pass@1": evals[-1][1],
        "first_loss": losses[0],
        "last10pct_loss": statistics.mean(losses[-tail:]),
        "heldout_demo_nll": heldout,
        "seconds": time.perf_counter() - t0,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--eval-problems", type=int, default=200)
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/su01/curriculum.json"))
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    runs = []
    for seed in [int(s) for s in args.seeds.split(",")]:
        for cur in ("none", "reverse_ppl"):
            runs.append(one_run(cur, seed, args))
            _write(args, runs, [])  # after every run: a stopped benchmark keeps what it measured
            r = runs[-1]
            print(
                f"{cur:12} seed {seed}: pass@1 by step {r['evals']}  loss {r['first_loss']:.3f} -> "
                f"{r['last10pct_loss']:.3f}  held-out NLL {r['heldout_demo_nll']:.3f}  ({r['seconds']:.0f} s)",
                flush=True,
            )
    print(f"\n{'curriculum':12} {'runs':>4} {'final pass@1 mean':>18} {'held-out NLL':>13} {'last-10% train loss':>20}")
    table = []
    for cur in ("none", "reverse_ppl"):
        mine = [r for r in runs if r["curriculum"] == cur]
        row = {
            "curriculum": cur,
            "runs": len(mine),
            "final_pass@1_mean": statistics.mean(r["final_pass@1"] for r in mine),
            "final_pass@1": [r["final_pass@1"] for r in mine],
            "last10pct_loss_mean": statistics.mean(r["last10pct_loss"] for r in mine),
            "heldout_demo_nll_mean": statistics.mean(r["heldout_demo_nll"] for r in mine),
        }
        table.append(row)
        print(
            f"{cur:12} {row['runs']:>4} {row['final_pass@1_mean']:>18.3f} {row['heldout_demo_nll_mean']:>13.3f} "
            f"{row['last10pct_loss_mean']:>20.3f}"
        )
    _write(args, runs, table)


def _write(args, runs: list[dict], table: list[dict]) -> None:
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps({"settings": vars(args) | {"out": str(args.out)}, "table": table, "runs": runs}, indent=2)
    )


if __name__ == "__main__":
    main()
