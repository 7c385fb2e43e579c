"""A whole training run: run folder, before/after evaluation, training, final model, report.

The run folder holds ``config.yaml`` (resolved), ``metrics.jsonl``, ``before.json``,
``summary.json`` (``before`` / ``after`` as ``reasonrl eval --json`` writes them),
``after_items.jsonl`` (the final evaluation's greedy result per held-out problem: key, score,
correct; what ``reasonrl compare`` pairs across recipes), ``before.items.jsonl`` and
``after.items.jsonl`` (one row per held-out problem as ``reasonrl eval`` writes NAME.items.jsonl:
greedy correctness and, from ``final_eval_k`` samples at ``final_eval_temperature``, c, n and
pass@1), ``prompt_rewards.jsonl`` (per step, per training prompt key: its group's mean reward and
accuracy; a resumed run may repeat the lines of steps after its checkpoint; what
``reasonrl diagnose unlearnable`` reads), ``completions.jsonl`` (``log_completions`` of each step's
rollouts as text: prompt as the model saw it, completion, each reward, advantage; kept exact on resume
like ``metrics.jsonl``), ``samples.jsonl`` (up to 10 correct and 10
wrong greedy completions of that evaluation, for ``reasonrl report``), ``curves.png``,
``final/`` (an HF model directory; with LoRA the adapter, and ``final/merged/`` the merged model),
``checkpoints/`` and ``events.jsonl`` (one line per process start and end of training: where a
resumed process continued, how many steps it trained). Every small file is written atomically, so
a kill at any moment after ``config.yaml`` exists leaves a run that ``--resume`` continues.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
import yaml

from .checkpoint import atomic_write_text
from ..config.train import TrainConfig, resolved_dict
from ..errors import ExistingPathError, MissingPathError, UserError
from ..dist.group import Single, init_group, on_main
from ..eval.runner import EvalConfig, evaluate_items, item_lines, write_jsonl
from ..models import load_model, resolve_device, save_model
from ..models.memory import weights_dtype
from ..parts import Recipe
from .plots import plot_curves
from ..rewards import FunctionReward
from ..rewards.base import reward_name
from ..rewards.sandbox import requiring
from .stepdata import chosen_rows, completion_rows
from ..tasks.limits import LimitedTask
from .tracking import make_tracker, read_metrics
from ..config.validate import check_run, task_for, task_problems  # noqa: F401 - task_for re-exported (disa, tests)
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
        raise MissingPathError(
            f"--resume: {run_dir} holds no run (no config.yaml); give the folder of an "
            "earlier run with --out, or drop --resume to start a new run there"
        )
    if not resume and has_ckpt:
        raise ExistingPathError(f"{run_dir} already holds checkpoints: pass --resume to continue it, or another --out")


def _final_eval(
    trainer: Trainer, cfg: TrainConfig, on_progress: Callable[[int, int], None] = lambda done, total: None
) -> tuple[dict[str, Any] | None, list[dict], list[dict]]:
    """The before/after evaluation, through the trainer's engine (split over ranks or workers):
    its summary, its per-sample records and its per-problem rows. ``on_progress(done, total)`` counts the
    completions generated (problems x (1 greedy + final_eval_k samples)), for a progress bar with an ETA."""
    if cfg.final_eval_problems <= 0:
        return None, [], []
    ev_cfg = EvalConfig(
        n_problems=cfg.final_eval_problems,
        samples_per_problem=cfg.final_eval_k,
        seed=cfg.eval_seed,
        max_new_tokens=trainer.budget,
        max_rows=cfg.max_rows,
        temperature=cfg.final_eval_temperature,
    )
    total, done = cfg.final_eval_problems * (1 + cfg.final_eval_k), [0]

    def advance(n: int) -> None:
        done[0] += n
        on_progress(min(done[0], total), total)

    on_progress(0, total)
    return evaluate_items(trainer.engine, trainer.task, ev_cfg, progress=advance, formatter=trainer.formatter)


def prompt_reward_lines(step: int, batch) -> str:
    """One JSON line per first-round group of a step's batch: the prompt's key, its group's mean
    reward and accuracy (the per-prompt training reward of spec distill-and-data 12)."""
    first = batch.group_kinds() == 0  # (B,) rounds' added groups (corrections) are not the prompt as drawn
    return "".join(
        json.dumps(
            {
                "step": step,
                "key": item.key,
                "reward": float(batch.rewards[b].mean()),
                "accuracy": float(batch.correct[b].float().mean()),
            }
        )
        + "\n"
        for b, item in enumerate(batch.items)
        if first[b]
    )


def _write_final(
    run_dir: Path,
    model,
    tok,
    summary: dict[str, Any],
    after_records: list[dict],
    weights: dict[str, torch.Tensor] | None = None,
) -> None:
    """The end of a run folder: the model (``weights``: a sharded model's, gathered whole), the
    per-item results of the final eval, summary, curves."""
    save_model(model, tok, run_dir / "final", state_dict=weights)
    if after_records:  # none when final_eval_problems=0
        atomic_write_text(run_dir / "after_items.jsonl", item_lines(after_records))
        atomic_write_text(run_dir / "samples.jsonl", sample_lines(after_records))
    atomic_write_text(run_dir / "summary.json", json.dumps(summary, indent=2))
    plot_curves(read_metrics(run_dir / "metrics.jsonl"), run_dir / "curves.png")


SAMPLE_KEYS = ("key", "prompt", "answer", "completion", "extracted", "score", "correct", "length", "finish")


def sample_lines(records: list[dict], per_kind: int = 10) -> str:
    """The first ``per_kind`` correct and the first ``per_kind`` wrong greedy records (problem order),
    one JSON line each: what ``reasonrl report`` shows of the model's own words."""
    greedy = [r for r in records if r["mode"] == "greedy"]
    picked = [r for r in greedy if r["correct"]][:per_kind] + [r for r in greedy if not r["correct"]][:per_kind]
    return "".join(json.dumps({k: r[k] for k in SAMPLE_KEYS}) + "\n" for r in picked)


def _on_batch(run_dir: Path, tracker, trainer: Trainer, step: int, b) -> None:
    """A fresh batch's records: per-prompt rewards, and ``log_completions`` of its rollouts as text."""
    _append(run_dir / "prompt_rewards.jsonl", prompt_reward_lines(step, b))
    rate, tok = trainer.cfg.log_completions, trainer.tok
    if rate and len(b.ro.texts):
        rows = chosen_rows(rate, len(b.ro.texts), trainer.cfg.seed, step)
        tracker.log_completions(
            completion_rows(step, b, lambda ids: tok.decode(ids, skip_special_tokens=False), rows), step
        )


def _open_run_dir(run_dir: Path, resume: bool, config: dict[str, Any]) -> None:
    check_fresh(run_dir, resume)
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(run_dir / "config.yaml", yaml.safe_dump({**config, "out": str(run_dir)}, sort_keys=False))


def _append(path: Path, text: str) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(text)


def log_event(run_dir: Path, event: str, **fields: Any) -> None:
    """Append one line to ``events.jsonl``: which process did what (start, resume, end of training).

    ``metrics.jsonl`` of a resumed run equals a straight run's by design, so it cannot show that a
    checkpoint was loaded; these lines do (tests read them)."""
    line = json.dumps({"event": event, "pid": os.getpid(), "time": time.time(), **fields})
    with open(Path(run_dir) / "events.jsonl", "a", encoding="utf-8") as fh:
        fh.write(line + "\n")


def _start_message(trainer: Trainer, run_dir: Path, resume: bool) -> str:
    where = trainer.resumed_from
    if where is not None:
        return (
            f"resumed from {where.relative_to(run_dir)} (step {trainer.step}): continuing at step "
            f"{trainer.step + 1} of {trainer.cfg.steps}"
        )
    return "no checkpoint in the run folder yet: starting at step 1" if resume else "starting at step 1"


def prompt_report(trainer: Trainer) -> dict[str, Any]:
    """How the run's prompts reached the model: the format and why, the prompt-token cap, and the
    problems dropped or truncated by it (summary.json's ``prompts``)."""
    fmt, task = trainer.formatter, trainer.task
    out = {"format": "chat" if fmt.chat else "plain", "why": fmt.why}
    return {**out, **(task.report() if isinstance(task, LimitedTask) else {})}


def prompt_note(report: dict[str, Any]) -> str:
    """The run's prompt handling in one line (printed at the start)."""
    shape = "the chat template" if report["format"] == "chat" else "plain text"
    if "max_prompt_tokens" not in report:
        return f"prompts: {shape} ({report['why']}); no length limit"
    fate = "dropped" if report["overflow"] == "drop" else "cut from the left"
    return (
        f"prompts: {shape} ({report['why']}); at most {report['max_prompt_tokens']} tokens each, longer ones "
        f"{fate} (counted in summary.json)"
    )


def with_rewards(recipe: Recipe, funcs: Sequence[Any], weights: Sequence[float] | None) -> Recipe:
    """``recipe`` with the user's reward functions added to its rewards (issue 46, TRL's ``reward_funcs`` with
    ``reward_weights``): the task's verifier stays the first reward, weighted ``weights[0]`` (times the recipe's
    ``task_reward_weight``), then each function (a callable or ``path.py:fn``) with its weight, after the
    recipe's own extra rewards. Each logs ``reward/<name>/mean`` and ``/std``; a repeated name gets ``_2``."""
    if not funcs and weights is None:
        return recipe
    weights = [1.0] * (len(funcs) + 1) if weights is None else list(weights)
    if len(weights) != len(funcs) + 1:
        raise UserError(
            f"reward_weights has {len(weights)} numbers for {len(funcs) + 1} rewards: the task's verifier "
            f"first, then one per reward function ({len(funcs)} given)"
        )
    taken = {"correct", *(reward_name(fn) for fn, _ in recipe.extra_rewards)}  # the verifier logs as reward/correct/*
    added = []
    for fn, weight in zip(funcs, weights[1:]):
        term = fn if isinstance(fn, FunctionReward) else FunctionReward(fn)
        base, k = term.name, 2
        while term.name in taken:
            term.name, k = f"{base}_{k}", k + 1
        taken.add(term.name)
        added.append((term, float(weight)))
    return dataclasses.replace(
        recipe,
        task_reward_weight=recipe.task_reward_weight * float(weights[0]),
        extra_rewards=tuple(recipe.extra_rewards) + tuple(added),
    )


def train_run(
    cfg: TrainConfig,
    recipe: Recipe,
    *,
    resume: bool = False,
    on_step: Callable[[dict], None] = lambda m: None,
    on_phase: Callable[[str], None] = lambda s: None,
    on_note: Callable[[str], None] = lambda s: None,
    on_eval: Callable[[int, int], None] = lambda done, total: None,
) -> dict[str, Any]:
    """Run (or, with ``resume``, continue) a training run; ``on_note`` receives one-off messages
    such as where a resumed run continues, ``on_eval(done, total)`` the before/after evaluations' progress
    (completions generated of all), after an ``on_phase`` naming which."""
    check_run(cfg, recipe)  # the Python API gets the command line's range checks too
    task = task_for(cfg)
    refused = task_problems(task, recipe)  # the abilities its parts need; a task with environments, episodes
    if refused:
        raise UserError("\n".join(refused))
    group, device = init_group(resolve_device(cfg.device), cfg.dist.backend)
    if group.world > 1 and cfg.rollout.workers > 0:
        group.close()
        raise UserError(
            f"rollout.workers={cfg.rollout.workers} with {group.world} torchrun processes: each rank would "
            "start its own Ray workers; use one of the two (data parallelism or rollout workers)"
        )
    try:
        with requiring(cfg.sandbox.require):  # every model-written program of the run: at least this level
            return _train(cfg, recipe, task, group, device, resume, on_step, on_phase, on_note, on_eval)
    finally:
        group.close()


def _before(
    trainer: Trainer, cfg: TrainConfig, run_dir: Path, group: Single, on_phase, on_eval
) -> dict[str, Any] | None:
    """The starting model's evaluation: read from before.json when a previous process wrote it,
    else run (and written, with its per-problem rows, by rank 0)."""
    before_path = run_dir / "before.json"
    before = on_main(group, lambda: json.loads(before_path.read_text()) if before_path.exists() else None)
    if before is None:  # (also when before.json holds null: final_eval_problems=0 makes that instant)
        on_phase("evaluating the starting model")
        before, _, before_rows = _final_eval(trainer, cfg, on_eval)
        if group.is_main:
            if before_rows:
                write_jsonl(before_rows, run_dir / "before.items.jsonl")
            atomic_write_text(before_path, json.dumps(before, indent=2))
    return before


def _announce(trainer: Trainer, run_dir: Path, resume: bool, group: Single, on_note) -> None:
    """Where the run starts and how prompts reach the model: told to the user, and in events.jsonl."""
    message, cfg = _start_message(trainer, run_dir, resume), trainer.cfg
    on_note(message)
    on_note(prompt_note(prompt_report(trainer)))
    log_event(
        run_dir,
        "start",
        message=message,
        first_step=trainer.step + 1,
        world=group.world,
        items_drawn=trainer.batches.items_drawn,
        max_rows=cfg.max_rows,
        micro_batch_size=cfg.micro_batch_size,
        resumed_from=None if trainer.resumed_from is None else trainer.resumed_from.name,
        **trainer.resume_info,
    )


def _train(
    cfg: TrainConfig,
    recipe: Recipe,
    task,
    group: Single,
    device: str,
    resume: bool,
    on_step,
    on_phase,
    on_note,
    on_eval,
) -> dict[str, Any]:
    """The run on every rank; rank 0 alone writes the run folder (the other ranks hold the same state)."""
    main = group.is_main
    random.seed(cfg.seed), np.random.seed(cfg.seed), torch.manual_seed(cfg.seed)
    run_dir = Path(group.broadcast(str(run_dir_for(cfg, recipe))))  # one folder, named by rank 0's clock
    config = resolved_dict(cfg, recipe)  # the user's reward files are in it as reward_funcs, not as extra rewards
    recipe = with_rewards(recipe, cfg.reward_funcs, cfg.reward_weights)
    on_main(group, lambda: _open_run_dir(run_dir, resume, config))
    model, tok = load_model(cfg.model, dtype=weights_dtype(cfg.dtype, cfg.master_fp32), device=device)
    # a part may present the task otherwise (drafts in the prompt); its metrics are logged with the first step
    task, wrapped = recipe.wrap_task(task, tok, cfg.seed)
    trainer = Trainer(model, tok, task, recipe, cfg, run_dir, group=group)
    trainer.setup_metrics.update(wrapped)  # beside setup_model's and setup_modules'
    model = trainer.model  # with lora.r > 0 the adapter-wrapped model
    cfg = trainer.cfg  # max_rows / micro_batch_size = auto resolved to numbers (logged in events.jsonl)
    before = _before(trainer, cfg, run_dir, group, on_phase, on_eval)
    start = trainer.resume() if resume else None
    if main:
        _announce(trainer, run_dir, resume, group, on_note)
    drawn_at_start = trainer.batches.items_drawn
    tracker = _attach_tracker(trainer, cfg, run_dir, config, start, on_step) if main else None
    t0 = time.perf_counter()
    on_phase("training")
    try:
        try:
            trainer.train()
        finally:
            if tracker is not None:
                tracker.close()
        seconds = time.perf_counter() - t0
        on_phase("evaluating the trained model")
        after, after_records, after_rows = _final_eval(trainer, cfg, on_eval)  # on the engine: it closes after
    finally:
        if hasattr(trainer.engine, "close"):  # Ray rollout workers (rollout.workers > 0), vLLM are stopped
            trainer.engine.close()
    summary = {"recipe": recipe.name, "task": task.name, "steps": trainer.step, "train_seconds": seconds}
    summary |= {"nonfinite_total": trainer.nonfinite_total, "before": before, "after": after, "world": group.world}
    summary["prompts"] = prompt_report(trainer)
    weights = trainer.dist.full_weights(model)  # FSDP: gathered to rank 0 (every rank takes part); else None
    if main:
        drawn = trainer.batches.items_drawn - drawn_at_start
        log_event(run_dir, "trained", last_step=trainer.step, steps_this_process=trainer.steps_this_process,
                  items_drawn_this_process=drawn)  # fmt: skip
        _write_final(run_dir, model, tok, summary, after_records, weights)
        if after_rows:
            write_jsonl(after_rows, run_dir / "after.items.jsonl")
    group.barrier()  # the other ranks return once the run folder is complete
    summary["run_dir"] = str(run_dir)
    return summary


def _attach_tracker(trainer: Trainer, cfg: TrainConfig, run_dir: Path, config: dict, start, on_step):
    """Rank 0's tracker, and the trainer's step and batch logging through it (the other ranks log nothing)."""
    tracker = make_tracker(
        cfg.tracking, run_dir, config, run_dir.name, resume_from_step=start, completions=cfg.log_completions > 0
    )

    def log(m: dict) -> None:
        tracker.log({k: v for k, v in m.items() if k != "step"}, m["step"])
        on_step(m)

    trainer.log = log
    trainer.on_batch = lambda step, b: _on_batch(run_dir, tracker, trainer, step, b)
    return tracker
