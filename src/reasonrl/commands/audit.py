"""``reasonrl audit``: the three-stage contamination audit of a training set against an eval set."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from ..errors import ExistingPathError, UserError
from .common import console, quiet_transformers


def audit_cmd(
    train: str = typer.Option(
        ..., help="Training set: .jsonl | .parquet | HF dataset dir | task split (arithmetic:train)."
    ),
    eval_set: str = typer.Option(..., "--eval", help="Eval set, same kinds (e.g. arithmetic:test)."),
    stages: str = typer.Option("jaccard,embed", help="Comma-separated, in order: jaccard, embed, judge."),
    out: Path = typer.Option(Path("audit"), help="Folder for audit.json, pairs.jsonl and the cleaned training set."),
    jaccard_threshold: float = typer.Option(0.4, help="Stage 1: word 5-gram Jaccard at least this."),
    embed_threshold: float = typer.Option(0.85, help="Stage 2: embedding cosine at least this."),
    method: str = typer.Option("exact", help="Stage 1: exact (inverted index) | minhash (datasketch LSH, re-scored)."),
    embed_model: Optional[Path] = typer.Option(
        None, help="Local sentence-transformers dir (default: the packaged MiniLM)."
    ),
    judge_model: Optional[Path] = typer.Option(None, help="Local HF causal LM dir for the judge stage."),
    text_field: Optional[str] = typer.Option(None, help="Text column (default: prompt | question | problem | text)."),
    id_field: Optional[str] = typer.Option(None, help="Id column (default: id if present, else the row number)."),
    train_n: int = typer.Option(1000, help="Items drawn from a task's train split."),
    eval_n: int = typer.Option(200, help="Items drawn from a task's test split."),
    seed: int = typer.Option(0, help="Seed of the task items drawn."),
) -> None:
    """Flag train items that duplicate or paraphrase eval items; write the cleaned training set."""
    from ..eval.audit import ContaminationAuditor, EmbeddingStage, JaccardStage, JudgeStage
    from ..eval.audit_io import load_items

    if (out / "audit.json").exists():
        raise ExistingPathError(f"{out / 'audit.json'} exists; give another --out")
    names = [s.strip() for s in stages.split(",") if s.strip()]
    built = []
    for name in names:
        if name == "jaccard":
            built.append(JaccardStage(jaccard_threshold, method=method))
        elif name == "embed":
            built.append(EmbeddingStage(embed_model, embed_threshold))
        elif name == "judge":
            if judge_model is None:
                raise UserError("--stages includes judge: give --judge-model (a local HF causal LM directory)")
            built.append(JudgeStage(judge_model))
        else:
            raise UserError(f"--stages: unknown stage {name!r}; valid: jaccard, embed, judge")
    auditor = ContaminationAuditor(built)
    tr = load_items(train, text_field, id_field, n=train_n, seed=seed)
    ev = load_items(eval_set, text_field, id_field, n=eval_n, seed=seed)
    if "embed" in names or "judge" in names:
        quiet_transformers()
    res = auditor.run(tr, ev, log=lambda m: console.print(f"[dim]{m}[/dim]"))
    path = auditor.write(res, out)
    console.print(_table(res, path))


def _table(res, path: Path) -> Table:
    table = Table(title=f"audit {res.train.source} ({len(res.train)}) vs {res.eval.source} ({len(res.eval)})")
    for col in ("stage", "threshold", "pairs flagged", "seconds"):
        table.add_column(col, justify="right" if col != "stage" else "left")
    counts = res.counts
    for s in res.stages:
        table.add_row(s, str(res.thresholds.get(s, "-")), str(counts[s]), f"{res.seconds[s]:.2f}")
    table.add_row("linked train items", "", str(counts["linked_train"]), f"{res.seconds['total']:.2f}")
    table.add_row("kept train items", "", str(counts["kept_train"]), "")
    table.caption = f"written: {path} (pairs.jsonl, cleaned set beside it)"
    return table
