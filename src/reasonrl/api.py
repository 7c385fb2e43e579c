"""``reasonrl.train(model, train_dataset, reward_funcs, ...)``: a run from Python objects, as TRL's
``GRPOTrainer(model, reward_funcs, train_dataset=...)`` takes them (issue 46).

It turns the objects into what the command line's run takes, then calls :func:`reasonrl.loop.run.train_run`
(the lower layer, unchanged):

* ``model``: a hub id or folder (as ``--model``), or a loaded ``PreTrainedModel`` with its tokenizer as
  ``processing_class``: saved once to ``<run folder>/start_model`` (a run reloads its model by path, so that
  ``--resume`` and the before/after evaluation see the same weights);
* ``train_dataset`` / ``eval_dataset``: a task name or file (as ``--task``), or a ``datasets.Dataset`` or a list
  of rows (dicts): written to ``<run folder>/data/{train,test}.jsonl`` and read as a file task (columns
  ``prompt`` and ``answer`` unless ``task_options`` say otherwise);
* ``reward_funcs``: one or a list of callables (TRL's contract: ``fn(prompts, completions, **kwargs)`` returning
  one float or None per completion) or ``"path.py:fn"`` strings, added to the task's verifier with
  ``reward_weights`` (the verifier's weight first);
* ``**keys``: run keys as keyword arguments (``steps=2``, ``eval_every=0``); a dotted key as a dict
  (``optim={"lr": 1e-5}``) or through ``**{"optim.lr": 1e-5}``. Every key is checked as on the command line,
  before anything loads.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any, Callable, NamedTuple, Sequence

from .config.train import TrainConfig, apply_overrides, dotted_to_nested, merge, split_config
from .config.validate import check_inputs, check_run
from .errors import UserError
from .loop.run import train_run, with_rewards
from .parts import Recipe
from .recipes import RECIPES, get_recipe


class TrainResult(NamedTuple):
    """What :func:`train` returns: the run's summary (``summary.json``: before/after scores, steps, seconds)
    and its folder (``metrics.jsonl``, ``final/`` the trained model, ...)."""

    summary: dict[str, Any]
    folder: Path


def train(
    model: Any,
    train_dataset: Any,
    reward_funcs: Any = None,
    *,
    recipe: str = "grpo",
    processing_class: Any = None,
    eval_dataset: Any = None,
    reward_weights: Sequence[float] | None = None,
    out: str | Path | None = None,
    **keys: Any,
) -> TrainResult:
    """Train ``model`` on ``train_dataset`` with ``recipe`` (see the module docs for what each argument takes)."""
    cfg, the_recipe = prepare(
        model,
        train_dataset,
        reward_funcs,
        recipe=recipe,
        processing_class=processing_class,
        eval_dataset=eval_dataset,
        reward_weights=reward_weights,
        out=out,
        **keys,
    )
    summary = train_run(cfg, the_recipe, on_note=print)
    return TrainResult(summary, Path(summary["run_dir"]))


def prepare(
    model: Any,
    train_dataset: Any,
    reward_funcs: Any = None,
    *,
    recipe: str = "grpo",
    processing_class: Any = None,
    eval_dataset: Any = None,
    reward_weights: Sequence[float] | None = None,
    out: str | Path | None = None,
    **keys: Any,
) -> tuple[TrainConfig, Recipe]:
    """:func:`train`'s run config and recipe, every check done (what ``reasonrl train`` builds from its arguments):
    the run folder then holds the data files and the saved model, nothing else."""
    if recipe not in RECIPES:
        get_recipe(recipe)  # raises the UserError naming the closest recipe
    folder = Path(out) if out is not None else Path(f"runs/{recipe}-{time.strftime('%Y%m%d-%H%M%S')}")
    raw = merge(dotted_to_nested(dict(RECIPES[recipe].run_defaults)), _nested(keys))
    cfg, overrides = split_config(merge(raw, {"recipe": recipe, "out": str(folder)}))  # keys checked before writing
    the_recipe = with_rewards(apply_overrides(get_recipe(recipe), overrides), _funcs(reward_funcs), reward_weights)
    check_run(cfg, the_recipe)
    task, options = _task(train_dataset, eval_dataset, folder, dict(cfg.task_options), cfg.task)
    cfg = dataclasses.replace(
        cfg, task=task, task_options=options, model=_model_name(model, processing_class, folder, cfg.model)
    )
    check_inputs(cfg, the_recipe)  # the task's rows and the model name, before the model loads
    return cfg, the_recipe


def _nested(keys: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments as the config's nested mapping: ``optim={"lr": 1e-5}`` and ``**{"optim.lr": 1e-5}``."""
    out: dict[str, Any] = {}
    for key, value in keys.items():
        out = merge(out, dotted_to_nested({key: value}))
    return out


def _funcs(reward_funcs: Any) -> list[Callable[..., Any] | str]:
    if reward_funcs is None:
        return []
    funcs = list(reward_funcs) if isinstance(reward_funcs, (list, tuple)) else [reward_funcs]
    for fn in funcs:
        if not (callable(fn) or isinstance(fn, str)):
            raise UserError(f"reward_funcs: {fn!r} is neither a function nor 'path/to/file.py:function'")
    return funcs


def _model_name(model: Any, processing_class: Any, folder: Path, default: str | None) -> str | None:
    """A name or folder as it is; a loaded model saved (with its tokenizer) to ``folder/start_model``; None: the
    recipe's own model (``run_defaults``: diffu_grpo's) or the shipped base."""
    if model is None or isinstance(model, (str, Path)):
        if processing_class is not None:
            raise UserError(
                "processing_class goes with a loaded model; with a model name or folder the tokenizer is loaded from it"
            )
        return default if model is None else str(model)
    if not hasattr(model, "save_pretrained"):
        raise UserError(
            f"model: expected a hub id, a folder or a transformers PreTrainedModel, got {type(model).__name__}"
        )
    if processing_class is None or not hasattr(processing_class, "save_pretrained"):
        raise UserError("a loaded model needs its tokenizer: pass processing_class=tokenizer")
    from .models import save_model

    return str(save_model(model, processing_class, folder / "start_model"))


def _task(
    train_dataset: Any, eval_dataset: Any, folder: Path, options: dict[str, Any], default: str | None
) -> tuple[str | None, dict]:
    """The task name (``--task``) and options: a name or path as it is, rows written to JSONL files; None: the
    recipe's own task (``run_defaults``: azr's) or the built-in default."""
    if isinstance(train_dataset, (str, Path)) or train_dataset is None:
        name = default if train_dataset is None else str(train_dataset)
    else:
        name = str(_write_rows(train_dataset, folder / "data" / "train.jsonl", "train_dataset"))
    if eval_dataset is not None:
        if name is None or not name.endswith((".jsonl", ".parquet")):
            raise UserError(
                "eval_dataset is the held-out split of a dataset given as rows or a file; a named task brings its own"
            )
        test = (
            eval_dataset
            if isinstance(eval_dataset, (str, Path))
            else _write_rows(eval_dataset, folder / "data" / "test.jsonl", "eval_dataset")
        )
        options = {**options, "test_path": str(test)}
    return name, options


def _write_rows(data: Any, path: Path, what: str) -> Path:
    rows = data.to_list() if hasattr(data, "to_list") else data  # a datasets.Dataset, else a list of dicts
    if not isinstance(rows, (list, tuple)) or not rows or not all(isinstance(r, dict) for r in rows):
        raise UserError(
            f"{what}: expected a task name, a file, a datasets.Dataset or a non-empty list of rows "
            f"(dicts), got {type(data).__name__}"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row, default=str) + "\n" for row in rows), encoding="utf-8")
    return path


__all__ = ["TrainResult", "prepare", "train"]
