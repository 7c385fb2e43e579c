"""PopuLoRA (T teachers + S students) against a compute-matched single AZR agent on AZR's program world (issue
#30; spec envs-selfplay-eval.md 4: "report the population mean, worst and best member, against a compute-matched
single agent (same steps per adapter)").

Both train from the same model with LoRA of the same rank for the same number of steps; per step each PopuLoRA
student gets as many solver problems as the single agent and each teacher as many proposal prompts as the agent's
proposer (``--items`` and ``--proposals``), so every adapter sees the agent's data volume. Measured per seed:
greedy held-out accuracy (AZR's three types, the same held-out problems) of every student and of the agent; the
proposed tasks' program length (characters) and AST depth, early (first half of the steps) and late (second half);
wall-clock seconds; over seeds, the paired tests against the agent (summarise). Prints a table and writes JSON.

    python benchmarks/learning/populora_compare.py --model runs/selfplay/bases/azr --steps 30 --seeds 0,1,2
    python benchmarks/learning/populora_compare.py --smoke  # a fresh tiny model, 2 steps, 2 + 2: the code paths only
    # seeds run apart, then merged:
    python benchmarks/learning/populora_compare.py --merge s0.json s1.json s2.json --json compare.json

The model should be warm-started on the azr task (``bash benchmarks/learning/selfplay_compare.sh azr`` builds it in
runs/selfplay/bases/azr): from a model that never saw the six prompts every completion has the wrong format and no
run learns.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import time
from pathlib import Path

import torch

from reasonrl.config.train import Lora, TrainConfig
from reasonrl.eval.metrics import welch_t_test
from reasonrl.eval.paired import paired_bootstrap_values_ci, paired_tests
from reasonrl.eval.runner import EvalConfig, evaluate, evaluate_model
from reasonrl.models import build_tiny, load_model
from reasonrl.models.lora import use_adapter
from reasonrl.parts import AZR, PopuLoRA
from reasonrl.parts.populora import adapter_of
from reasonrl.recipes import get_recipe
from reasonrl.tasks import get_task
from reasonrl.loop.trainer import Trainer


def recipes(a) -> dict:
    """The two recipes, compute-matched: each student as many items, each teacher as many proposals, as the agent."""
    pop, azr = get_recipe("populora"), get_recipe("azr")
    sampling = dataclasses.replace(pop.sampling, max_new_tokens=a.max_new)
    if a.lr is not None:  # one learning rate for both sides (the recipes share azr's 5e-5)
        pop, azr = (dataclasses.replace(r, optim=dataclasses.replace(r.optim, lr=a.lr)) for r in (pop, azr))
    pop = dataclasses.replace(
        pop,
        sampling=sampling,
        populora=PopuLoRA(
            teachers=a.teachers,
            students=a.students,
            proposals=a.proposals,
            estimate_samples=a.estimate,
            types=a.types,
            pbt_every=a.pbt_every,
            pbt_frac=a.pbt_frac,
            pbt_buffers=a.pbt_buffers,
        ),
    )
    azr = dataclasses.replace(
        azr, sampling=sampling, azr=AZR(proposals=a.proposals, estimate_samples=a.estimate, types=a.types)
    )
    return {"populora": (pop, a.items * a.students), "azr": (azr, a.items)}


def train(name: str, recipe, items: int, seed: int, a, out: Path) -> tuple[Trainer, list[dict], float]:
    model, tok = build_tiny("tiny", seed=0) if a.smoke else load_model(a.model)
    cfg = TrainConfig(
        recipe=name,
        task="azr",
        steps=a.steps,
        prompts_per_step=items,
        seed=seed,
        eval_every=0,
        save_every=0,
        final_eval_problems=0,
        lora=Lora(r=a.rank, alpha=2.0 * a.rank),
    )
    t0, logs = time.perf_counter(), []
    trainer = Trainer(model.train(), tok, get_task("azr"), recipe, cfg, out / f"{name}-{seed}")
    for _ in range(a.steps):
        logs.append(trainer.train_step())
    return trainer, logs, time.perf_counter() - t0


def held_out(trainer: Trainer, adapter: str, a) -> dict:
    """Greedy accuracy (overall and per type) on the fixed held-out problems, and each problem's 0/1 correctness in
    the evaluation's order (the same problems for every adapter and seed: the paired tests use it)."""
    with use_adapter(trainer.model, adapter), torch.no_grad():
        return accuracy(*evaluate(trainer.engine, trainer.task, eval_config(a)))


def start_accuracy(a) -> dict:
    """The starting model on the same problems: what every adapter (B = 0) starts from."""
    model, tok = build_tiny("tiny", seed=0) if a.smoke else load_model(a.model)
    with torch.no_grad():
        return accuracy(*evaluate_model(model.eval(), tok, get_task("azr"), eval_config(a)))


def eval_config(a) -> EvalConfig:
    return EvalConfig(n_problems=a.eval_problems, samples_per_problem=0, max_new_tokens=a.max_new, seed=1234)


def accuracy(summary: dict, records: list[dict]) -> dict:
    out = {k: v for k, v in summary.items() if k == "pass@1" or k.endswith("_acc")}
    return {**out, "correct": [int(bool(r["correct"])) for r in records]}


def complexity(logs: list[dict], key: str) -> tuple[float, float]:
    """Mean of ``key`` over the steps that logged it, in the first and the second half of training (NaN: none)."""
    half = len(logs) // 2 or 1

    def mean(rows):
        vals = [r[key] for r in rows if key in r]
        return statistics.fmean(vals) if vals else math.nan

    return mean(logs[:half]), mean(logs[half:])


def one_seed(seed: int, a, out: Path) -> dict:
    row: dict = {"seed": seed}
    for name, (recipe, items) in recipes(a).items():
        trainer, logs, secs = train(name, recipe, items, seed, a, out)
        members = [f"s{i}" for i in range(a.students)] if name == "populora" else ["default"]
        accs = {m: held_out(trainer, adapter_of(m) if name == "populora" else m, a) for m in members}
        row[name] = {
            "seconds": secs,
            "held_out": accs,
            "program_chars": complexity(logs, "azr/program_chars"),
            "ast_depth": complexity(logs, "azr/ast_depth"),
            "proposer_reward": statistics.fmean(r.get("azr/proposer_reward", math.nan) for r in logs),
        }
        if name == "populora":
            last = logs[-1]
            row[name]["skill"] = {k.split("_", 1)[1]: v for k, v in last.items() if k.startswith("populora/skill_")}
            row[name]["pbt_total"] = last.get("populora/pbt_total", 0.0)
    pop = [v["pass@1"] for v in row["populora"]["held_out"].values()]  # the students' held-out accuracies
    row["summary"] = {
        "pop_best": max(pop),
        "pop_mean": statistics.fmean(pop),
        "pop_worst": min(pop),
        "azr": row["azr"]["held_out"]["default"]["pass@1"],
        "wall_ratio": row["populora"]["seconds"] / row["azr"]["seconds"],
    }
    return row


def summarise(rows: list[dict]) -> dict:
    """Over seeds: mean and std of the population's best, mean and worst student, the single agent and the wall
    ratio; Welch over seeds (population mean vs agent, 2+ seeds); paired over the pooled (seed, problem) pairs: the
    population's per-problem mean correctness against the agent's (bootstrap CI), and its best student (chosen on
    these same problems, so favoured) against the agent (McNemar)."""
    cols = {k: [r["summary"][k] for r in rows] for k in ("pop_best", "pop_mean", "pop_worst", "azr", "wall_ratio")}
    out: dict = {"seeds": [r["seed"] for r in rows]}
    for k, vals in cols.items():
        out[k] = {
            "per_seed": vals,
            "mean": statistics.fmean(vals),
            "std": statistics.stdev(vals) if len(vals) > 1 else 0.0,
        }
    if len(rows) > 1:
        out["welch_p_pop_mean_vs_azr"] = welch_t_test(cols["pop_mean"], cols["azr"])[1]
    if all("correct" in r["azr"]["held_out"]["default"] for r in rows):
        agent, mean, best = [], [], []
        for r in rows:
            students = list(r["populora"]["held_out"].values())
            agent += r["azr"]["held_out"]["default"]["correct"]
            mean += [statistics.fmean(c) for c in zip(*(s["correct"] for s in students))]
            best += max(students, key=lambda s: s["pass@1"])["correct"]
        ci = paired_bootstrap_values_ci(mean, agent)
        out["paired_pop_mean_vs_azr"] = {"diff": ci.diff, "ci_low": ci.low, "ci_high": ci.high, "pairs": len(agent)}
        out["paired_pop_best_vs_azr"] = paired_tests(best, agent)
    return out


def table(rows: list[dict], m: dict) -> str:
    """One line per seed, and with 2+ seeds the mean line from ``m`` (:func:`summarise` of the rows)."""
    head = (
        "| seed | pop best | pop mean | pop worst | single AZR | AST depth pop (early>late) | AST depth AZR | "
        "chars pop (early>late) | chars AZR | wall ratio |"
    )
    lines = [head, "|" + "---|" * 10]
    f = lambda x: "nan" if x != x else f"{x:.3f}"  # noqa: E731
    g = lambda p: f"{f(p[0])}>{f(p[1])}"  # noqa: E731
    for r in rows:
        s, p, z = r["summary"], r["populora"], r["azr"]
        lines.append(
            f"| {r['seed']} | {f(s['pop_best'])} | {f(s['pop_mean'])} | {f(s['pop_worst'])} | {f(s['azr'])} | "
            f"{g(p['ast_depth'])} | {g(z['ast_depth'])} | {g(p['program_chars'])} | {g(z['program_chars'])} | "
            f"{s['wall_ratio']:.2f} |"
        )
    if len(rows) > 1:
        f2 = lambda k: f"{m[k]['mean']:.3f} ± {m[k]['std']:.3f}"  # noqa: E731
        lines.append(
            f"| mean | {f2('pop_best')} | {f2('pop_mean')} | {f2('pop_worst')} | {f2('azr')} | | | | | "
            f"{m['wall_ratio']['mean']:.2f} |"
        )
    return "\n".join(lines)


def merge(paths: list[Path]) -> dict:
    """Seed files of one setting (every argument equal but --seeds, --runs, --json and --start-only; an argument a
    file predates counts as None) and the same start, where measured -> one file."""
    runs = [json.loads(p.read_text()) for p in paths]
    names = {k for r in runs for k in r["args"]} - {"seeds", "runs", "json", "merge", "start_only"}  # absent: None
    if len({tuple(r["args"].get(k) for k in sorted(names)) for r in runs}) != 1:
        raise SystemExit(f"--merge: the files are not one setting: {[str(p) for p in paths]}")
    starts = [r["start"] for r in runs if "start" in r]  # files written before the start was measured have none
    if any(x != starts[0] for x in starts):
        raise SystemExit(f"--merge: the files started from different models: {[str(p) for p in paths]}")
    rows = sorted((row for r in runs for row in r["rows"]), key=lambda row: row["seed"])
    if len({row["seed"] for row in rows}) != len(rows):
        raise SystemExit(f"--merge: a seed appears twice in {[str(p) for p in paths]}")
    return {
        "args": {**runs[0]["args"], "seeds": ",".join(str(row["seed"]) for row in rows)},
        "files": list(map(str, paths)),
        **({"start": starts[0]} if starts else {}),
        "rows": rows,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="base", help="a model warm-started on the azr task")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--teachers", type=int, default=4)
    ap.add_argument("--students", type=int, default=4)
    ap.add_argument("--items", type=int, default=3, help="solver problems per step per student (= the agent's)")
    ap.add_argument("--proposals", type=int, default=1, help="proposal prompts per type per step per teacher")
    ap.add_argument("--estimate", type=int, default=4)
    ap.add_argument("--types", default="deduction,abduction,induction")
    ap.add_argument("--pbt-every", type=int, default=10)
    ap.add_argument("--pbt-frac", type=float, default=0.25, help="the bottom fraction replaced (floor(frac x N))")
    ap.add_argument(
        "--pbt-buffers",
        default="parent",
        help="a replaced teacher's tasks: parent (the default since "
        "issue 41) | fresh | keep (the loser's: the runs of 2026-12-05)",
    )
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--max-new", type=int, default=96)
    ap.add_argument("--lr", type=float, default=None, help="AdamW lr of both sides (default: the recipes', 5e-5)")
    ap.add_argument("--eval-problems", type=int, default=150)
    ap.add_argument("--runs", default="runs/populora_compare")
    ap.add_argument("--json", default=None, help="default: benchmarks/results/populora/compare[_smoke].json")
    ap.add_argument("--smoke", action="store_true", help="a fresh tiny model, 2 steps, 2 + 2, 4 held-out problems")
    ap.add_argument("--merge", nargs="+", type=Path, help="seed JSONs of one setting -> one file (--json)")
    ap.add_argument("--start-only", action="store_true", help="evaluate the starting model only (a file to merge)")
    a = ap.parse_args()
    if a.merge:
        data = merge(a.merge)
        if not data["rows"]:
            raise SystemExit("--merge: the files hold no seed")
        write(data, Path(a.json or Path(__file__).parents[1] / "results" / "populora" / "compare.json"))
        return
    if a.smoke:
        a.steps, a.seeds, a.teachers, a.students, a.items, a.estimate = 2, "0", 2, 2, 1, 2
        a.types, a.pbt_every, a.rank, a.max_new, a.eval_problems = "deduction", 1, 4, 24, 4
        a.pbt_frac = 0.5  # floor(0.25 x 2) = 0: with two members a side only 0.5 replaces one
    torch.set_num_threads(1)
    start = start_accuracy(a)
    rows = [] if a.start_only else [one_seed(int(s), a, Path(a.runs)) for s in a.seeds.split(",")]
    args = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(a).items() if k != "merge"}
    write(
        {"args": args, "start": start, "rows": rows},
        Path(
            a.json or Path(__file__).parents[1] / "results" / "populora" / f"compare{'_smoke' if a.smoke else ''}.json"
        ),
    )


def write(data: dict, path: Path) -> None:
    """Print the table and the paired tests, write the rows and their summary over seeds as JSON."""
    if "start" in data:
        print(f"start (the model every adapter starts from): pass@1 {data['start']['pass@1']:.3f}")
    if data["rows"]:
        data["summary"] = summarise(data["rows"])
        print(table(data["rows"], data["summary"]))
    m = data.get("summary", {})
    if "paired_pop_mean_vs_azr" in m:
        p, b = m["paired_pop_mean_vs_azr"], m["paired_pop_best_vs_azr"]
        print(
            f"paired over {p['pairs']} (seed, problem) pairs: population mean - agent {p['diff']:+.3f} "
            f"[{p['ci_low']:+.3f}, {p['ci_high']:+.3f}]; best student - agent {b['diff']:+.3f} "
            f"[{b['ci_low']:+.3f}, {b['ci_high']:+.3f}], McNemar {b['b']} vs {b['c']}, p {b['mcnemar_p']:.3f}"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
