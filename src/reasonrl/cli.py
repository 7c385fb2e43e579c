"""The ``reasonrl`` command line: train, eval, recipes, tasks, pretrain, compare.

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
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from .errors import UserError

app = typer.Typer(add_completion=False, no_args_is_help=False, pretty_exceptions_show_locals=False, help="RL post-training for reasoning, composable and CPU-first.")
console = Console()
USER_ERRORS = (UserError, FileNotFoundError, yaml.YAMLError)  # what a user can fix; the rest are bugs
_debug = {"on": False}  # set by --debug (the app callback runs before the command)


@app.callback()
def _root(debug: bool = typer.Option(False, "--debug", help="Show the traceback of user errors too (or set REASONRL_DEBUG=1).")) -> None:
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


def _quiet_transformers() -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


def parse_value(text: str) -> Any:
    """A CLI value as YAML (``2`` -> 2, ``true`` -> True, ``[a,b]`` -> list) except where YAML would
    read plain text as structure (``-`` is a list item to YAML, an operator here)."""
    try:
        parsed = yaml.safe_load(text) if text else ""
    except yaml.YAMLError as err:
        raise UserError(f"cannot read the value {text!r} ({getattr(err, 'problem', None) or err}); quote it or fix it") from err
    structured = isinstance(parsed, (dict, list)) or parsed is None
    return parsed if not structured or text.lstrip().startswith(("[", "{", "null", "~")) else text


def parse_options(pairs: list[str] | None) -> dict[str, Any]:
    """``["max_digits=2", "ops=+-"]`` -> {"max_digits": 2, "ops": "+-"}."""
    out: dict[str, Any] = {}
    for pair in pairs or []:
        if "=" not in pair:
            raise UserError(f"expected key=value, got {pair!r}")
        key, value = pair.split("=", 1)
        out[key.strip()] = parse_value(value)
    return out


def _progress(disable: bool = False) -> Progress:
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    TextColumn("{task.fields[info]}"), console=console, transient=False, disable=disable)


def _summary_table(title: str, summary: dict[str, Any]) -> Table:
    table = Table(title=title)
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in summary.items():
        table.add_row(key, f"{value:.4f}" if isinstance(value, float) else str(value))
    return table


@app.command("eval")
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

    from .tasks import get_task
    from .validate import OPTION_RULES, check_options

    check_options({"--n": n, "--k": k, "--temperature": temperature, "--max-new-tokens": max_new_tokens, "--seed": seed},
                  OPTION_RULES["eval"])
    the_task = get_task(task, **parse_options(task_opt))  # cheap, and it validates the data: before the model

    from .eval.paired import load_item_results, paired_by_key
    from .eval.runner import EvalConfig, evaluate_model, write_samples

    other = load_item_results(against) if against else None  # a bad file fails before the model loads
    from .models import load_model

    _quiet_transformers()
    torch.manual_seed(seed)
    mdl, tok = load_model(model)
    cfg = EvalConfig(n_problems=n, k=k, temperature=temperature, max_new_tokens=max_new_tokens, seed=seed)
    with _progress() as bar:
        job = bar.add_task("evaluating", total=n * (1 + k), info="")
        summary, records = evaluate_model(mdl, tok, the_task, cfg, progress=lambda m: bar.advance(job, m))
    console.print(_summary_table(f"{model or 'base'} on {the_task.name}", summary))
    if other is not None:
        mine = {r["key"]: r["correct"] for r in records if r["mode"] == "greedy"}
        summary["against"] = {"file": str(against), **paired_by_key(mine, other)}
        console.print(_paired_table(f"{model or 'base'} against {against}", summary["against"]))
    if json_path:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(summary, indent=2))
    if samples:
        write_samples(records, samples)


@app.command("tasks")
def tasks_cmd(as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table.")) -> None:
    """Built-in tasks and every reasoning-gym dataset, with their options."""
    from .tasks import list_tasks

    rows = list_tasks()
    if as_json:
        print(json.dumps(rows, indent=2, default=str))
        return
    table = Table(title=f"{len(rows)} tasks (plus any .jsonl / .parquet file or HF dataset directory)")
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
    contexts: Optional[str] = typer.Option(None, help="Self-teacher contexts to mix in: solution,hint,correction,redirect "
                                           "(or all); the model learns to read them (reasonrl.warmstart)."),
    context_rate: float = typer.Option(0.5, help="Fraction of training items that carry a context (with --contexts)."),
) -> None:
    """Supervised warm start on a task's demonstrations; writes an ordinary HF model directory."""
    import torch

    from .models import load_model, save_model
    from .sft import SFTConfig, sft
    from .tasks import get_task
    from .validate import OPTION_RULES, check_options

    check_options({"--steps": steps, "--seconds": seconds, "--batch-size": batch_size, "--lr": lr, "--seed": seed,
                   "--eval-every": eval_every, "--eval-problems": eval_problems, "--until-pass": until_pass},
                  OPTION_RULES["pretrain"])
    _quiet_transformers()
    the_task = get_task(task, **parse_options(task_opt))
    if contexts:  # the self-teacher contexts mixed into the demonstrations
        from .warmstart import context_mix
        the_task = context_mix(the_task, contexts, context_rate, seed)
    mdl, tok = load_model(model or f"tiny:{size}")
    cfg = SFTConfig(steps=steps, seconds=seconds, batch_size=batch_size, lr=lr, seed=seed,
                    eval_every=eval_every or steps, eval_problems=eval_problems, until_pass=until_pass)
    with _progress() as bar:
        job = bar.add_task("pretraining", total=steps, info="")

        def log(m: dict) -> None:
            info = f"loss {m['loss']:.3f}" + (f"  pass@1 {m['eval/pass@1']:.3f}" if "eval/pass@1" in m else "")
            bar.update(job, completed=m["step"], info=info)

        result = sft(mdl, tok, the_task, cfg, log=log)
    save_model(mdl, tok, out, dtype=torch.float16 if half else None)
    console.print(_summary_table(f"pretrained on {the_task.name} -> {out}", result))


def _train_config(args: list[str] | None, recipe: str | None, model: str | None, task: str | None,
                  steps: int | None, out: Path | None, resume: bool):
    """YAML file (a run folder's config.yaml on --resume) < key=value pairs < explicit options."""
    from .config import dotted_to_nested, load_yaml, merge, split_config

    files = [a for a in args or [] if a.endswith((".yaml", ".yml"))]
    pairs = [a for a in args or [] if a not in files]
    if len(files) > 1:
        raise UserError(f"one config file at most, got {files}")
    raw: dict[str, Any] = load_yaml(files[0]) if files else {}
    if resume:
        if out is None:
            raise UserError("--resume needs --out DIR (the run folder to continue)")
        if (out / "config.yaml").exists():
            raw = merge(load_yaml(out / "config.yaml"), raw)
    raw = merge(raw, dotted_to_nested(parse_options(pairs)))
    explicit = {"recipe": recipe, "model": model, "task": task, "steps": steps, "out": str(out) if out else None}
    raw = merge(raw, {k: v for k, v in explicit.items() if v is not None})
    return split_config(raw)


def _checked_run(args: list[str] | None, recipe: str | None, model: str | None, task: str | None,
                 steps: int | None, out: Path | None, resume: bool):
    """(run config, recipe with the overrides applied), every knob checked (:mod:`reasonrl.validate`)."""
    from .config import apply_overrides
    from .recipes import get_recipe
    from .validate import check_run

    cfg, overrides = _train_config(args, recipe, model, task, steps, out, resume)
    the_recipe = apply_overrides(get_recipe(cfg.recipe), overrides)
    check_run(cfg, the_recipe)
    return cfg, the_recipe


@app.command("train", context_settings={"allow_extra_args": False})
def train_cmd(
    args: Optional[List[str]] = typer.Argument(None, help="[CONFIG.yaml] [key=value ...] e.g. optim.lr=1e-5 loss.clip_high=0.28"),
    recipe: Optional[str] = typer.Option(None, help="Recipe name (`reasonrl recipes`); default grpo."),
    model: Optional[str] = typer.Option(None, help="HF model directory or hub id (default: the shipped base)."),
    task: Optional[str] = typer.Option(None, help="Task (default: arithmetic)."),
    steps: Optional[int] = typer.Option(None, help="Training steps."),
    out: Optional[Path] = typer.Option(None, help="Run folder (default: runs/<recipe>-<time>)."),
    resume: bool = typer.Option(False, "--resume", help="Continue the run in --out from its latest checkpoint."),
    nproc: int = typer.Option(1, "--nproc", min=1, help="Data-parallel processes on this machine (starts torchrun)."),
) -> None:
    """RL-train a model on a task with a recipe; with no arguments: grpo on arithmetic from the shipped base."""
    from .dist.group import launched_by_torchrun
    from .validate import check_inputs

    cfg, the_recipe = _checked_run(args, recipe, model, task, steps, out, resume)
    check_inputs(cfg)  # all before the heavy imports (transformers) and before any model is loaded

    from .run import check_fresh, run_dir_for, train_run
    from .trainer import ZERO_LOSS_HINT

    check_fresh(run_dir_for(cfg, the_recipe), resume)
    if nproc > 1 and not launched_by_torchrun():
        from .dist.launch import launch

        given = {"--recipe": recipe, "--model": model, "--task": task, "--steps": steps, "--out": out}
        child = ["train", *(args or []), *[f"{k}={v}" for k, v in given.items() if v is not None]]
        raise SystemExit(launch(nproc, child + (["--resume"] if resume else [])))
    rank0 = int(os.environ.get("RANK", "0")) == 0  # under torchrun, rank 0 alone prints
    _quiet_transformers()
    if the_recipe.optim.mu == 1 and the_recipe.kl.coef == 0 and rank0:
        console.print(f"[dim]note: {ZERO_LOSS_HINT}[/dim]")
    with _progress(disable=not rank0) as bar:
        job = bar.add_task("starting", total=cfg.steps, info="")

        def on_step(m: dict) -> None:
            info = f"reward {m['reward/mean']:.3f}  acc {m['accuracy']:.3f}  len {m['length/mean']:.1f}"
            if "eval/pass@1" in m:
                info += f"  held-out pass@1 {m['eval/pass@1']:.3f}"
            bar.update(job, completed=m["step"], info=info, description="training")

        summary = train_run(cfg, the_recipe, resume=resume, on_step=on_step,
                            on_phase=lambda s: bar.update(job, description=s), on_note=bar.console.print)
    if rank0:
        console.print(_before_after(summary))


def _before_after(summary: dict[str, Any]) -> Table:
    before, after = summary.get("before") or {}, summary.get("after") or {}
    table = Table(title=f"{summary['recipe']} on {summary['task']}: {summary['steps']} steps in "
                        f"{summary['train_seconds']:.0f} s -> {summary['run_dir']}")
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
def recipes_cmd(as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table.")) -> None:
    """Every recipe with its paper, its parts and every inferred choice."""
    from .recipes import RECIPES

    rows = [r.describe() for r in RECIPES.values()]
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    table = Table(title=f"{len(rows)} recipes")
    for col in ("name", "paper", "parts", "inferred choices"):
        table.add_column(col)
    for r in rows:
        parts = f"adv={r['advantage']['estimator']} ratio={r['loss']['ratio']} agg={r['loss']['agg']} " \
                f"clip=({r['loss']['clip_low']},{r['loss']['clip_high']}) kl={r['kl']['coef']} G={r['group_size']}"
        table.add_row(r["name"], r["paper"], parts, "\n".join(f"- {i}" for i in r["inferred"]))
    console.print(table)


@app.command("compare")
def compare_cmd(
    recipes: str = typer.Option(..., help="Comma-separated recipe names, each optionally with its own overrides "
                                "(name:key=value:...); p-values are against the first."),
    seeds: int = typer.Option(3, help="Seeds per recipe."),
    steps: int = typer.Option(60, help="Training steps of every run."),
    task: Optional[str] = typer.Option(None, help="Task (default: arithmetic)."),
    out: Path = typer.Option(Path("runs/compare"), help="Folder for the runs, compare.json and compare.png."),
    args: Optional[List[str]] = typer.Argument(None, help="key=value overrides given to every run."),
) -> None:
    """Train each recipe on each seed (separate processes) and compare held-out accuracy."""
    from .compare import compare, parse_variant
    from .validate import check_inputs

    names = [r.strip() for r in recipes.split(",") if r.strip()]
    if not names or seeds < 1:
        raise UserError(f"compare needs at least one recipe and --seeds >= 1, got --recipes {recipes!r} --seeds {seeds}")
    inputs = {}
    for entry in names:  # fail before any run on an unknown name, a malformed override or a bad value
        name, own = parse_variant(entry)
        cfg, _ = _checked_run([*(args or []), *own], name, None, task, steps, None, False)
        inputs[repr((cfg.model, cfg.task, cfg.task_options))] = cfg
    for cfg in inputs.values():  # each distinct task/model once
        check_inputs(cfg)
    with _progress() as bar:
        job = bar.add_task("comparing", total=len(names) * seeds, info="")

        def on_run(res) -> None:
            info = f"{res.recipe} seed {res.seed}: " + (f"pass@1 {res.final:.3f}" if res.ok else f"FAILED {res.error[:60]}")
            bar.advance(job)
            bar.update(job, info=info)

        report = compare(names, seeds, steps, out, task=task, extra=list(args or []), on_run=on_run)
    console.print(_compare_table(report, out))


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


if __name__ == "__main__":  # pragma: no cover - `python -m reasonrl.cli`
    main()
