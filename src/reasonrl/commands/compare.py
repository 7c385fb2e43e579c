"""``reasonrl compare``: train each recipe on each seed (separate processes) and compare held-out accuracy.

Apart from commands/evaluate.py (which re-exports these names) to keep that module under 400 lines."""

from __future__ import annotations

from pathlib import Path
from typing import Any, List, Optional

import typer
from rich.table import Table

from ..errors import UserError
from .common import checked_run, console, progress


def compare_cmd(
    recipes: str = typer.Option(
        ...,
        help="Comma-separated recipe names, each optionally with its own overrides "
        "(name:key=value:...); p-values are against the first.",
    ),
    seeds: int = typer.Option(3, help="Seeds per recipe."),
    steps: int = typer.Option(60, help="Training steps of every run."),
    task: Optional[str] = typer.Option(None, help="Task (default: arithmetic)."),
    out: Path = typer.Option(Path("runs/compare"), help="Folder for the runs, compare.json and compare.png."),
    resume: bool = typer.Option(
        False,
        "--resume",
        help="Reuse finished runs already in --out (their config.yaml must "
        "match) and continue killed ones: add seeds or recipes to a compare, or finish it.",
    ),
    pass_k: int = typer.Option(
        0,
        "--pass-k",
        help="Sample N completions per held-out problem in each run's final eval "
        "(final_eval_k=N) and report pass@k for k = 1..N and distinct correct chains (0: off).",
    ),
    args: Optional[List[str]] = typer.Argument(None, help="key=value overrides given to every run."),
) -> None:
    """Train each recipe on each seed (separate processes) and compare held-out accuracy."""
    from ..compare import compare
    from ..config.validate import check_inputs

    names = [r.strip() for r in recipes.split(",") if r.strip()]
    if not names or seeds < 1 or pass_k < 0:
        raise UserError(
            f"compare needs at least one recipe, --seeds >= 1 and --pass-k >= 0, got --recipes {recipes!r} "
            f"--seeds {seeds} --pass-k {pass_k}"
        )
    args = [*(args or []), *([f"final_eval_k={pass_k}"] if pass_k else [])]
    runs = checked_entries(names, args, task, steps)
    inputs: dict[str, list] = {}
    for cfg, recipe in runs.values():  # each distinct task/model once, with every recipe that trains it
        inputs.setdefault(repr((cfg.model, cfg.task, cfg.task_options)), [cfg]).append(recipe)
    for cfg, *recipes in inputs.values():
        check_inputs(cfg, *recipes)
    with progress() as bar:
        job = bar.add_task("comparing", total=len(names) * seeds, info="")

        def on_run(res) -> None:
            info = f"{res.recipe} seed {res.seed}: " + (
                f"pass@1 {res.final:.3f}" if res.ok else f"FAILED {res.error[:60]}"
            )
            bar.advance(job)
            bar.update(job, info=info)

        report = compare(
            names,
            seeds,
            steps,
            out,
            task=task,
            extra=args,
            on_run=on_run,
            expected=expected_config(runs) if resume else None,
        )
    console.print(_compare_table(report, out))
    if report.get("passk"):
        console.print(_passk_table(report["passk"]))


def checked_entries(names: list[str], args: list[str], task: str | None, steps: int) -> dict[str, Any]:
    """entry -> (config, recipe) of every compare entry (``name:key=value:...``), all checked before any run:
    an unknown name, a malformed override or a bad value fails here."""
    from ..compare import parse_variant

    runs = {}
    for entry in names:
        name, own = parse_variant(entry)
        runs[entry] = checked_run([*args, *own], name, None, task, steps, None, False)
    return runs


def expected_config(runs: dict[str, Any]):
    """(entry, seed, run folder) -> the config.yaml that ``train`` would write for that run."""
    from dataclasses import replace

    from ..config.train import resolved_dict

    def expected(entry: str, seed: int, run_dir: Path) -> dict:
        cfg, recipe = runs[entry]
        return {**resolved_dict(replace(cfg, seed=seed), recipe), "out": str(run_dir)}

    return expected


def _compare_table(report: dict[str, Any], out: Path) -> Table:
    table = Table(
        title=f"{report['task']}, {report['steps']} steps, {report['seeds']} seeds -> {out}/compare.json, compare.png"
    )
    cols = (
        "recipe",
        "final pass@1",
        "best",
        "AUC",
        "train s",
        "tokens",
        "Welch p",
        "paired Δ [95% CI]",
        "McNemar p (b/c)",
        "runs",
    )
    for col in cols:
        table.add_column(col, justify="left" if col == "recipe" else "right")
    for row in report["table"]:
        if "final_mean" not in row:
            table.add_row(row["recipe"], *["-"] * 8, f"0 ok / {row['runs_failed']} failed")
            continue
        p, pt = row["p_vs_first"], row.get("paired_vs_first")
        diff = "" if pt is None else f"{pt['diff']:+.3f} [{pt['ci_low']:+.3f}, {pt['ci_high']:+.3f}]"
        mcnemar = "" if pt is None else f"{pt['mcnemar_p']:.3g} ({pt['b']}/{pt['c']})"
        table.add_row(
            row["recipe"],
            f"{row['final_mean']:.3f} ± {row['final_std']:.3f}",
            f"{row['best']:.3f}",
            f"{row['auc']:.3f}",
            f"{row['seconds']:.0f}",
            f"{row['tokens']:.0f}",
            "" if p is None else f"{p:.3g}",
            diff,
            mcnemar,
            f"{row['runs_ok']} ok / {row['runs_failed']} failed",
        )
    return table


def _passk_table(passk: dict[str, Any]) -> Table:
    """pass@k at k = 1, 2, 4, ... n (means over seeds), distinct correct chains per problem, and the paired
    difference at k = n against the first recipe."""
    n = passk["n"]
    ks = [k for k in (1, 2, 4, 8, 16, 32, 64, 128, 256) if k <= n] + ([n] if n & (n - 1) else [])
    table = Table(title=f"pass@k from n = {n} samples per problem (unbiased estimator), mean over seeds")
    for col in ("recipe", *(f"pass@{k}" for k in ks), "correct chains", "correct answers", f"Δ pass@{n} [95% CI]"):
        table.add_column(col, justify="left" if col == "recipe" else "right")
    for name, row in passk["recipes"].items():
        vs = (row.get("vs_first") or {}).get(f"pass@{n}")
        diff = "" if vs is None else f"{vs['diff']:+.3f} [{vs['ci_low']:+.3f}, {vs['ci_high']:+.3f}]"
        table.add_row(
            name,
            *(f"{row['pass_at_k'][k - 1]:.3f}" for k in ks),
            f"{row['correct_chains']:.2f}",
            f"{row['correct_answers']:.2f}",
            diff,
        )
    return table
