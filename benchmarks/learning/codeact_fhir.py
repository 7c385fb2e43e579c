"""The CodeAct agent on the FHIR task (issue #31): held-out answer correctness before and after RL, per seed.

``--recipe codeact`` (the default) trains on the task's verifier; ``--recipe codeact_judge`` on a judge's
verdicts alone (give ``rewards.judge.backend=...``; without a judge model, the scripted stand-ins of
``benchmarks/judges/fhir_rule_judge.py``: an exact judge and one that reverses a fixed 20% of verdicts).

1. ``reasonrl compare --recipes codeact --seeds S --steps N --model BASE``: from a warm-started agent (BASE:
   `reasonrl pretrain --task fhir --model src/reasonrl/models/base --out runs/fhir_base`, the scripted
   expert's one-cell actions), each seed's greedy held-out correctness on the same held-out patients'
   questions before and after training (the episodes evaluated as in training: up to 4 turns).
2. Per seed, over the training steps: turns per episode, cells that ended in an error and turns without
   runnable code per episode (``env/codeact/*``), the finish reasons, seconds per step.
3. Seconds per step of single-turn GRPO on arithmetic from the shipped base, in the same process tree
   (the peer of the agent's step time on this machine).

    python benchmarks/learning/codeact_fhir.py --base runs/fhir_base --seeds 3 --steps 30
    python benchmarks/learning/codeact_fhir.py --base runs/fhir_base50 --out runs/codeact_fhir50 \
        --json benchmarks/results/agents/codeact_fhir50.json episodes.max_obs_tokens=96
    python benchmarks/learning/codeact_fhir.py --smoke --base DIR           # 2 steps, 1 seed, 10 problems

    python benchmarks/learning/codeact_fhir.py --recipe codeact_judge --base runs/fhir_base50 \
        --out runs/codeact_judge50 \
        --json benchmarks/results/agents/codeact_judge_fhir50.json --seeds 3 --steps 20 episodes.max_obs_tokens=96 \
        rewards.judge.backend=benchmarks/judges/fhir_rule_judge.py:judge

A real judge's parse-failure rate needs a judge model: with the tiny reasoner there is none worth the name;
``judge/parse_failures`` is logged (and kept here) with any backend.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from reasonrl.loop.tracking import read_metrics

KEYS = (
    "episode/turns_mean",
    "env/codeact/cell_errors",
    "env/codeact/malformed",
    "env/codeact/timeouts",
    "episode/finish_answer",
    "episode/finish_turns",
    "episode/finish_context",
    "accuracy",
    "reward/judge/mean",
    "judge/parse_failures",
    "judge/cached",
)


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": "src" + os.pathsep + os.environ.get("PYTHONPATH", "")}


def seconds_per_step(rows: list[dict]) -> float:
    return statistics.mean(sum(v for k, v in r.items() if k.startswith("time/") and k != "time/comm") for r in rows)


def seed_row(run: Path) -> dict:
    summary = json.loads((run / "summary.json").read_text())
    rows = read_metrics(run / "metrics.jsonl")
    out = {
        "before": summary["before"]["pass@1"],
        "after": summary["after"]["pass@1"],
        "s_per_step": seconds_per_step(rows),
    }
    out.update({k: statistics.mean(r[k] for r in rows if k in r) for k in KEYS if any(k in r for r in rows)})
    return out


def grpo_step_seconds(out: Path, steps: int) -> float:
    cmd = [
        sys.executable,
        "-m",
        "reasonrl.cli",
        "train",
        "--recipe",
        "grpo",
        "--steps",
        str(steps),
        "--out",
        str(out / "grpo-arith"),
        "eval_every=0",
        "final_eval_problems=0",
        "save_every=0",
    ]
    if not (out / "grpo-arith" / "metrics.jsonl").exists():
        subprocess.run(cmd, check=True, env=_env())
    return seconds_per_step(read_metrics(out / "grpo-arith" / "metrics.jsonl"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--recipe", choices=("codeact", "codeact_judge"), default="codeact")
    ap.add_argument("--base", type=Path, required=True, help="the warm-started agent (reasonrl pretrain --task fhir)")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--problems", type=int, default=100, help="held-out questions of the before/after evals")
    ap.add_argument("--out", type=Path, default=Path("runs/codeact_fhir"))
    ap.add_argument("--json", type=Path, default=None, help="default: benchmarks/results/agents/RECIPE_fhir.json")
    ap.add_argument("--smoke", action="store_true", help="2 steps, 1 seed, 10 problems: the code paths only")
    ap.add_argument("overrides", nargs="*", help="run settings for every seed, e.g. episodes.max_obs_tokens=96")
    a = ap.parse_args()
    if a.smoke:
        a.steps, a.seeds, a.problems = 2, 1, 10
    cmd = [
        sys.executable,
        "-m",
        "reasonrl.cli",
        "compare",
        "--recipes",
        a.recipe,
        "--seeds",
        str(a.seeds),
        "--steps",
        str(a.steps),
        "--task",
        "fhir",
        "--out",
        str(a.out),
        f"model={a.base}",
        "eval_every=0",
        f"final_eval_problems={a.problems}",
        "final_eval_k=0",
        "save_every=0",
        *a.overrides,
        "--resume",
    ]
    subprocess.run(cmd, check=True, env=_env())
    seeds = {s: seed_row(a.out / f"{a.recipe}-seed{s}") for s in range(a.seeds)}
    grpo = grpo_step_seconds(a.out, 2 if a.smoke else 5)
    print(
        f"{'seed':>4} {'before':>7} {'after':>7} {'turns':>6} {'errors':>7} {'no code':>8} {'answered':>9} "
        f"{'s/step':>7}"
    )
    for s, r in seeds.items():
        print(
            f"{s:>4} {r['before']:7.3f} {r['after']:7.3f} {r.get('episode/turns_mean', 0):6.2f} "
            f"{r.get('env/codeact/cell_errors', 0):7.2f} {r.get('env/codeact/malformed', 0):8.2f} "
            f"{r.get('episode/finish_answer', 0):9.2f} {r['s_per_step']:7.2f}"
        )
    after = [r["after"] for r in seeds.values()]
    summary = {
        "recipe": a.recipe,
        "before": seeds[0]["before"],
        "after_mean": statistics.mean(after),
        "after_std": statistics.stdev(after) if len(after) > 1 else 0.0,
        "agent_s_per_step": statistics.mean(r["s_per_step"] for r in seeds.values()),
        "grpo_arithmetic_s_per_step": grpo,
    }
    print(
        f"held-out correctness {summary['before']:.3f} -> {summary['after_mean']:.3f} +- {summary['after_std']:.3f}; "
        f"s/step {a.recipe} {summary['agent_s_per_step']:.2f} vs single-turn grpo (arithmetic) {grpo:.2f}"
    )
    path = a.json or (None if a.smoke else Path(f"benchmarks/results/agents/{a.recipe}_fhir.json"))
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            json.dumps(
                {"settings": {k: str(v) for k, v in vars(a).items()}, "seeds": seeds, "summary": summary}, indent=2
            )
        )
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
