"""Eval settings on the shipped base (arithmetic): pass@k for k = 1, 4, 16 from n = 16 samples per
problem, maj@k by string equality and by math-verify equivalence (same samples), and how much the
n = 16 estimate of pass@4 steadies it against four n = 4 estimates from disjoint blocks of samples.

    PYTHONPATH=src python benchmarks/studies/eval_settings.py [--problems 100] \
        [--out benchmarks/results/eval_settings.json]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from reasonrl.eval.majority import MathEquivalence
from reasonrl.eval.metrics import mean_pass_at_k
from reasonrl.eval.runner import EvalConfig, evaluate_items, item_rows
from reasonrl.models import load_model
from reasonrl.rollout import HFEngine
from reasonrl.tasks import get_task

N, KS = 16, (1, 4, 16)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--problems", type=int, default=100)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/eval_settings.json"))
    args = ap.parse_args()
    torch.manual_seed(0)
    model, tok = load_model(None)
    task = get_task("arithmetic")
    cfg = EvalConfig(n_problems=args.problems, samples_per_problem=N, ks=KS, temperature=1.0, seed=0, sample_seed=0)
    t0 = time.perf_counter()
    summary, records, rows = evaluate_items(HFEngine(model, tok, max_rows=cfg.max_rows), task, cfg)
    gen_s = time.perf_counter() - t0
    greedy = [r for r in records if r["mode"] == "greedy"]
    sampled = [r for r in records if r["mode"] == "sampled"]
    t0 = time.perf_counter()
    equiv_rows = item_rows(greedy, sampled, N, KS, MathEquivalence())
    equiv_s = time.perf_counter() - t0
    correct = [[r["correct"] for r in sampled[p * N : (p + 1) * N]] for p in range(len(greedy))]
    blocks = [mean_pass_at_k([c[b * 4 : (b + 1) * 4] for c in correct], 4) for b in range(N // 4)]  # n = 4 each
    out = {
        "problems": len(greedy),
        "n": N,
        "ks": list(KS),
        "summary": summary,
        "generate_seconds": gen_s,
        "maj_equiv": {f"maj@{k}": float(np.mean([r[f"maj@{k}"] for r in equiv_rows])) for k in KS},
        "maj_equiv_seconds": equiv_s,
        "maj_groups_differ": sum(
            any(a[f"maj_answer@{k}"] != b[f"maj_answer@{k}"] for k in KS) for a, b in zip(rows, equiv_rows)
        ),
        "pass@4_from_n4_blocks": blocks,
    }
    print(
        f"arithmetic, shipped base, {len(greedy)} problems x n = {N} samples (T = 1.0), sample seed 0; "
        f"generation {gen_s:.0f} s, math-verify regrouping {equiv_s:.1f} s"
    )
    print(f"{'metric':28s} {'value':>8s}")
    for key in ("pass@1", "pass@1_sampled", "pass@4", "pass@16", f"avg@{N}", "maj@1", "maj@4", "maj@16"):
        print(f"{key:28s} {summary[key]:8.4f}")
    for k in KS:
        print(f"{'maj@%d (--maj-equiv)' % k:28s} {out['maj_equiv'][f'maj@{k}']:8.4f}")
    print(
        f"{'pass@4 from n=4 blocks':28s} {np.mean(blocks):8.4f} (std {np.std(blocks, ddof=1):.4f}, "
        f"blocks {', '.join(f'{b:.3f}' for b in blocks)})"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
