"""LZE against GRPO on one finite pool (issue 14): held-out accuracy, generated tokens, update tokens
and FLOPs estimates, and the tokens each needs to reach GRPO's final accuracy.

    PYTHONPATH=src python benchmarks/learning/lze_compare.py [--steps 16] [--seeds 2] [--pool 32] \
        [--out runs/compare_lze]
    python benchmarks/learning/lze_compare.py --collect-only --out runs/cmp_data --pool 128 --steps 60 --seeds 3 \
        --json benchmarks/results/lze/compare_lze_60.json   # the runs of a `reasonrl compare` folder

Runs ``reasonrl compare`` for grpo and for lze, in parallel (both on the same ``data.pool``, the same held-out
problems, 8 prompts x 8 samples a step), then reads every run's ``metrics.jsonl``. Estimates (Kaplan et al. 2020):
generation 2 x params per completion token; update 6 x params per completion token of the groups in the update (GRPO
as the paper's baseline trains every group; this repo's grpo skips the forward/backward of zero-advantage rows,
exactly, so its real update cost is lower: its mean skipped fraction is printed). Prompt tokens are left out of
both. Writes benchmarks/results/lze/compare_lze.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_compare(args) -> dict:
    """One ``reasonrl compare`` per recipe, the two in parallel (each trains its seeds in turn), so a
    2-core machine runs one training process per core; the two are merged into one result."""
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    procs = {}
    for recipe in ("grpo", "lze"):
        cmd = [
            sys.executable,
            "-m",
            "reasonrl.cli",
            "compare",
            "--recipes",
            recipe,
            "--seeds",
            str(args.seeds),
            "--steps",
            str(args.steps),
            "--out",
            f"{args.out}/{recipe}",
            "--resume",
            f"data.pool={args.pool}",
            f"eval_every={args.eval_every}",
            "eval_problems=100",
            "final_eval_problems=200",
            "final_eval_k=0",
            "save_every=0",
        ]
        procs[recipe] = subprocess.Popen(cmd, cwd=ROOT, env=env)
    for recipe, proc in procs.items():
        if proc.wait():
            raise SystemExit(f"compare of {recipe} failed (exit {proc.returncode})")
    parts = [json.loads((ROOT / args.out / recipe / "compare.json").read_text()) for recipe in procs]
    return {
        "runs": [r for part in parts for r in part["runs"]],
        "tables": [part["table"] for part in parts],
        "wall_seconds": max(part.get("wall_seconds", 0) for part in parts),
    }


def collect_runs(args) -> dict:
    """The finished runs in ``--out`` (those with a summary.json), as compare.json lists them."""
    runs = []
    found = [*(ROOT / args.out).glob("*-seed*/summary.json"), *(ROOT / args.out).glob("*/*-seed*/summary.json")]
    for summary in sorted(found):  # one compare folder (grpo-seed0, ...) or this script's per-recipe ones
        s = json.loads(summary.read_text())
        run_dir = summary.parent.relative_to(ROOT)
        runs.append(
            {
                "recipe": s["recipe"],
                "seed": int(run_dir.name.rsplit("seed", 1)[1]),
                "ok": True,
                "final": s["after"]["pass@1"],
                "run_dir": str(run_dir),
            }
        )
    return {"runs": runs, "collected": True}


def run_numbers(run_dir: Path, n_params: int) -> dict:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    gen = sum(r.get("tokens/generated", 0.0) for r in rows)
    upd = sum(r.get("select/update_tokens", r.get("tokens/generated", 0.0)) for r in rows)
    cum, own, curve = 0.0, 0.0, []
    for r in rows:  # (generated tokens so far, held-out pass@1, update tokens so far) at each evaluation
        cum += r.get("tokens/generated", 0.0)
        # update tokens this repo's loop really trained on: LZE's kept groups, or grpo's rows with a
        # nonzero advantage (estimated as the generated tokens times the share of rows not skipped)
        own += r.get(
            "select/update_tokens", r.get("tokens/generated", 0.0) * (1 - r.get("update/rows_skipped_frac", 0.0))
        )
        if "eval/pass@1" in r:
            curve.append((cum, r["eval/pass@1"], own))
    return {
        "generated_tokens": gen,
        "update_tokens": upd,
        "gen_flops": 2 * n_params * gen,
        "update_flops": 6 * n_params * upd,
        "curve": curve,
        "update_tokens_per_step": upd / max(len(rows), 1),
        "rows_skipped_frac": sum(r.get("update/rows_skipped_frac", 0.0) for r in rows) / max(len(rows), 1),
        "kept_frac": (
            sum(r["select/kept_frac"] for r in rows if "select/kept_frac" in r) / len(rows)
            if "select/kept_frac" in rows[0]
            else 1.0
        ),
        "pruned_final": rows[-1].get("select/pruned", 0.0),
    }


def tokens_to_reach(curve: list[tuple[float, float, float]], target: float, update: bool = False) -> float | None:
    """Generated (or, with ``update``, trained-on) tokens at the first evaluation reaching ``target``."""
    return next((upd if update else tok for tok, acc, upd in curve if acc >= target - 1e-12), None)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--pool", type=int, default=32)
    p.add_argument("--eval-every", type=int, default=4)
    p.add_argument("--out", default="runs/compare_lze")
    p.add_argument(
        "--collect-only",
        action="store_true",
        help="read the finished runs already in --out (summary.json present) instead of training",
    )
    p.add_argument("--json", default="benchmarks/results/lze/compare_lze.json", help="where the table goes")
    args = p.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    from reasonrl.models import load_model

    n_params = sum(t.numel() for t in load_model(None)[0].parameters())
    cmp = collect_runs(args) if args.collect_only else run_compare(args)
    runs = [dict(r, **run_numbers(ROOT / r["run_dir"], n_params)) for r in cmp["runs"] if r["ok"]]
    by = {name: [r for r in runs if r["recipe"] == name] for name in ("grpo", "lze")}
    target = sum(r["final"] for r in by["grpo"]) / len(by["grpo"])  # GRPO's mean final held-out pass@1
    lze_final = sum(r["final"] for r in by["lze"]) / len(by["lze"])  # equal accuracy the other way round
    table = []
    for name, rs in by.items():
        mean = lambda k: sum(r[k] for r in rs) / len(rs)  # noqa: E731, B023 - used in this iteration only
        reach = [tokens_to_reach(r["curve"], target) for r in rs]
        table.append(
            {
                "recipe": name,
                "seeds": len(rs),
                "final_pass@1": mean("final"),
                "generated_tokens": mean("generated_tokens"),
                "update_tokens": mean("update_tokens"),
                "gen_flops": mean("gen_flops"),
                "update_flops": mean("update_flops"),
                "kept_frac": mean("kept_frac"),
                "rows_skipped_frac": mean("rows_skipped_frac"),
                "pruned_final": mean("pruned_final"),
                "seeds_reaching_grpo_final": sum(x is not None for x in reach),
                "gen_tokens_to_grpo_final": [x for x in reach],
                "gen_tokens_to_lze_final": [tokens_to_reach(r["curve"], lze_final) for r in rs],
                "update_tokens_to_lze_final": [tokens_to_reach(r["curve"], lze_final, True) for r in rs],
                "update_tokens_per_step": mean("update_tokens_per_step"),
            }
        )
    out = {
        "command": " ".join(sys.argv),
        "n_params": n_params,
        "grpo_final_mean": target,
        "lze_final_mean": lze_final,
        "curve_note": "curve points are the in-run evaluations (eval_problems), the finals the 'after' evaluation",
        "steps": args.steps,
        "pool": args.pool,
        "seeds": args.seeds,
        "table": table,
        "compare": cmp,
    }
    dest = ROOT / args.json
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(out, indent=2))
    keys = (
        "recipe",
        "final_pass@1",
        "generated_tokens",
        "update_tokens",
        "update_flops",
        "kept_frac",
        "rows_skipped_frac",
        "pruned_final",
        "seeds_reaching_grpo_final",
    )
    print(" | ".join(keys))
    for row in table:
        print(" | ".join(f"{row[k]:.4g}" if isinstance(row[k], float) else str(row[k]) for k in keys))


if __name__ == "__main__":
    main()
