"""Distribution matching against reward maximisation (issue #33): FlowRL and DISA against GRPO on the default
task with the shipped base, TraFL against diffu-GRPO on the shipped masked-diffusion LM. Per recipe, over seeds:
final held-out greedy pass@1, pass@k for k = 1..K from K samples per problem (unbiased estimator), distinct
correct chains per problem, median seconds per training step; paired differences against the first recipe.

    python benchmarks/learning/distmatch.py           # 3 seeds x 60 steps, K = 64 on 100 problems: hours on 2 cores
    python benchmarks/learning/distmatch.py --group ar --seeds 1 --steps 30
    python benchmarks/learning/distmatch.py --group ar --variant disa:balance.table=T.jsonl   # + DISA on another table
    python benchmarks/learning/distmatch.py --smoke   # 1 seed x 2 steps, K = 4 on 4 problems: the plumbing only

Each run is a `reasonrl train` process (via reasonrl.compare); a finished run already in the folder is reused
when its config.yaml is the one the run would write (as `reasonrl compare --resume`), a killed one continued.
The table goes to stdout and JSON to benchmarks/results/distmatch/<group>.json (--smoke: a temporary folder
unless --out is given).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from reasonrl.commands.evaluate import checked_entries, expected_config
from reasonrl.compare import compare
from reasonrl.report.run_page import step_seconds as step_seconds_of
from reasonrl.loop.tracking import read_metrics

GROUPS = {"ar": ["grpo", "flowrl", "disa"], "diffusion": ["diffu_grpo", "trafl"]}
KS = (1, 2, 4, 8, 16, 32, 64)
SMOKE_VARIANTS = {"disa": "disa:data.pool=8:balance.proposals=2"}


def step_seconds(run_dir: Path) -> float | None:
    """Median of a run's per-step seconds (the sum of its time/* phases), the first step left out."""
    rows = read_metrics(run_dir / "metrics.jsonl") if (run_dir / "metrics.jsonl").exists() else []
    secs = [step_seconds_of(r) for r in rows if r.get("step", 0) > 1]
    return statistics.median(secs) if secs else None


def summarise(report: dict, recipes: list[str]) -> list[dict]:
    """One row per recipe: pass@1 (greedy, mean over seeds), pass@k, distinct correct chains, s/step, paired Δ."""
    passk = report.get("passk") or {"recipes": {}, "n": 0}
    out = []
    for name in recipes:
        table = next(r for r in report["table"] if r["recipe"] == name)
        runs = [r for r in report["runs"] if r["recipe"] == name and r["ok"]]
        secs = [s for s in (step_seconds(Path(r["run_dir"])) for r in runs) if s is not None]
        pk = passk["recipes"].get(name, {})
        curve = pk.get("pass_at_k", [])
        row = {
            "recipe": name,
            "runs_ok": table["runs_ok"],
            "greedy_pass@1": table.get("final_mean"),
            "greedy_pass@1_std": table.get("final_std"),
            "per_seed": table.get("per_seed"),
            "pass@k": {k: curve[k - 1] for k in KS if k <= len(curve)},
            "correct_chains": pk.get("correct_chains"),
            "correct_answers": pk.get("correct_answers"),
            "s_per_step": statistics.mean(secs) if secs else None,
            "vs_first": pk.get("vs_first"),
            "greedy_paired_vs_first": table.get("paired_vs_first"),
            "errors": [r["error"] for r in report["runs"] if r["recipe"] == name and not r["ok"]],
        }
        out.append(row)
    return out


def print_table(group: str, rows: list[dict], n: int) -> None:
    ks = [k for k in KS if k <= n]
    head = f"{'recipe':12} {'runs':>4} {'greedy@1':>9}" + "".join(f" {'p@' + str(k):>7}" for k in ks)
    print(f"\n{group}: pass@k from n = {n} samples per problem\n" + head + f" {'chains':>7} {'s/step':>7}")
    for r in rows:
        fmt = lambda v, w=7: f"{v:>{w}.3f}" if isinstance(v, float) else f"{'-':>{w}}"  # noqa: E731
        print(
            f"{r['recipe']:12} {r['runs_ok']:>4} {fmt(r['greedy_pass@1'], 9)}"
            + "".join(f" {fmt(r['pass@k'].get(k))}" for k in ks)
            + f" {fmt(r['correct_chains'])} {fmt(r['s_per_step'])}"
        )
        for e in r["errors"]:
            print(f"    failed run: {e}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--group", choices=[*GROUPS, "all"], default="all")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--pass-k", type=int, default=64, help="samples per held-out problem in the final eval")
    ap.add_argument("--problems", type=int, default=100, help="held-out problems of the final eval")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="RECIPE:KEY=VALUE",
        help="a recipe variant added to the group (repeatable), e.g. disa:balance.table=T.jsonl",
    )
    ap.add_argument("--smoke", action="store_true", help="1 seed x 2 steps, 4 problems x 4 samples")
    args = ap.parse_args(argv)
    if args.smoke:
        args.seeds, args.steps, args.pass_k, args.problems = 1, 2, 4, 4
    out = args.out or (
        Path(tempfile.mkdtemp(prefix="distmatch-smoke-"))
        if args.smoke
        else Path(__file__).parents[1] / "results" / "distmatch"
    )
    extra = [
        f"final_eval_k={args.pass_k}",
        f"final_eval_problems={args.problems}",
        "save_every=0",
        f"eval_every={args.steps if args.smoke else 30}",
        "eval_problems=4" if args.smoke else "eval_problems=100",
    ]
    if args.smoke:
        extra += ["prompts_per_step=2", "group_size=4", "sampling.max_new_tokens=24"]
    failed = 0
    for group in GROUPS if args.group == "all" else [args.group]:
        # smoke: DISA's in-run table over 8 prompts x 2 proposals (its default: 128 x 8), as a variant of its own
        recipes = [SMOKE_VARIANTS.get(r, r) if args.smoke else r for r in GROUPS[group]] + args.variant
        report = compare(
            recipes,
            args.seeds,
            args.steps,
            out / f"runs-{group}",
            extra=extra,
            # resume as `reasonrl compare --resume`: finished runs reused after the config check
            expected=expected_config(checked_entries(recipes, extra, None, args.steps)),
            on_run=lambda r: print(f"  {r.recipe} seed {r.seed}: " + ("ok" if r.ok else r.error), file=sys.stderr),
        )
        rows = summarise(report, recipes)
        print_table(group, rows, (report.get("passk") or {}).get("n", 0))
        result = {
            "group": group,
            "seeds": args.seeds,
            "steps": args.steps,
            "pass_k": args.pass_k,
            "problems": args.problems,
            "smoke": args.smoke,
            "rows": rows,
            "passk": report.get("passk"),
        }
        (out / f"{group}.json").write_text(json.dumps(result, indent=2, default=str))
        failed += sum(len(r["errors"]) for r in rows)
    print(f"\nJSON: {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
