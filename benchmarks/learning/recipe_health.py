"""Recipe health: does each recipe, at its defaults, train the model without destroying it (issue #26)?

A benchmark, not a test. Every recipe given (default: all registered) trains ``--seeds`` x ``--steps``
from one base model, beside ``grpo`` from the same base in the same invocation, one process at a time
(``reasonrl.compare.run_one``: ``python -m reasonrl.cli train`` per run, so a crash is reported and
the rest go on). Per recipe it reports final held-out greedy pass@1 (mean ± std over seeds, Welch p
and the paired difference with its bootstrap 95% CI against grpo, as ``reasonrl compare``), and the
health columns: the final greedy evaluation's truncation rate, format rate and mean completion length,
the training truncation rate over the last 10 steps, and the median seconds per step (the ``time/*``
phases, step 1 left out; on a shared machine only comparable within one invocation).

    python benchmarks/learning/recipe_health.py --out runs/health --seeds 3 --steps 60 \
        --json benchmarks/results/recipe_health/shipped_base.json
    python benchmarks/learning/recipe_health.py --recipes ssopd,egrsd,cl_egrsd --model $PWD/runs/ctxbase45 \
        --out runs/health_ctx --json benchmarks/results/recipe_health/ctxbase.json

Finished runs in ``--out`` (``summary.json`` present) are collected, not retrained, so an invocation can be stopped
and started again (and ``--only-seeds 0`` and ``--only-seeds 1,2`` can share one ``--out`` on two cores, then one
invocation without ``--only-seeds`` collects the table); the JSON is rewritten after every run. The starting model's
evaluation is the same for every run from one base on one task with the task's own held-out prompts (no
``wrap_task`` part: drafts show the template; no ``run_defaults`` or override of the task or the model: populora
trains on azr), so it is made once and copied into those folders (``before.json``; ``reasonrl train`` reads it
instead of evaluating again).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import time
from pathlib import Path

from reasonrl.compare import _json_safe, collect, parse_variant, run_dir_name, run_one, table_rows
from reasonrl.recipes import RECIPES, get_recipe
from reasonrl.loop.tracking import read_metrics

BEFORE = ("before.json", "before.items.jsonl")


def health(run_dir: Path) -> dict[str, float]:
    """One finished run's health: the final greedy eval's rates and length, training truncation over
    the last 10 steps, and the median seconds per step (step 1 left out)."""
    after = json.loads((run_dir / "summary.json").read_text()).get("after") or {}
    rows = read_metrics(run_dir / "metrics.jsonl")
    secs = [sum(v for k, v in r.items() if k.startswith("time/")) for r in rows if r.get("step", 0) > 1]
    last = [r["truncation_rate"] for r in rows[-10:] if "truncation_rate" in r]
    return {
        "eval_truncation": after.get("truncation_rate"),
        "eval_format": after.get("format_rate"),
        "eval_mean_length": after.get("mean_length"),
        "train_truncation_last10": statistics.fmean(last) if last else None,
        "s_per_step": statistics.median(secs) if secs else None,
    }


EVAL_KEYS = ("task", "task_options", "model")  # settings that change what the base's evaluation evaluates


def shares_base_eval(entry: str) -> bool:
    """Whether the run's starting evaluation is the base's own: no part wraps the task, and neither the recipe's
    ``run_defaults`` nor the entry's overrides change the task or the model (populora and evoenv train on their
    own task, trafl on the diffusion model: their base evaluation is their own)."""
    name, overrides = parse_variant(entry)
    recipe = get_recipe(name)
    keys = [k for k, _ in recipe.run_defaults] + [o.split("=", 1)[0] for o in overrides]
    return not recipe.hooked("wrap_task") and not any(k.split(".")[0] in EVAL_KEYS for k in keys)


def seed_before(source: Path | None, run_dir: Path) -> None:
    """Copy the base's evaluation into a new run folder (the run then skips it)."""
    if source is None or (run_dir / "config.yaml").exists():
        return
    run_dir.mkdir(parents=True, exist_ok=True)
    for name in BEFORE:
        if (source / name).exists():
            shutil.copy(source / name, run_dir / name)


def summarise(results: list, entries: list[str]) -> list[dict]:
    """``reasonrl compare``'s table rows, each with the mean of its runs' health columns."""
    rows = table_rows(results, entries)
    for row in rows:
        runs = [health(r.run_dir) for r in results if r.recipe == row["recipe"] and r.ok]
        for key in runs[0] if runs else {}:
            vals = [h[key] for h in runs if h[key] is not None]
            row[key] = statistics.fmean(vals) if vals else None
        row["errors"] = sorted({r.error for r in results if r.recipe == row["recipe"] and not r.ok})
    return rows


def print_table(rows: list[dict]) -> None:
    fmt = lambda v, p=3: "-" if v is None else f"{v:.{p}f}"  # noqa: E731
    print(
        f"{'recipe':40} {'runs':>4} {'pass@1':>13} {'Welch p':>8} {'paired diff [95% CI]':>26} {'McNemar':>8} "
        f"{'trunc':>6} {'tr.train':>8} {'format':>6} {'len':>6} {'s/step':>6}"
    )
    for r in rows:
        p = r.get("paired_vs_first") or {}
        diff = "-" if not p else f"{p['diff']:+.3f} [{p['ci_low']:+.3f}, {p['ci_high']:+.3f}]"
        acc = "-" if "final_mean" not in r else f"{r['final_mean']:.3f}±{r['final_std']:.3f}"
        print(
            f"{r['recipe'][:40]:40} {r['runs_ok']:>4} {acc:>13} {fmt(r.get('p_vs_first'), 4):>8} {diff:>26} "
            f"{fmt(p.get('mcnemar_p'), 4):>8} "
            f"{fmt(r.get('eval_truncation')):>6} {fmt(r.get('train_truncation_last10')):>8} "
            f"{fmt(r.get('eval_format')):>6} {fmt(r.get('eval_mean_length'), 1):>6} {fmt(r.get('s_per_step'), 2):>6}"
            + (f"  FAILED: {r['errors'][0]}" if r["errors"] else "")
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--recipes", default="all", help="comma-separated entries name[:key=value...], or all")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument(
        "--only-seeds",
        default=None,
        help="train only these of the seeds (e.g. 1,2): invocations with "
        "other lists can share one --out on two cores; one without then collects the whole table",
    )
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--model", default=None, help="the base every run starts from (default: the shipped base)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--json", type=Path, help="write the table here (rewritten after every run)")
    ap.add_argument("overrides", nargs="*", help="key=value given to every run")
    args = ap.parse_args()
    entries = sorted(RECIPES) if args.recipes == "all" else [e for e in args.recipes.split(",") if e]
    entries = ["grpo"] + [e for e in entries if e != "grpo"]  # grpo first: every test is against it
    extra = [
        "eval_every=0",
        "save_every=0",
        "final_eval_k=0",
        *(["model=" + args.model] if args.model else []),
        *args.overrides,
    ]
    results, source, t0 = [], None, time.time()
    seeds = [int(x) for x in args.only_seeds.split(",")] if args.only_seeds else list(range(args.seeds))
    for seed in seeds:  # seed-major: a stopped invocation has every recipe on the first seeds
        for entry in entries:
            run_dir = args.out / f"{run_dir_name(entry)}-seed{seed}"
            shared = shares_base_eval(entry)
            if (run_dir / "summary.json").exists():
                res = collect(entry, seed, run_dir)
            else:
                if shared:
                    seed_before(source, run_dir)
                res = run_one(entry, seed, args.out, args.steps, None, extra)
            if res.ok and source is None and shared:
                source = run_dir
            results.append(res)
            print(
                f"[{time.time() - t0:7.0f}s] {entry} seed {seed}: "
                + (f"pass@1 {res.final:.3f}" if res.ok else f"FAILED {res.error}"),
                flush=True,
            )
            if args.json:
                report = {
                    "entries": entries,
                    "seeds": len(seeds),
                    "steps": args.steps,
                    "model": args.model,
                    "overrides": extra,
                    "table": summarise(results, entries),
                    "runs": [
                        {
                            "recipe": r.recipe,
                            "seed": r.seed,
                            "ok": r.ok,
                            "error": r.error,
                            "final": r.final,
                            "run_dir": str(r.run_dir),
                        }
                        for r in results
                    ],
                }
                args.json.parent.mkdir(parents=True, exist_ok=True)
                args.json.write_text(json.dumps(_json_safe(report), indent=2, default=str))
    print_table(summarise(results, entries))


if __name__ == "__main__":
    main()
