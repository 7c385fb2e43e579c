"""``reasonrl rm pairs`` and ``reasonrl rm train``: Bradley-Terry reward models (docs/ppo.md).

``pairs``: preference pairs from a task's scripted judge (``explain``): the model's own samples and
the task's edits of each prompt's canonical working, ranked by the judge, as JSONL
(``prompt``, ``chosen``, ``rejected``). ``train``: a reward model from any such file (TRL's
preference format, explicit prompt); its directory is a reward (``rewards.rm.model=DIR``).
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from ..errors import UserError
from .common import console, parse_options, progress, quiet_transformers, summary_table

rm_app = typer.Typer(help="Reward models: judged preference pairs, Bradley-Terry training.", no_args_is_help=True)


@rm_app.command("pairs")
def pairs_cmd(
    out: Path = typer.Option(Path("prefs.jsonl"), help="The pairs JSONL to write."),
    model: Optional[str] = typer.Option(None, help="Whose samples join the candidates (default: the shipped base)."),
    task: str = typer.Option("explain", help="A task with a scripted judge (explain)."),
    task_opt: Optional[List[str]] = typer.Option(None, "--task-opt", help="Task option key=value (repeatable)."),
    prompts: int = typer.Option(500, help="Train prompts (the first N of the task's train stream at --seed)."),
    samples: int = typer.Option(4, help="Model samples per prompt (0: the task's edits only)."),
    per_prompt: int = typer.Option(4, help="Pairs drawn per prompt."),
    temperature: float = typer.Option(1.0, help="Sampling temperature of the model's samples."),
    seed: int = typer.Option(0),
) -> None:
    """Judge candidates per prompt and write preference pairs."""
    from ..loop.checkpoint import atomic_write_text
    from ..data.preferences import judged_pairs, pair_lines
    from ..models import load_model
    from ..tasks import get_task

    if prompts < 1 or samples < 0 or per_prompt < 1 or temperature <= 0:
        raise UserError(
            f"rm pairs: need --prompts >= 1, --samples >= 0, --per-prompt >= 1 and --temperature > 0; "
            f"got {prompts}, {samples}, {per_prompt}, {temperature}"
        )
    the_task = get_task(task, **parse_options(task_opt))
    quiet_transformers()
    mdl, tok = load_model(model)
    with progress() as bar:
        bar.add_task(f"judging {prompts} prompts", total=None, info="")
        pairs = judged_pairs(mdl, tok, the_task, prompts, samples, per_prompt, temperature, seed)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, pair_lines(pairs))
    console.print(
        summary_table(f"{len(pairs)} pairs on {the_task.name} -> {out}", {"prompts": prompts, "pairs": len(pairs)})
    )


@rm_app.command("train")
def train_cmd(
    pairs: Path = typer.Option(..., help="Preference pairs JSONL: prompt, chosen, rejected (and margin)."),
    model: Optional[str] = typer.Option(None, help="Causal LM to start from (default: the shipped base)."),
    out: Path = typer.Option(..., help="The reward model directory to write."),
    steps: int = typer.Option(300),
    batch_size: int = typer.Option(32, help="Pairs per step."),
    lr: float = typer.Option(1e-4),
    eval_frac: float = typer.Option(0.1, help="Share of prompts held out for the pairwise accuracy."),
    margin: float = typer.Option(0.0, help="Added to every pair's margin: -log sigmoid(r_c - r_r - margin)."),
    center_coef: float = typer.Option(0.0, help="Reward centring coef * mean((r_c + r_r)^2) (TRL; 0: off)."),
    max_length: int = typer.Option(1024, help="Tokens per scored text (a longer one keeps its end)."),
    seed: int = typer.Option(0),
) -> None:
    """Train a Bradley-Terry reward model; report its held-out pairwise accuracy."""
    from ..data.preferences import read_pairs
    from ..loop.rm_train import RMConfig, train_rm

    bad = {k: v for k, v in {"--steps": steps, "--batch-size": batch_size, "--max-length": max_length}.items() if v < 1}
    if bad or lr <= 0 or not 0 <= eval_frac < 1 or center_coef < 0:
        raise UserError(
            f"rm train: need --steps, --batch-size, --max-length >= 1, --lr > 0, 0 <= --eval-frac < 1 and "
            f"--center-coef >= 0; got {bad or ''} lr={lr} eval_frac={eval_frac} center_coef={center_coef}"
        )
    rows = read_pairs(pairs)
    quiet_transformers()
    cfg = RMConfig(
        model=model,
        steps=steps,
        batch_size=batch_size,
        lr=lr,
        eval_frac=eval_frac,
        margin=margin,
        center_coef=center_coef,
        max_length=max_length,
        seed=seed,
    )
    with progress() as bar:
        job = bar.add_task("training the reward model", total=steps, info="")
        result = train_rm(
            rows,
            cfg,
            out,
            log=lambda m: bar.update(
                job, completed=m["step"], info=f"loss {m['rm/loss']:.3f} acc {m['rm/accuracy']:.2f}"
            ),
        )
    shown = {k: v for k, v in result.items() if k != "config"}
    console.print(summary_table(f"reward model -> {out}", shown))
