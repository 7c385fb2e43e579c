"""A whole training run: run folder, before/after evaluation, training, final model, report.

The run folder holds ``config.yaml`` (resolved), ``metrics.jsonl``, ``before.json``,
``summary.json`` (``before`` / ``after`` as ``reasonrl eval --json`` writes them), ``curves.png``,
``final/`` (an HF model directory) and ``checkpoints/``.
"""
from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
import yaml

from .config import TrainConfig, resolved_dict
from .errors import ExistingPathError, MissingPathError
from .eval.runner import EvalConfig, evaluate_model
from .models import load_model, resolve_device, resolve_dtype, save_model
from .parts import Recipe
from .plots import plot_curves
from .tasks import get_task
from .tracking import make_tracker, read_metrics
from .trainer import Trainer


def run_dir_for(cfg: TrainConfig, recipe: Recipe) -> Path:
    return Path(cfg.out or f"runs/{recipe.name}-{time.strftime('%Y%m%d-%H%M%S')}")


def check_fresh(run_dir: Path, resume: bool) -> None:
    """A run folder fits the request: ``--resume`` needs a run in it, a new run must not overwrite
    one that saved checkpoints. Cheap, so the CLI calls it before anything is loaded."""
    if run_dir.exists() and not run_dir.is_dir():
        raise ExistingPathError(f"the run folder {run_dir} is a file; give a folder with --out")
    has_ckpt = (run_dir / "checkpoints").is_dir() and any((run_dir / "checkpoints").iterdir())
    if resume and not (run_dir / "config.yaml").exists():
        raise MissingPathError(f"--resume: {run_dir} holds no run (no config.yaml); give the folder of an "
                               "earlier run with --out, or drop --resume to start a new run there")
    if not resume and has_ckpt:
        raise ExistingPathError(f"{run_dir} already holds checkpoints: pass --resume to continue it, or another --out")


def _final_eval(model, tok, task, cfg: TrainConfig, budget: int) -> dict[str, Any] | None:
    if cfg.final_eval_problems <= 0:
        return None
    ev_cfg = EvalConfig(n_problems=cfg.final_eval_problems, k=cfg.final_eval_k, seed=cfg.eval_seed,
                        max_new_tokens=budget, max_rows=cfg.max_rows)
    summary, _ = evaluate_model(model, tok, task, ev_cfg)
    return summary


def train_run(cfg: TrainConfig, recipe: Recipe, *, resume: bool = False,
              on_step: Callable[[dict], None] = lambda m: None,
              on_phase: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    random.seed(cfg.seed), np.random.seed(cfg.seed), torch.manual_seed(cfg.seed)
    run_dir = run_dir_for(cfg, recipe)
    check_fresh(run_dir, resume)
    run_dir.mkdir(parents=True, exist_ok=True)
    config = resolved_dict(cfg, recipe)
    (run_dir / "config.yaml").write_text(yaml.safe_dump({**config, "out": str(run_dir)}, sort_keys=False))
    model, tok = load_model(cfg.model, dtype=resolve_dtype(cfg.dtype), device=resolve_device(cfg.device))
    task = get_task(cfg.task, **cfg.task_options)
    trainer = Trainer(model, tok, task, recipe, cfg, run_dir)
    before_path = run_dir / "before.json"
    if before_path.exists():
        before = json.loads(before_path.read_text())
    else:
        on_phase("evaluating the starting model")
        before = _final_eval(model, tok, task, cfg, trainer.budget)
        before_path.write_text(json.dumps(before, indent=2))
    start = trainer.resume() if resume else None
    tracker = make_tracker(cfg.tracking, run_dir, config, run_dir.name, resume_from_step=start)
    t0 = time.perf_counter()

    def log(m: dict) -> None:
        tracker.log({k: v for k, v in m.items() if k != "step"}, m["step"])
        on_step(m)

    trainer.log = log
    on_phase("training")
    try:
        trainer.train()
    finally:
        tracker.close()
    seconds = time.perf_counter() - t0
    on_phase("evaluating the trained model")
    after = _final_eval(model, tok, task, cfg, trainer.budget)
    save_model(model, tok, run_dir / "final")
    summary = {"recipe": recipe.name, "task": task.name, "steps": trainer.step, "train_seconds": seconds,
               "nonfinite_total": trainer.nonfinite_total, "before": before, "after": after}
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    plot_curves(read_metrics(run_dir / "metrics.jsonl"), run_dir / "curves.png")
    summary["run_dir"] = str(run_dir)
    return summary
