"""Supervised warm start on a task's demonstrations (``reasonrl pretrain``).

The loss is next-token cross-entropy on the completion only (demonstration + EOS), averaged over
completion tokens. Periodic greedy evaluation can stop training as soon as held-out pass@1
reaches ``until_pass``: that is how the shipped base is put in the RL learning zone (0.30-0.55).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Iterator

import torch

from ..data.curriculum import check_curriculum, perplexities, reverse_ppl_order
from ..eval.runner import EvalConfig, evaluate_model
from ..data.sft_rows import IGNORE, sft_batch  # noqa: F401 - re-exported
from ..tasks import Item, Task
from .schedule import lr_lambda


@dataclass(frozen=True)
class SFTConfig:
    steps: int = 400
    seconds: float | None = None  # wall-clock budget; stops at whichever of steps/seconds comes first
    batch_size: int = 64
    lr: float = 1e-3
    warmup: int = 20
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    seed: int = 0
    eval_every: int = 50
    eval_problems: int = 200
    until_pass: float | None = None  # stop at the first eval whose greedy pass@1 reaches this
    # "reverse_ppl" (SU-01): the run's steps x batch_size items, scored once under the starting model,
    # fed in descending demonstration perplexity without shuffling; "none": the task's stream as drawn
    curriculum: str = "none"
    score_batch: int = 256  # rows per no-grad scoring forward of the curriculum

    def __post_init__(self):
        check_curriculum(self.curriculum)


@torch.no_grad()
def demo_nll(model, tokenizer, items: list[Item], batch_size: int = 256) -> list[float]:
    """Each item's per-token mean NLL of its demonstration (+ EOS) given its prompt under ``model``:
    the SFT loss of that example alone, one no-grad forward per ``batch_size`` rows."""
    was_training, out = model.training, []
    model.eval()
    device = next(model.parameters()).device
    for s in range(0, len(items), batch_size):
        b = {k: v.to(device) for k, v in sft_batch(items[s : s + batch_size], tokenizer).items()}
        logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"], use_cache=False).logits[:, :-1]
        labels = b["labels"][:, 1:]  # (r, L-1): position p predicts token p+1
        nll = torch.nn.functional.cross_entropy(
            logits.float().transpose(1, 2), labels, ignore_index=IGNORE, reduction="none"
        )  # (r, L-1), 0 where ignored
        out += (nll.sum(-1) / (labels != IGNORE).sum(-1).clamp(min=1)).tolist()
    model.train(was_training)
    return out


def curriculum_stream(model, tokenizer, task: Task, cfg: SFTConfig) -> tuple[Iterator[Item], list[float]]:
    """The items the run trains on, in the curriculum's order, and their perplexities in that order
    (empty for ``none``). ``reverse_ppl`` draws the run's ``steps x batch_size`` items up front (the
    "dataset" of a generated task is what the run would see), scores them once under the starting
    model and orders them by descending perplexity [inferred: once up front, over the whole pool]."""
    stream = task.iter_items("train", cfg.seed)
    if cfg.curriculum == "none":
        return stream, []
    pool = [next(stream) for _ in range(cfg.steps * cfg.batch_size)]
    ppl = perplexities(demo_nll(model, tokenizer, pool, cfg.score_batch))
    order = reverse_ppl_order(ppl)
    return iter([pool[i] for i in order]), [ppl[i] for i in order]


def demo_loss(model, tokenizer, items: list[Item], generator: torch.Generator) -> torch.Tensor:
    """The warm start's loss on a batch: next-token cross-entropy on the completions, or for a model
    with its own objective (a masked-diffusion LM: LLaDA's masked-token loss) that one."""
    own = getattr(model, "demo_loss", None)
    if own is None:
        return model(**sft_batch(items, tokenizer), use_cache=False).loss
    missing = [it.key for it in items if it.demo is None]
    if missing:
        raise ValueError(f"item {missing[0]!r} has no demonstration; pretraining needs a task that provides them")
    return own([it.prompt for it in items], [it.demo for it in items], tokenizer, generator)


def sft(model, tokenizer, task: Task, cfg: SFTConfig, log: Callable[[dict], None] = lambda m: None) -> dict:
    """Train in place; returns the last eval summary (or {} if none ran)."""
    torch.manual_seed(cfg.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    # linear warmup, then cosine to 10% over the steps (constant when the budget is wall-clock)
    schedule = lr_lambda(cfg.warmup, cfg.steps, "constant" if cfg.seconds else "cosine", min_ratio=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule)
    stream, ppl = curriculum_stream(model, tokenizer, task, cfg)
    masks = torch.Generator().manual_seed(cfg.seed)  # a masked-diffusion model's noise (demo_loss)
    start, last_eval = time.perf_counter(), {}
    for step in range(cfg.steps):
        model.train()
        loss = demo_loss(model, tokenizer, [next(stream) for _ in range(cfg.batch_size)], masks)
        if not torch.isfinite(loss):
            raise FloatingPointError(f"SFT loss is {loss.item()} at step {step}; lower the learning rate ({cfg.lr})")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        sched.step()
        elapsed = time.perf_counter() - start
        metrics = {
            "step": step + 1,
            "loss": loss.item(),
            "grad_norm": float(gnorm),
            "lr": sched.get_last_lr()[0],
            "seconds": elapsed,
        }
        if ppl:  # the curriculum's position: this batch's mean perplexity under the starting model
            metrics["curriculum/ppl"] = sum(ppl[step * cfg.batch_size : (step + 1) * cfg.batch_size]) / cfg.batch_size
        out_of_time = cfg.seconds is not None and elapsed >= cfg.seconds
        if cfg.eval_every and ((step + 1) % cfg.eval_every == 0 or step + 1 == cfg.steps or out_of_time):
            last_eval, _ = evaluate_model(
                model, tokenizer, task, EvalConfig(n_problems=cfg.eval_problems, samples_per_problem=0, seed=cfg.seed)
            )
            metrics["eval/pass@1"] = last_eval["pass@1"]
        log(metrics)
        if out_of_time or (cfg.until_pass is not None and last_eval.get("pass@1", -1.0) >= cfg.until_pass):
            break
    model.eval()
    return last_eval
