"""``reasonrl diagnose ...``: analyses of finished runs. ``diagnose unlearnable`` classifies the
held-out problems from several runs and compares their LoRA gradients at the initial model
(spec distill-and-data.md section 12; docs/diagnose.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from ..errors import UserError
from .common import console, progress, quiet_transformers

diagnose_app = typer.Typer(no_args_is_help=True, help="Diagnostics of finished runs (unlearnable prompts).")


@diagnose_app.command("unlearnable")
def unlearnable_cmd(
    runs: str = typer.Option(
        ..., help="Run folders (reasonrl train --out), comma-separated: e.g. three seeds of one recipe."
    ),
    model: Optional[str] = typer.Option(
        None, help="The initial model the runs started from (default: the shipped base)."
    ),
    out: Path = typer.Option(Path("unlearnable.json"), help="The JSON to write; the heatmap goes beside it (.png)."),
    rollouts: int = typer.Option(16, help="Rollouts sampled per prompt for its gradient (the paper: ~1000)."),
    max_correct: int = typer.Option(20, help="Correct rollouts averaged per prompt, at most (a seeded random pick)."),
    per_class: int = typer.Option(100, help="Prompts drawn per block (easy, learnable, unlearnable) for the heatmap."),
    temperature: float = typer.Option(0.7, help="Sampling temperature of the rollouts."),
    grad_temperature: float = typer.Option(
        1.0, help="Temperature of the log-probs in the gradients (1: raw logits, as the source's gradient pass)."
    ),
    tau: float = typer.Option(0.1, help="pass@1 threshold of the classes."),
    seed: int = typer.Option(0, help="Seed of the drawn prompts, the rollouts and the pick of correct ones."),
) -> None:
    """Which held-out problems no run learned (pass@1 <= tau after training in every run), and whether
    their gradients at the initial model point where the others' do: a JSON and a heatmap PNG."""
    from ..diagnostics.unlearnable_report import DiagnoseConfig, diagnose_unlearnable

    dirs = [d.strip() for d in runs.split(",") if d.strip()]
    if not dirs:
        raise UserError("--runs: give run folders, comma-separated")
    cfg = DiagnoseConfig(
        rollouts=rollouts,
        max_correct=max_correct,
        per_class=per_class,
        temperature=temperature,
        grad_temperature=grad_temperature,
        tau=tau,
        seed=seed,
    )
    quiet_transformers()
    with progress() as bar:
        job = bar.add_task("prompt gradients", total=None, info="")
        result = diagnose_unlearnable(
            dirs, model, out, cfg, progress=lambda done, total: bar.update(job, completed=done, total=total)
        )
    console.print(_table(result))
    console.print(f"{out}\n{result['heatmap']}", soft_wrap=True)


def _table(result: dict) -> Table:
    table = Table(title=f"unlearnability over {len(result['runs'])} runs")
    table.add_column("what")
    table.add_column("value", justify="right")
    for name, n in result["counts"].items():
        table.add_row(f"class {name}", str(n))
    table.add_row("prompts without gradient (all rollouts agree)", str(len(result["dropped"])))
    for pair, v in result["block_means"].items():
        table.add_row(f"mean cosine {pair}", "-" if v is None else f"{v:.4f}")
    return table
