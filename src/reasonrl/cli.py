"""The ``reasonrl`` command line: train, eval, recipes, keys, tasks, models, pretrain, compare.

A user error (:class:`~reasonrl.errors.UserError`, a missing file, a malformed config file) is
printed as one message on stderr with exit status 2; ``reasonrl --debug ...`` or
``REASONRL_DEBUG=1`` shows its traceback too. Any other exception is a bug and keeps its traceback.
The entry point is :func:`main` (``reasonrl`` and ``python -m reasonrl.cli`` alike).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, List, Optional

import typer
import yaml
from rich.table import Table

from .commands.common import checked_run as _checked_run
from .commands.common import console, parse_options
from .commands.common import progress as _progress
from .commands.common import quiet_transformers as _quiet_transformers
from .commands.common import summary_table as _summary_table
from .commands.evaluate import compare_cmd, eval_cmd
from .commands.audit import audit_cmd
from .commands.report import report_cmd
from .commands.keys import keys_cmd
from .commands.drafts import drafts_app
from .commands.diagnose import diagnose_app
from .commands.rm import rm_app
from .commands.disa import disa_app
from .commands.models import models_app
from .errors import UserError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=False,
    pretty_exceptions_show_locals=False,
    help="RL post-training for reasoning, composable and CPU-first.",
)
USER_ERRORS = (UserError, FileNotFoundError, yaml.YAMLError)  # what a user can fix; the rest are bugs
_debug = {"on": False}  # set by --debug (the app callback runs before the command)


@app.callback()
def _root(
    debug: bool = typer.Option(
        False, "--debug", help="Show the traceback of user errors too (or set REASONRL_DEBUG=1)."
    ),
) -> None:
    _debug["on"] = debug


def debug_requested() -> bool:
    return _debug["on"] or os.environ.get("REASONRL_DEBUG", "").strip().lower() not in ("", "0", "false", "no")


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; a user error becomes one line on stderr and exit status 2 (the usage-error code)."""
    try:
        app(args=argv)
    except USER_ERRORS as err:
        if debug_requested():
            raise
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None


@app.command("tasks")
def tasks_cmd(as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table.")) -> None:
    """Built-in tasks and every reasoning-gym dataset, with their options."""
    from .tasks import list_tasks

    rows = list_tasks()
    if as_json:
        print(json.dumps(rows, indent=2, default=str))
        return
    table = Table(
        title=f"{len(rows)} tasks (plus any .jsonl / .parquet file, HF dataset directory or hf:<repo>[:<config>])"
    )
    for col in ("name", "kind", "options"):
        table.add_column(col)
    for row in rows:
        table.add_row(row["name"], row["kind"], ", ".join(f"{k}={v}" for k, v in row["options"].items()))
    console.print(table)


@app.command("pretrain")
def pretrain_cmd(
    task: Optional[str] = typer.Option(None, help="Task whose demonstrations to learn (default: arithmetic)."),
    task_opt: Optional[List[str]] = typer.Option(None, "--task-opt", help="Task option key=value (repeatable)."),
    size: str = typer.Option("small", help="Size of a fresh tiny reasoner: tiny | small."),
    arch: str = typer.Option(
        "causal",
        help="causal: the autoregressive reasoner; diffusion: a masked-diffusion LM "
        "(LLaDA's masked-token objective; reasonrl.models.diffusion).",
    ),
    canvas: Optional[int] = typer.Option(
        None,
        help="diffusion: canvas positions (default: the task's budget, rounded "
        "up to a multiple of the 8-position block).",
    ),
    model: Optional[str] = typer.Option(None, help="Start from this model directory instead of a fresh tiny one."),
    steps: int = typer.Option(400, help="Optimiser steps (the cosine schedule spans them)."),
    seconds: Optional[float] = typer.Option(None, help="Wall-clock budget instead (constant lr after warmup)."),
    batch_size: int = typer.Option(64),
    lr: float = typer.Option(1e-3),
    seed: int = typer.Option(0),
    eval_every: int = typer.Option(50, help="Greedy held-out eval every N steps (0: only at the end)."),
    eval_problems: int = typer.Option(200),
    until_pass: Optional[float] = typer.Option(None, help="Stop once held-out greedy pass@1 reaches this."),
    half: bool = typer.Option(False, help="Save weights in float16 (halves the files; loads back as float32)."),
    out: Path = typer.Option(Path("runs/pretrain"), help="Output HF model directory."),
    contexts: Optional[str] = typer.Option(
        None,
        help="Self-teacher contexts to mix in: solution,hint,correction,redirect "
        "(or all); the model learns to read them (reasonrl.loop.warmstart).",
    ),
    context_rate: float = typer.Option(0.5, help="Fraction of training items that carry a context (with --contexts)."),
    curriculum: str = typer.Option(
        "none",
        help="none: the task's order; reverse_ppl (SU-01): demonstrations by "
        "descending perplexity under the starting model, scored once, no shuffling.",
    ),
) -> None:
    """Supervised warm start on a task's demonstrations; writes an ordinary HF model directory."""
    import torch

    from .models import load_model, save_model
    from .loop.sft import SFTConfig, sft
    from .tasks import get_task
    from .config.validate import OPTION_RULES, check_options

    check_options(
        {
            "--steps": steps,
            "--seconds": seconds,
            "--batch-size": batch_size,
            "--lr": lr,
            "--seed": seed,
            "--eval-every": eval_every,
            "--eval-problems": eval_problems,
            "--until-pass": until_pass,
        },
        OPTION_RULES["pretrain"],
    )
    from .data.curriculum import CURRICULA

    if curriculum not in CURRICULA:
        raise UserError(f"--curriculum {curriculum!r} is not one of {', '.join(CURRICULA)}")
    _quiet_transformers()
    the_task = get_task(task, **parse_options(task_opt))
    if contexts:  # the self-teacher contexts mixed into the demonstrations
        from .loop.warmstart import context_mix

        the_task = context_mix(the_task, contexts, context_rate, seed)
    if arch not in ("causal", "diffusion"):
        raise UserError(f"--arch {arch!r} is not one of causal, diffusion")
    mdl, tok = load_model(model or (f"tiny:{size}" if arch == "causal" else f"diffusion:{size}"))
    if arch == "diffusion" and model is None:  # a fresh canvas: the task's budget, whole blocks
        from .eval.runner import task_max_new_tokens
        from .models.diffusion import set_canvas

        set_canvas(mdl, canvas or task_max_new_tokens(the_task))
    cfg = SFTConfig(
        steps=steps,
        seconds=seconds,
        batch_size=batch_size,
        lr=lr,
        seed=seed,
        eval_every=eval_every or steps,
        eval_problems=eval_problems,
        until_pass=until_pass,
        curriculum=curriculum,
    )
    with _progress() as bar:
        job = bar.add_task("pretraining", total=steps, info="")

        def log(m: dict) -> None:
            info = f"loss {m['loss']:.3f}" + (f"  pass@1 {m['eval/pass@1']:.3f}" if "eval/pass@1" in m else "")
            bar.update(job, completed=m["step"], info=info)

        result = sft(mdl, tok, the_task, cfg, log=log)
    save_model(mdl, tok, out, dtype=torch.float16 if half else None)
    console.print(_summary_table(f"pretrained on {the_task.name} -> {out}", result))


@app.command("train", context_settings={"allow_extra_args": False})
def train_cmd(
    args: Optional[List[str]] = typer.Argument(
        None, help="[CONFIG.yaml] [key=value ...] e.g. optim.lr=1e-5 loss.clip_high=0.28"
    ),
    recipe: Optional[str] = typer.Option(None, help="Recipe name (`reasonrl recipes`); default grpo."),
    model: Optional[str] = typer.Option(None, help="HF model directory or hub id (default: the shipped base)."),
    task: Optional[str] = typer.Option(None, help="Task (default: arithmetic)."),
    task_opt: Optional[List[str]] = typer.Option(
        None, "--task-opt", help="Task option key=value (repeatable); the same as task_options.key=value."
    ),
    steps: Optional[int] = typer.Option(None, help="Training steps."),
    out: Optional[Path] = typer.Option(None, help="Run folder (default: runs/<recipe>-<time>)."),
    resume: bool = typer.Option(False, "--resume", help="Continue the run in --out from its latest checkpoint."),
    nproc: int = typer.Option(1, "--nproc", min=1, help="Data-parallel processes on this machine (starts torchrun)."),
    reward: Optional[List[str]] = typer.Option(
        None,
        "--reward",
        help="path/to/file.py:fn added to the task's verifier "
        "(repeatable; TRL's reward_funcs); weights: reward_weights=[1,0.5,...].",
    ),
) -> None:
    """RL-train a model on a task with a recipe; with no arguments: grpo on arithmetic from the shipped base.
    `reasonrl keys` lists every key=value with its type, default and help."""
    from .dist.group import launched_by_torchrun
    from .config.validate import check_inputs

    args = [*(args or []), *(f"task_options.{pair}" for pair in task_opt or [])]
    args += [f"reward_funcs={json.dumps(list(reward))}"] if reward else []
    cfg, the_recipe = _checked_run(args, recipe, model, task, steps, out, resume)
    check_inputs(cfg, the_recipe)  # all before the heavy imports (transformers) and before any model is loaded

    from .loop.run import check_fresh, run_dir_for, train_run
    from .loop.trainer import ZERO_LOSS_HINT

    check_fresh(run_dir_for(cfg, the_recipe), resume)
    if nproc > 1 and not launched_by_torchrun():
        from .dist.launch import launch

        given = {"--recipe": recipe, "--model": model, "--task": task, "--steps": steps, "--out": out}
        child = ["train", *(args or []), *[f"{k}={v}" for k, v in given.items() if v is not None]]  # --reward: in args
        raise SystemExit(launch(nproc, child + (["--resume"] if resume else [])))
    rank0 = int(os.environ.get("RANK", "0")) == 0  # under torchrun, rank 0 alone prints
    _quiet_transformers()
    if the_recipe.optim.mu == 1 and the_recipe.kl.coef == 0 and rank0:
        console.print(f"[dim]note: {ZERO_LOSS_HINT}[/dim]")
    with _progress(disable=not rank0) as bar:
        job = bar.add_task("starting", total=cfg.steps, info="")
        on_phase, on_eval = _phase_bars(bar, job)

        def on_step(m: dict) -> None:
            info = f"reward {m['reward/mean']:.3f}  acc {m['accuracy']:.3f}  len {m['length/mean']:.1f}"
            if "eval/pass@1" in m:
                info += f"  held-out pass@1 {m['eval/pass@1']:.3f}"
            bar.update(job, completed=m["step"], info=info, description="training")

        summary = train_run(
            cfg,
            the_recipe,
            resume=resume,
            on_step=on_step,
            on_phase=on_phase,
            on_note=bar.console.print,
            on_eval=on_eval,
        )
    if rank0:
        console.print(_before_after(summary))


def _phase_bars(bar, job):
    """``on_phase`` and ``on_eval`` for train_run: the phase names the main bar, and each evaluation (before,
    after) gets a bar of its own, completions done of all with an ETA (issue 46)."""
    evals: dict[str, Any] = {}

    def on_phase(s: str) -> None:
        bar.update(job, description=s)
        if s.startswith("evaluating"):
            evals["job"] = bar.add_task(s, total=None, info="completions")

    def on_eval(done: int, total: int) -> None:
        if "job" in evals:
            bar.update(evals["job"], completed=done, total=total)

    return on_phase, on_eval


def _before_after(summary: dict[str, Any]) -> Table:
    before, after = summary.get("before") or {}, summary.get("after") or {}
    table = Table(
        title=f"{summary['recipe']} on {summary['task']}: {summary['steps']} steps in "
        f"{summary['train_seconds']:.0f} s -> {summary['run_dir']}"
    )
    for col in ("metric", "before", "after", "change"):
        table.add_column(col, justify="left" if col == "metric" else "right")
    for key in after or before:
        b, a = before.get(key), after.get(key)
        change = f"{a - b:+.4f}" if isinstance(a, float) and isinstance(b, float) else ""
        table.add_row(key, _fmt(b), _fmt(a), change)
    return table


def _fmt(v: Any) -> str:
    return "" if v is None else f"{v:.4f}" if isinstance(v, float) else str(v)


@app.command("recipes")
def recipes_cmd(
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    parts: bool = typer.Option(
        False, "--parts", help="The parts instead: the order their hooks run in (declared by each part: PHASE, AFTER)."
    ),
) -> None:
    """Every recipe with its paper, its parts, the order of its hooks and every inferred choice."""
    from .parts import PART_TYPES, HOOKS
    from .parts.registry import declared_order
    from .recipes import RECIPES

    if parts:
        order = declared_order(PART_TYPES)
        if as_json:
            print(json.dumps(order, indent=2))
            return
        table = Table(title=f"{len(order)} parts, in the order their hooks run")
        for col in ("key", "part", "phase", "after"):
            table.add_column(col)
        for p in order:
            table.add_row(p["key"], p["part"], p["phase"], ", ".join(p["after"]))
        console.print(table)
        return
    rows = [
        {**r.describe(), "hooks": {h: [k for k, _ in r.hooked(h)] for h in HOOKS if r.hooked(h)}}
        for r in RECIPES.values()
    ]
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    table = Table(title=f"{len(rows)} recipes")
    for col in ("name", "paper", "parts", "inferred choices"):
        table.add_column(col)
    for r in rows:
        loss = r["loss"]  # None: no policy loss (a distribution-matching recipe's part is the objective)
        policy = (
            "loss=none"
            if loss is None
            else f"ratio={loss['ratio']} agg={loss['agg']} clip=({loss['clip_low']},{loss['clip_high']})"
        )
        parts_text = f"adv={r['advantage']['estimator']} {policy} kl={r['kl']['coef']} G={r['group_size']}"
        table.add_row(r["name"], r["paper"], parts_text, "\n".join(f"- {i}" for i in r["inferred"]))
    console.print(table)


app.command("keys")(keys_cmd)
app.command("eval")(eval_cmd)
app.command("compare")(compare_cmd)
app.command("audit")(audit_cmd)
app.command("report")(report_cmd)
app.add_typer(drafts_app, name="drafts")
app.add_typer(diagnose_app, name="diagnose")
app.add_typer(rm_app, name="rm")
app.add_typer(disa_app, name="disa")
app.add_typer(models_app, name="models")


if __name__ == "__main__":  # pragma: no cover - `python -m reasonrl.cli`
    main()
