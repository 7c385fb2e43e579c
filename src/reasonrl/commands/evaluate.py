"""``reasonrl eval`` and ``reasonrl compare``: a model's held-out scores, and recipes x seeds in one table,
with paired tests on the same items."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, List, Optional

import typer
from rich.table import Table

from ..errors import UserError
from .common import checked_run, console, parse_options, progress, quiet_transformers, summary_table


def eval_cmd(
    model: Optional[str] = typer.Option(None, help="HF model directory or hub id (default: the shipped base)."),
    task: Optional[str] = typer.Option(None, help="arithmetic | rg:<name> | a .jsonl/.parquet file or dataset dir."),
    task_opt: Optional[List[str]] = typer.Option(None, "--task-opt", help="Task option key=value (repeatable)."),
    n: int = typer.Option(500, help="Held-out problems."),
    k: int = typer.Option(8, help="Sampled completions per problem for pass@k / avg@k / maj@k (0: greedy only)."),
    temperature: float = typer.Option(1.0, help="Sampling temperature of the k samples."),
    max_new_tokens: Optional[int] = typer.Option(None, help="Generation budget (default: the task's)."),
    seed: int = typer.Option(0),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Write the summary as JSON here."),
    samples: Optional[Path] = typer.Option(None, help="Write every sample as JSONL here."),
    against: Optional[Path] = typer.Option(None, help="Another model's --samples JSONL (same task, --n, --seed): "
                                           "paired tests (McNemar, sign test, bootstrap CI) on the greedy results."),
) -> None:
    """Greedy pass@1 and sampled pass@k, avg@k, maj@k of a model on a task's held-out split."""
    import torch

    from ..tasks import get_task
    from ..validate import OPTION_RULES, check_options

    check_options({"--n": n, "--k": k, "--temperature": temperature, "--max-new-tokens": max_new_tokens, "--seed": seed},
                  OPTION_RULES["eval"])
    the_task = get_task(task, **parse_options(task_opt))  # cheap, and it validates the data: before the model

    from ..eval.paired import load_item_results, paired_by_key
    from ..eval.runner import EvalConfig, evaluate_model, write_samples

    other = load_item_results(against) if against else None  # a bad file fails before the model loads
    from ..models import load_model

    quiet_transformers()
    torch.manual_seed(seed)
    mdl, tok = load_model(model)
    cfg = EvalConfig(n_problems=n, k=k, temperature=temperature, max_new_tokens=max_new_tokens, seed=seed)
    with progress() as bar:
        job = bar.add_task("evaluating", total=n * (1 + k), info="")
        summary, records = evaluate_model(mdl, tok, the_task, cfg, progress=lambda m: bar.advance(job, m))
    console.print(summary_table(f"{model or 'base'} on {the_task.name}", summary))
    if other is not None:
        mine = {r["key"]: r["correct"] for r in records if r["mode"] == "greedy"}
        summary["against"] = {"file": str(against), **paired_by_key(mine, other)}
        console.print(_paired_table(f"{model or 'base'} against {against}", summary["against"]))
    if json_path:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(summary, indent=2))
    if samples:
        write_samples(records, samples)


def compare_cmd(
    recipes: str = typer.Option(..., help="Comma-separated recipe names, each optionally with its own overrides "
                                "(name:key=value:...); p-values are against the first."),
    seeds: int = typer.Option(3, help="Seeds per recipe."),
    steps: int = typer.Option(60, help="Training steps of every run."),
    task: Optional[str] = typer.Option(None, help="Task (default: arithmetic)."),
    out: Path = typer.Option(Path("runs/compare"), help="Folder for the runs, compare.json and compare.png."),
    resume: bool = typer.Option(False, "--resume", help="Reuse finished runs already in --out (their config.yaml must "
                                "match) and continue killed ones: add seeds or recipes to a compare, or finish it."),
    args: Optional[List[str]] = typer.Argument(None, help="key=value overrides given to every run."),
) -> None:
    """Train each recipe on each seed (separate processes) and compare held-out accuracy."""
    from ..compare import compare, parse_variant
    from ..validate import check_inputs

    names = [r.strip() for r in recipes.split(",") if r.strip()]
    if not names or seeds < 1:
        raise UserError(f"compare needs at least one recipe and --seeds >= 1, got --recipes {recipes!r} --seeds {seeds}")
    inputs, runs = {}, {}
    for entry in names:  # fail before any run on an unknown name, a malformed override or a bad value
        name, own = parse_variant(entry)
        cfg, the_recipe = checked_run([*(args or []), *own], name, None, task, steps, None, False)
        inputs[repr((cfg.model, cfg.task, cfg.task_options))] = cfg
        runs[entry] = (cfg, the_recipe)
    for cfg in inputs.values():  # each distinct task/model once
        check_inputs(cfg)
    with progress() as bar:
        job = bar.add_task("comparing", total=len(names) * seeds, info="")

        def on_run(res) -> None:
            info = f"{res.recipe} seed {res.seed}: " + (f"pass@1 {res.final:.3f}" if res.ok else f"FAILED {res.error[:60]}")
            bar.advance(job)
            bar.update(job, info=info)

        report = compare(names, seeds, steps, out, task=task, extra=list(args or []), on_run=on_run,
                         expected=_expected_config(runs) if resume else None)
    console.print(_compare_table(report, out))


def _expected_config(runs: dict[str, Any]):
    """(entry, seed, run folder) -> the config.yaml that ``train`` would write for that run."""
    from dataclasses import replace

    from ..config import resolved_dict

    def expected(entry: str, seed: int, run_dir: Path) -> dict:
        cfg, recipe = runs[entry]
        return {**resolved_dict(replace(cfg, seed=seed), recipe), "out": str(run_dir)}

    return expected


def _compare_table(report: dict[str, Any], out: Path) -> Table:
    table = Table(title=f"{report['task']}, {report['steps']} steps, {report['seeds']} seeds -> {out}/compare.json, compare.png")
    cols = ("recipe", "final pass@1", "best", "AUC", "train s", "tokens", "Welch p", "paired Δ [95% CI]",
            "McNemar p (b/c)", "runs")
    for col in cols:
        table.add_column(col, justify="left" if col == "recipe" else "right")
    for row in report["table"]:
        if "final_mean" not in row:
            table.add_row(row["recipe"], *["-"] * 8, f"0 ok / {row['runs_failed']} failed")
            continue
        p, pt = row["p_vs_first"], row.get("paired_vs_first")
        diff = "" if pt is None else f"{pt['diff']:+.3f} [{pt['ci_low']:+.3f}, {pt['ci_high']:+.3f}]"
        mcnemar = "" if pt is None else f"{pt['mcnemar_p']:.3g} ({pt['b']}/{pt['c']})"
        table.add_row(row["recipe"], f"{row['final_mean']:.3f} ± {row['final_std']:.3f}", f"{row['best']:.3f}",
                      f"{row['auc']:.3f}", f"{row['seconds']:.0f}", f"{row['tokens']:.0f}",
                      "" if p is None else f"{p:.3g}", diff, mcnemar, f"{row['runs_ok']} ok / {row['runs_failed']} failed")
    return table


def _paired_table(title: str, res: dict[str, Any]) -> Table:
    """``reasonrl eval --against``: this model (x) against the other (y) on the same problems."""
    table = Table(title=title)
    table.add_column("paired test")
    table.add_column("value", justify="right")
    table.add_row("problems", str(res["n_items"]))
    table.add_row("pass@1 this / other", f"{res['acc_x']:.4f} / {res['acc_y']:.4f}")
    table.add_row("b (only this right) / c (only other right)", f"{res['b']} / {res['c']}")
    table.add_row("sign test p (this better, one-sided)", f"{res['sign_p_greater']:.4g}")
    table.add_row("exact McNemar p (two-sided)", f"{res['mcnemar_p']:.4g}")
    table.add_row(f"Δ pass@1, bootstrap 95% CI (B={res['bootstrap_B']})",
                  f"{res['diff']:+.4f} [{res['ci_low']:+.4f}, {res['ci_high']:+.4f}]")
    return table
