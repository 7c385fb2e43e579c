"""LZE against GRPO on one finite pool (issue 14): held-out accuracy, generated tokens, update tokens
and FLOPs estimates, and the tokens each needs to reach GRPO's final accuracy.

    PYTHONPATH=src python benchmarks/lze_compare.py [--steps 32] [--seeds 3] [--pool 64] [--out runs/compare_lze]

Runs ``reasonrl compare --recipes grpo,lze`` (both on the same ``data.pool``, the same held-out
problems), then reads every run's ``metrics.jsonl``. Estimates (Kaplan et al. 2020): generation
2 x params per completion token; update 6 x params per completion token of the groups in the update
(GRPO as the paper's baseline trains every group; this repo's grpo skips the forward/backward of
zero-advantage rows, exactly, so its real update cost is lower: its mean skipped fraction is printed).
Prompt tokens are left out of both. Writes benchmarks/results/lze/compare_lze.json and prints a table.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_compare(args) -> dict:
    cmd = [sys.executable, "-m", "reasonrl.cli", "compare", "--recipes", "grpo,lze", "--seeds", str(args.seeds),
           "--steps", str(args.steps), "--out", args.out, "--resume", f"data.pool={args.pool}",
           f"eval_every={args.eval_every}", "eval_problems=100", "final_eval_problems=200", "final_eval_k=0",
           "save_every=0"]
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    subprocess.run(cmd, cwd=ROOT, env=env, check=True)
    return json.loads((ROOT / args.out / "compare.json").read_text())


def run_numbers(run_dir: Path, n_params: int) -> dict:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    gen = sum(r.get("tokens/generated", 0.0) for r in rows)
    upd = sum(r.get("select/update_tokens", r.get("tokens/generated", 0.0)) for r in rows)
    cum, curve = 0.0, []
    for r in rows:  # (generated tokens so far, held-out pass@1) at each evaluation
        cum += r.get("tokens/generated", 0.0)
        if "eval/pass@1" in r:
            curve.append((cum, r["eval/pass@1"]))
    return {"generated_tokens": gen, "update_tokens": upd, "gen_flops": 2 * n_params * gen,
            "update_flops": 6 * n_params * upd, "curve": curve,
            "rows_skipped_frac": sum(r.get("update/rows_skipped_frac", 0.0) for r in rows) / max(len(rows), 1),
            "kept_frac": (sum(r["select/kept_frac"] for r in rows if "select/kept_frac" in r) / len(rows)
                          if "select/kept_frac" in rows[0] else 1.0),
            "pruned_final": rows[-1].get("select/pruned", 0.0)}


def tokens_to_reach(curve: list[tuple[float, float]], target: float) -> float | None:
    return next((tok for tok, acc in curve if acc >= target - 1e-12), None)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=32)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--pool", type=int, default=64)
    p.add_argument("--eval-every", type=int, default=8)
    p.add_argument("--out", default="runs/compare_lze")
    args = p.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    from reasonrl.models import load_model

    n_params = sum(t.numel() for t in load_model(None)[0].parameters())
    cmp = run_compare(args)
    runs = [dict(r, **run_numbers(ROOT / r["run_dir"], n_params)) for r in cmp["runs"] if r["ok"]]
    by = {name: [r for r in runs if r["recipe"] == name] for name in ("grpo", "lze")}
    target = sum(r["final"] for r in by["grpo"]) / len(by["grpo"])  # GRPO's mean final held-out pass@1
    table = []
    for name, rs in by.items():
        mean = lambda k: sum(r[k] for r in rs) / len(rs)  # noqa: E731
        reach = [tokens_to_reach(r["curve"], target) for r in rs]
        table.append({"recipe": name, "seeds": len(rs), "final_pass@1": mean("final"),
                      "generated_tokens": mean("generated_tokens"), "update_tokens": mean("update_tokens"),
                      "gen_flops": mean("gen_flops"), "update_flops": mean("update_flops"),
                      "kept_frac": mean("kept_frac"), "rows_skipped_frac": mean("rows_skipped_frac"),
                      "pruned_final": mean("pruned_final"),
                      "seeds_reaching_grpo_final": sum(x is not None for x in reach),
                      "gen_tokens_to_grpo_final": [x for x in reach]})
    out = {"command": " ".join(sys.argv), "n_params": n_params, "grpo_final_mean": target, "steps": args.steps,
           "pool": args.pool, "seeds": args.seeds, "table": table, "compare": cmp}
    dest = ROOT / "benchmarks" / "results" / "lze"
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "compare_lze.json").write_text(json.dumps(out, indent=2))
    keys = ("recipe", "final_pass@1", "generated_tokens", "update_tokens", "update_flops", "kept_frac",
            "rows_skipped_frac", "pruned_final", "seeds_reaching_grpo_final")
    print(" | ".join(keys))
    for row in table:
        print(" | ".join(f"{row[k]:.4g}" if isinstance(row[k], float) else str(row[k]) for k in keys))


if __name__ == "__main__":
    main()
