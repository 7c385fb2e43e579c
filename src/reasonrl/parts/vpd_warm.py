"""A warm start of VPD's teacher adapter on (feedback prompt -> demonstration) pairs (issue #26).

VPD's teacher ``q_phi(y | x, f)`` starts as the base model under the feedback prompt (its adapter's
B = 0). A small model that only ever saw plain prompts cannot read that prompt: on the tiny
reasoner the teacher solved under 1% of them, so the E-step had no reward signal and the M-step
distilled the student toward a teacher that is almost always wrong (docs/vpd.md). The note of that
measurement asked for this warm start. It trains the teacher adapter alone (the student's adapter
and the base are untouched, so the student starts where GRPO starts) with next-token cross-entropy
on the demonstration, given the prompt VPD's round builds: the task's prompt, a wrong attempt (the
demonstration with digits changed until the verifier rejects it,
:func:`reasonrl.data.drafter.wrong_version`; a share ``1 - wrong_rate`` keeps the right one, as the
round's attempt is right when a group has no wrong row), the feedback function's text on it, and
the prompt again. [inferred here: the paper's teacher is a large model that reads feedback as is]
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import torch

from ..data.drafter import wrong_version
from ..data.sft_rows import sft_batch
from ..models.lora import adapter_parameters, use_adapter
from ..seeds import stable_seed
from ..tasks import Item, is_correct, take_items
from .feedback import feedback_fn, teacher_prompt

__all__ = ["feedback_items", "warm_teacher"]


def feedback_items(
    task: Any, items: list[Item], template: str, feedback: str, wrong_rate: float, seed: int
) -> list[Item]:
    """``items`` with the teacher's prompt (attempt + feedback) and their own demonstration as target."""
    fn, out = feedback_fn(feedback), []
    for it in items:
        rng = random.Random(stable_seed(seed, "vpd-warm", it.key))
        attempt, ok = (
            wrong_version(task, it, rng)
            if rng.random() < wrong_rate
            else (it.demo, is_correct(task.verify(it.demo, it.answer, it.meta)))
        )
        note = fn(task, it, attempt, ok)
        out.append(dataclasses.replace(it, prompt=teacher_prompt(template, it.prompt, attempt, note)))
    return out


def warm_teacher(
    model,
    tok,
    task: Any,
    adapter: str,
    *,
    template: str,
    feedback: str,
    steps: int,
    batch_size: int,
    lr: float,
    wrong_rate: float,
    seed: int,
) -> dict[str, float]:
    """``steps`` AdamW steps of the ``adapter`` LoRA parameters alone on feedback prompts of the task's
    train stream (its own seeded draws); returns the first and last batch's loss."""
    params = list(adapter_parameters(model, adapter).values())
    if not params:
        raise ValueError(f"warm_teacher: the model has no adapter named {adapter!r}")
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    stream = task.iter_items("train", stable_seed(seed, "vpd-warm-stream"))
    device, losses, was = next(model.parameters()).device, [], model.training
    model.train()
    with use_adapter(model, adapter):
        for step in range(steps):
            items = feedback_items(
                task, [next(stream) for _ in range(batch_size)], template, feedback, wrong_rate, stable_seed(seed, step)
            )
            batch = {k: v.to(device) for k, v in sft_batch(items, tok).items()}
            loss = model(**batch, use_cache=False).loss
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
    model.train(was)
    for p in params:
        p.grad = None
    return {"vpd/warm_loss_first": losses[0], "vpd/warm_loss_last": losses[-1]} if losses else {}


def take_feedback_items(task: Any, n: int, template: str, feedback: str, seed: int) -> list[Item]:
    """``n`` held-out items under the teacher's prompt with a wrong attempt (the teacher's accuracy probe)."""
    return feedback_items(task, take_items(task, "test", n, seed=seed), template, feedback, 1.0, seed)
