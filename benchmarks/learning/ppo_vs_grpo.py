"""PPO (a learned critic, GAE) against GRPO on the default task: accuracy, seconds per step, memory.

1. ``reasonrl compare --recipes grpo,ppo --seeds S --steps N`` from the shipped base on arithmetic: the
   same prompts per step (8 x G = 8), the same held-out problems, final greedy pass@1 mean +- std,
   Welch over seeds and the paired tests (compare.json).
2. Seconds per step: the mean over each run's steps of its ``time/*`` phases (metrics.jsonl).
3. Memory: per recipe, a fresh process builds the trainer and takes 2 steps; its peak resident set
   (ru_maxrss) and the training state it holds (fp32 weights + gradients + AdamW's two moments of
   every trainable parameter, policy and critic): what the critic adds.

    python benchmarks/learning/ppo_vs_grpo.py --steps 60 --seeds 3 --out runs/compare_ppo
    python benchmarks/learning/ppo_vs_grpo.py --smoke --out /tmp/ppo_smoke         # 2 steps, 1 seed, 20 problems
    python benchmarks/learning/ppo_vs_grpo.py --speed 12 --rounds 3 --out /tmp/ppo_speed  # s/step only, idle machine
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from reasonrl.report.run_page import step_seconds
from reasonrl.loop.tracking import read_metrics

RECIPES = ("grpo", "ppo")
MEMORY_PROBE = """
import json, resource, sys
from reasonrl.config.train import TrainConfig
from reasonrl.models import load_model
from reasonrl.recipes import get_recipe
from reasonrl.tasks import get_task
from reasonrl.loop.trainer import Trainer
recipe = get_recipe(sys.argv[1])
model, tok = load_model()
tr = Trainer(model, tok, get_task("arithmetic"), recipe, TrainConfig(steps=2, eval_every=0, save_every=0,
             final_eval_problems=0), sys.argv[2])
for _ in range(2):
    tr.train_step()
n = {g["name"]: sum(p.numel() for p in g["params"]) for g in tr.opt.param_groups}
print(json.dumps({"params": n, "state_mb": 16 * sum(n.values()) / 2**20,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def seconds_per_step(run_dir: Path) -> float:
    rows = read_metrics(run_dir / "metrics.jsonl")
    return statistics.mean(sum(v for k, v in r.items() if k.startswith("time/") and k != "time/comm") for r in rows)


def memory(recipe: str, scratch: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": "src" + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run(
        [sys.executable, "-c", MEMORY_PROBE, recipe, str(scratch / recipe)],
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def speed(out: Path, steps: int, rounds: int, path: Path | None) -> None:
    """Seconds per step alone: grpo and ppo alternated in fresh processes, no evaluation (run it on an idle
    machine); per run the median step without the first (warm-up), then the median over the rounds."""
    env = {**os.environ, "PYTHONPATH": "src" + os.pathsep + os.environ.get("PYTHONPATH", "")}
    per = {r: [] for r in RECIPES}
    for rnd in range(rounds):
        for recipe in RECIPES:
            run = out / "speed" / f"{recipe}-round{rnd}"
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "reasonrl.cli",
                    "train",
                    "--recipe",
                    recipe,
                    "--steps",
                    str(steps),
                    "--out",
                    str(run),
                    "eval_every=0",
                    "final_eval_problems=0",
                    "save_every=0",
                ],
                check=True,
                env=env,
                capture_output=True,
            )
            rows = read_metrics(run / "metrics.jsonl")[1:]
            per[recipe].append(statistics.median(step_seconds(r) for r in rows))
    med = {r: statistics.median(v) for r, v in per.items()}
    print(f"{'recipe':8s} {'s/step':>8s}  rounds")
    for recipe, v in per.items():
        print(f"{recipe:8s} {med[recipe]:8.3f}  " + ", ".join(f"{x:.3f}" for x in v))
    print(f"ppo / grpo: {med['ppo'] / med['grpo']:.2f}x")
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            json.dumps(
                {
                    "steps": steps,
                    "rounds": rounds,
                    "per_round": per,
                    "median": med,
                    "ratio_ppo_over_grpo": med["ppo"] / med["grpo"],
                },
                indent=2,
            )
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--problems", type=int, default=500, help="held-out problems of the final eval")
    ap.add_argument("--out", type=Path, default=Path("runs/compare_ppo"))
    ap.add_argument(
        "--json",
        type=Path,
        default=None,
        help="default: benchmarks/results/ppo/ppo_vs_grpo.json (--smoke: none unless given)",
    )
    ap.add_argument("--smoke", action="store_true", help="2 steps, 1 seed, 20 problems: checks the script runs")
    ap.add_argument(
        "--speed",
        type=int,
        default=0,
        metavar="STEPS",
        help="only seconds per step: STEPS-step runs of each recipe, alternated (--rounds), no evaluation",
    )
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    if args.speed:
        return speed(args.out, args.speed, args.rounds, args.json or Path("benchmarks/results/ppo/speed.json"))
    if args.smoke:
        args.steps, args.seeds, args.problems = 2, 1, 20
    cmd = [
        sys.executable,
        "-m",
        "reasonrl.cli",
        "compare",
        "--recipes",
        ",".join(RECIPES),
        "--seeds",
        str(args.seeds),
        "--steps",
        str(args.steps),
        "--out",
        str(args.out),
        "eval_every=0",
        f"final_eval_problems={args.problems}",
        "final_eval_k=0",
        "save_every=0",
        "--resume",
    ]
    subprocess.run(
        cmd, check=True, env={**os.environ, "PYTHONPATH": "src" + os.pathsep + os.environ.get("PYTHONPATH", "")}
    )
    report = json.loads((args.out / "compare.json").read_text())
    rows = {}
    for recipe in RECIPES:
        runs = [r for r in report["runs"] if r["recipe"] == recipe and r["ok"]]
        finals = [r["final"] for r in runs]
        rows[recipe] = {
            "final_pass@1_mean": statistics.mean(finals),
            "final_pass@1_std": statistics.stdev(finals) if len(finals) > 1 else 0.0,
            "finals": finals,
            "s_per_step": statistics.mean(seconds_per_step(Path(r["run_dir"])) for r in runs),
            **memory(recipe, args.out / "memory"),
        }
    print(f"{'recipe':8s} {'pass@1':>14s} {'s/step':>8s} {'state MB':>9s} {'peak RSS MB':>12s}")
    for recipe, row in rows.items():
        print(
            f"{recipe:8s} {row['final_pass@1_mean']:.3f} +- {row['final_pass@1_std']:.3f} {row['s_per_step']:8.2f} "
            f"{row['state_mb']:9.1f} {row['peak_rss_mb']:12.0f}"
        )
    path = args.json or (None if args.smoke else Path("benchmarks/results/ppo/ppo_vs_grpo.json"))
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            json.dumps(
                {
                    "settings": {k: str(v) for k, v in vars(args).items()},
                    "rows": rows,
                    "compare_table": report.get("table"),
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
