"""GRLO's transfer reading on the tiny reasoner (issue 32): does RLHF on open-ended prompts, rewarded by a
Bradley-Terry reward model alone, move accuracy on the verifiable task?

From the shipped base, per seed: ``grlo`` on the ``explain`` task (reward = the reward model of
benchmarks/studies/rm_accuracy.py, the verifier weighted 0) and ``grpo`` on ``arithmetic`` (the verifier's
reward), the same number of steps and samples per step (64). Every final model, and the start, is
evaluated greedily on the same held-out ``arithmetic`` problems (the transfer reading) and on
held-out ``explain`` problems (the trained skill: the final answer of the explanation). Prints a
table and writes JSON.

    python benchmarks/studies/rm_accuracy.py --out runs/grlo_rm
    python benchmarks/learning/grlo_transfer.py --rm runs/grlo_rm --steps 60 --seeds 3 --out runs/grlo_transfer
    # the paper's no-KL:
    python benchmarks/learning/grlo_transfer.py --rm runs/grlo_rm --grlo-opt kl.coef=0 --out runs/grlo_nokl
    python benchmarks/learning/grlo_transfer.py --rm /tmp/rm_smoke --smoke --out /tmp/grlo_smoke

A run folder that already holds a finished run (``summary.json``) is reused, so grpo runs can be shared between
settings by linking them into ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from reasonrl.eval.runner import EvalConfig, evaluate
from reasonrl.models import load_model
from reasonrl.rollout import HFEngine
from reasonrl.tasks import get_task
from reasonrl.loop.tracking import read_metrics

TASKS = ("arithmetic", "explain")


def train(recipe: str, seed: int, steps: int, out: Path, extra: list[str]) -> Path:
    run = out / f"{recipe}-seed{seed}"
    if (run / "summary.json").exists():
        return run  # finished earlier: reused
    resume = ["--resume"] if (run / "config.yaml").exists() else []
    cmd = [
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
        f"seed={seed}",
        "eval_every=0",
        "final_eval_problems=0",
        "save_every=10",
        *extra,
        *resume,
    ]
    env = {**os.environ, "PYTHONPATH": "src" + os.pathsep + os.environ.get("PYTHONPATH", "")}
    subprocess.run(cmd, check=True, env=env)
    return run


def accuracy(model_dir: str | None, problems: int) -> dict[str, float]:
    model, tok = load_model(model_dir)
    engine = HFEngine(model, tok)
    cfg = EvalConfig(n_problems=problems, samples_per_problem=0)
    return {t: evaluate(engine, get_task(t), cfg)[0]["pass@1"] for t in TASKS}


def rm_scores(run: Path) -> tuple[float, float]:
    """The reward model's mean score over the first and the last 5 steps of a grlo run."""
    rows = [r["reward/rm/score"] for r in read_metrics(run / "metrics.jsonl")]
    return statistics.mean(rows[:5]), statistics.mean(rows[-5:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rm", type=Path, required=True, help="reward model directory (benchmarks/studies/rm_accuracy.py)")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--problems", type=int, default=500)
    ap.add_argument("--out", type=Path, default=Path("runs/grlo_transfer"))
    ap.add_argument("--json", type=Path, default=Path("benchmarks/results/grlo/transfer.json"))
    ap.add_argument(
        "--grlo-opt",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a config override for the grlo runs (repeatable), e.g. kl.coef=0.5",
    )
    ap.add_argument("--smoke", action="store_true", help="2 steps, 1 seed, 20 problems: checks the script runs")
    args = ap.parse_args()
    if args.smoke:
        args.steps, args.seeds, args.problems = 2, 1, 20
    rows = {"start": accuracy(None, args.problems)}
    scores = []
    for seed in range(args.seeds):
        g = train("grlo", seed, args.steps, args.out, [f"rewards.rm.model={args.rm}", *args.grlo_opt])
        rows[f"grlo-seed{seed}"] = accuracy(str(g / "final"), args.problems)
        scores.append(rm_scores(g))
        v = train("grpo", seed, args.steps, args.out, ["--task", "arithmetic", "group_size=8", "prompts_per_step=8"])
        rows[f"grpo-seed{seed}"] = accuracy(str(v / "final"), args.problems)
    summary = {}
    for recipe in ("grlo", "grpo"):
        for t in TASKS:
            vals = [rows[f"{recipe}-seed{s}"][t] for s in range(args.seeds)]
            summary[f"{recipe}/{t}"] = (statistics.mean(vals), statistics.stdev(vals) if len(vals) > 1 else 0.0)
    print(f"{'model':14s} " + " ".join(f"{t:>18s}" for t in TASKS))
    print(f"{'start':14s} " + " ".join(f"{rows['start'][t]:18.3f}" for t in TASKS))
    for recipe in ("grlo", "grpo"):
        print(
            f"{recipe:14s} "
            + " ".join(f"{summary[f'{recipe}/{t}'][0]:11.3f} +- {summary[f'{recipe}/{t}'][1]:.3f}" for t in TASKS)
        )
    print("grlo reward-model score, first 5 -> last 5 steps:", [f"{a:.3f} -> {b:.3f}" for a, b in scores])
    if not args.smoke:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {
                    "settings": {k: str(v) for k, v in vars(args).items()},
                    "rows": rows,
                    "summary": summary,
                    "rm_score_first_last": scores,
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
