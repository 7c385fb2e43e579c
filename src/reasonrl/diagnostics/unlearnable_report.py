"""``reasonrl diagnose unlearnable``: classes from the runs, gradients at the initial model, the
cosine matrix, a JSON and a heatmap PNG beside it (spec distill-and-data.md section 12)."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from ..loop.checkpoint import atomic_write, atomic_write_text
from ..errors import UserError
from ..eval.runner import task_max_new_tokens
from ..models import load_model
from ..tasks import get_task
from .gradients import LORA_ALPHA, LORA_R, LORA_SEED, PromptGradients, lora_targets, prompt_gradients, with_lora
from .heatmap import draw_heatmap
from .runs import load_run, pass_rates, problem_items
from .unlearnable import CLASSES, TAU, block_means, block_of, classify, cosine_matrix, mean_similarity


@dataclass(frozen=True)
class DiagnoseConfig:
    rollouts: int = 16  # per prompt (the paper: about 1000; a CPU takes a few)
    max_correct: int = 20  # correct rollouts averaged per prompt (the source's cap)
    per_class: int = 100  # prompts drawn per block for the heatmap (the paper's 100)
    temperature: float = 0.7  # of the sampled rollouts (the source's)
    grad_temperature: float = 1.0  # of the gradient's log-probs: 1 = raw logits, as the source's gradient pass
    tau: float = TAU
    seed: int = 0  # the prompts drawn per block, the rollouts and the pick of correct ones

    def __post_init__(self) -> None:
        for name, low in (("rollouts", 2), ("max_correct", 1), ("per_class", 1)):
            if getattr(self, name) < low:
                raise UserError(f"--{name.replace('_', '-')} = {getattr(self, name)}: needs >= {low}")
        if self.temperature <= 0:
            raise UserError(f"--temperature = {self.temperature}: needs > 0 (rollouts are sampled)")
        if self.grad_temperature <= 0:
            raise UserError(f"--grad-temperature = {self.grad_temperature}: needs > 0 (it divides the logits)")


def sample_blocks(blocks: dict[str, str], per_class: int, seed: int) -> list[str]:
    """Keys in block order (CLASSES), at most ``per_class`` of each drawn at random (seeded),
    sorted within a block."""
    out = []
    for name in CLASSES:
        keys = sorted(k for k, b in blocks.items() if b == name)
        if len(keys) > per_class:
            keys = sorted(random.Random(f"{seed}:{name}").sample(keys, per_class))
        out += keys
    return out


def _similarity(grads: dict[str, torch.Tensor], keys: list[str], blocks: dict[str, str]) -> dict[str, Any]:
    """The cosine matrix over ``keys`` that have a gradient, each one's mean cosine to the rest,
    and the block means."""
    kept = [k for k in keys if k in grads]
    if not kept:
        return {"keys": [], "matrix": torch.zeros(0, 0), "mean_similarity": {}, "block_means": {}}
    sim = cosine_matrix([grads[k] for k in kept])  # (N, N)
    ms = mean_similarity(sim)  # (N,)
    order = [blocks[k] for k in kept]
    per_block = {b: [float(ms[i]) for i, k in enumerate(kept) if blocks[k] == b] for b in CLASSES}
    return {
        "keys": kept,
        "matrix": sim,
        "mean_similarity": {k: float(ms[i]) for i, k in enumerate(kept)},
        "block_means": block_means(sim, order),
        "block_mean_similarity": {b: (sum(v) / len(v) if v else None) for b, v in per_block.items()},
    }


def load_gradients(path: Path, setting: dict[str, Any]) -> PromptGradients:
    """The prompt gradients a run of the diagnostic saved at ``path`` (``NAME.gradients.pt``, float16)
    with the same model and sampling settings; none when there is no such file or they differ."""
    if not path.is_file():
        return PromptGradients([])
    saved = torch.load(path, weights_only=True)
    if saved.get("setting") != setting:
        return PromptGradients([])
    return PromptGradients(saved["names"], saved["grads"], saved["kept"], saved["dropped"])


def merge_gradients(old: PromptGradients, new: PromptGradients) -> PromptGradients:
    if old.names and new.grads and old.names != new.names:
        raise UserError(
            "saved gradients are over other parameters than the model's adapter: delete the .gradients.pt file"
        )
    return PromptGradients(
        new.names or old.names, {**old.grads, **new.grads}, {**old.kept, **new.kept}, {**old.dropped, **new.dropped}
    )


def diagnose_unlearnable(
    run_dirs: Sequence[str | Path],
    model: str | None,
    out: str | Path,
    cfg: DiagnoseConfig = DiagnoseConfig(),
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Write ``out`` (JSON) and ``out`` with suffix .png (heatmap); return the JSON's dict.
    ``progress(done, total)`` is called after each prompt's gradient."""
    out = Path(out)
    if out.suffix != ".json":
        raise UserError(f"--out {out}: give a .json file (the heatmap goes beside it as .png)")
    runs = [load_run(r) for r in run_dirs]
    initial, finals, rewards = pass_rates(runs)
    classes = classify(initial, finals, rewards, cfg.tau)
    blocks = block_of(classes)
    keys = sample_blocks(blocks, cfg.per_class, cfg.seed)
    items = problem_items(runs[0], keys)
    task = get_task(runs[0].config.get("task"), **(runs[0].config.get("task_options") or {}))
    policy, tok = load_model(model)
    targets = lora_targets(policy)
    policy = with_lora(policy)
    done = {"n": 0}

    def tick(k: int) -> None:
        done["n"] += k
        if progress:
            progress(done["n"], len(items))

    cache = out.with_suffix(".gradients.pt")
    setting = {
        "model": model,
        "rollouts": cfg.rollouts,
        "max_correct": cfg.max_correct,
        "temperature": cfg.temperature,
        "grad_temperature": cfg.grad_temperature,
        "seed": cfg.seed,
    }
    pg = load_gradients(cache, setting)
    todo = [it for it in items if it.key not in pg.grads and it.key not in pg.dropped]
    tick(len(items) - len(todo))
    new = prompt_gradients(
        policy,
        tok,
        task,
        todo,
        rollouts=cfg.rollouts,
        max_correct=cfg.max_correct,
        temperature=cfg.temperature,
        max_new_tokens=task_max_new_tokens(task),
        seed=cfg.seed,
        grad_temperature=cfg.grad_temperature,
        progress=tick,
    )
    pg = merge_gradients(pg, new)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(
        cache,
        lambda tmp: torch.save(
            {"setting": setting, "names": pg.names, "grads": pg.grads, "kept": pg.kept, "dropped": pg.dropped}, tmp
        ),
    )
    sim = _similarity(pg.grads, keys, blocks)
    result = _result(runs, model, cfg, classes, blocks, initial, finals, pg, sim, targets)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, json.dumps(result, indent=1))
    png = out.with_suffix(".png")
    draw_heatmap(
        sim["matrix"],
        [blocks[k] for k in sim["keys"]],
        CLASSES,
        png,
        title=f"LoRA gradient cosine at the initial model ({len(runs)} runs, tau {cfg.tau})",
    )
    result["heatmap"] = str(png)
    return result


def _result(runs, model, cfg, classes, blocks, initial, finals, pg, sim, targets) -> dict[str, Any]:
    per_prompt = {
        k: {
            "initial_pass@1": initial[k],
            "final_pass@1": [f[k] for f in finals],
            "classes": [c for c in ("no_reward", "unlearnable", "learnable", "easy") if k in classes[c]],
            "block": blocks.get(k),
        }
        for k in sorted(initial)
    }
    for k in sim["keys"]:
        per_prompt[k].update(mean_similarity=sim["mean_similarity"][k], correct_rollouts=pg.kept[k])
    for k, why in pg.dropped.items():
        per_prompt[k]["dropped"] = why
    return {
        "runs": [r.name for r in runs],
        "model": model or "shipped base",
        "config": vars(cfg),
        "lora": {
            "r": LORA_R,
            "alpha": LORA_ALPHA,
            "init_seed": LORA_SEED,
            "targets": "peft default for the architecture" if targets is None else targets,
            "parameters": pg.names,
            "dims": len(next(iter(pg.grads.values()))) if pg.grads else None,
        },
        "counts": {c: len(v) for c, v in classes.items()},
        "easy_and_unlearnable": len(set(classes["easy"]) & set(classes["unlearnable"])),
        "classes": classes,
        "heatmap_prompts": sim["keys"],
        "dropped": pg.dropped,
        "block_means": sim["block_means"],
        "block_mean_similarity": sim.get("block_mean_similarity", {}),
        "per_prompt": per_prompt,
    }
