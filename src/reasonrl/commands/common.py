"""What every command shares: the console, progress bars, summary tables, ``key=value`` parsing and
the run configuration built from a YAML file, ``key=value`` pairs and explicit options."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from ..errors import UserError

console = Console()


def quiet_transformers() -> None:
    """transformers' own bars (loading and writing shards) off, the hub's download bars on (issue 46): transformers'
    ``disable_progress_bar`` turns off huggingface_hub's too, and a multi-GB model then downloads silently."""
    from huggingface_hub import utils as hub_utils
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    hub_utils.enable_progress_bars()


def parse_value(text: str) -> Any:
    """A CLI value as YAML (``2`` -> 2, ``true`` -> True, ``[a,b]`` -> list) except where YAML would
    read plain text as structure (``-`` is a list item to YAML, an operator here)."""
    try:
        parsed = yaml.safe_load(text) if text else ""
    except yaml.YAMLError as err:
        raise UserError(
            f"cannot read the value {text!r} ({getattr(err, 'problem', None) or err}); quote it or fix it"
        ) from err
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


def progress(disable: bool = False) -> Progress:
    # elapsed and remaining (rich's ETA from the rate so far): every long phase says how long it has left (issue 46)
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        TextColumn("{task.fields[info]}"),
        console=console,
        transient=False,
        disable=disable,
    )


def summary_table(title: str, summary: dict[str, Any]) -> Table:
    table = Table(title=title)
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in summary.items():
        table.add_row(key, f"{value:.4f}" if isinstance(value, float) else str(value))
    return table


def train_config(
    args: list[str] | None,
    recipe: str | None,
    model: str | None,
    task: str | None,
    steps: int | None,
    out: Path | None,
    resume: bool,
):
    """YAML file (a run folder's config.yaml on --resume) < key=value pairs < explicit options."""
    from ..config.train import dotted_to_nested, load_yaml, merge, split_config

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
    return split_config(merge(recipe_run_defaults(raw.get("recipe", "grpo")), raw))


def recipe_run_defaults(name: Any) -> dict[str, Any]:
    """The run settings a recipe needs (``Recipe.run_defaults``, e.g. ``data.pool`` for LZE), nested, for
    the config to override; an unknown name gives none (the recipe check names it)."""
    from ..config.train import dotted_to_nested
    from ..recipes import RECIPES

    recipe = RECIPES.get(name) if isinstance(name, str) else None
    return dotted_to_nested(dict(recipe.run_defaults)) if recipe is not None else {}


def checked_run(
    args: list[str] | None,
    recipe: str | None,
    model: str | None,
    task: str | None,
    steps: int | None,
    out: Path | None,
    resume: bool,
):
    """(run config, recipe with the overrides applied), every knob checked (:mod:`reasonrl.config.validate`)."""
    from ..config.train import apply_overrides
    from ..recipes import get_recipe
    from ..config.validate import check_run

    cfg, overrides = train_config(args, recipe, model, task, steps, out, resume)
    the_recipe = apply_overrides(get_recipe(cfg.recipe), overrides)
    check_run(cfg, the_recipe)
    return cfg, the_recipe
