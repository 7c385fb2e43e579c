"""Per-prompt GRPO gradients at the initial model, on LoRA adapters (spec distill-and-data.md 12 (b)).

For each prompt: sample rollouts at T = 0.7, group-normalise the rewards (a prompt whose rewards
all agree has no gradient and is dropped), keep at most ``max_correct`` correct rollouts (a seeded
random pick), backpropagate each kept rollout's loss -A * mean_t exp(lp - sg lp) on its own, and
average: the prompt's gradient, over the adapter parameters whose names hold neither "base_layer"
nor "mlp", stored in float16 as the source saves it. ``lp`` is the log-softmax of the *raw* logits
(``grad_temperature = 1``), as the source's ``compute_gradients_batch`` scores the rollouts; the
sampling temperature is only the rollouts' (``grad_temperature`` = T is an option, not the default).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Sequence

import torch

from ..models.scoring import score_completions
from ..rollout import HFEngine, SamplingParams, select_rows
from ..seeds import stable_seed
from ..tasks import Item, Task, is_correct
from .unlearnable import group_advantages

LORA_R, LORA_ALPHA, LORA_SEED = 16, 32, 42  # the source's adapter: r 16, alpha 32, init seed 42


def lora_targets(model) -> str | None:
    """PEFT's own default target modules for the architecture (None: let peft pick, e.g. q_proj and
    v_proj for llama and qwen2), or "all-linear" where peft has no default for it."""
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as DEFAULTS

    return None if getattr(model.config, "model_type", None) in DEFAULTS else "all-linear"


def with_lora(model, seed: int = LORA_SEED):
    """``model`` wrapped in a fresh LoRA adapter (r 16, alpha 32, no dropout), A drawn from ``seed``
    alone (the caller's RNG is left as it was); B = 0, so the model's outputs are unchanged."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=LORA_R, lora_alpha=LORA_ALPHA, lora_dropout=0.0, target_modules=lora_targets(model), task_type="CAUSAL_LM"
    )
    device = next(model.parameters()).device
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        return get_peft_model(model, config)


def gradient_names(model) -> list[str]:
    """Sorted names of the trainable parameters the similarity uses (the source drops keys with
    "base_layer" or "mlp")."""
    return sorted(
        n for n, p in model.named_parameters() if p.requires_grad and "base_layer" not in n and "mlp" not in n
    )


def rollout_losses(
    logp: torch.Tensor, mask: torch.Tensor, adv: torch.Tensor
) -> torch.Tensor:  # (R, T), (R, T), (R,) -> (R,)
    """-A * mean_t exp(lp - sg lp): the value is -A, the gradient -A * mean_t grad lp (spec 12 (b))."""
    ratio = torch.exp(logp - logp.detach())  # (R, T) all ones, carrying grad lp
    return -adv * (ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1)


def mean_rollout_gradient(model, names: Sequence[str], ro, adv: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Mean over ``ro``'s rows of each row's own gradient (one backward per row, the graph kept
    between them), flattened over ``names`` in order: (D,) float32. ``temperature`` divides the
    logits of the scoring pass (1: raw logits, the source's)."""
    params = dict(model.named_parameters())
    wanted = [params[n] for n in names]
    logp, _ = score_completions(
        model,
        ro.prompt_ids,
        ro.prompt_mask,
        ro.completion_ids,
        ro.completion_mask,
        temperature=temperature,
        chunk_rows=len(ro.texts),
        entropies=False,
    )  # (R, T)
    losses = rollout_losses(logp, ro.completion_mask.to(logp), adv.to(logp))  # (R,)
    total = torch.zeros(sum(p.numel() for p in wanted))  # (D,)
    for i in range(len(losses)):
        grads = torch.autograd.grad(losses[i], wanted, retain_graph=i < len(losses) - 1, allow_unused=True)
        total += torch.cat(
            [
                torch.zeros(p.numel()) if g is None else g.detach().float().reshape(-1).cpu()
                for g, p in zip(grads, wanted)
            ]
        )
    return total / len(losses)


@dataclass
class PromptGradients:
    names: list[str]  # the parameters, in flattening order
    grads: dict[str, torch.Tensor] = field(default_factory=dict)  # key -> (D,) float16
    kept: dict[str, int] = field(default_factory=dict)  # key -> correct rollouts averaged
    dropped: dict[str, str] = field(default_factory=dict)  # key -> why it has no gradient


def pick_correct(correct: Sequence[bool], at_most: int, seed: int) -> list[int]:
    """Indices of correct rollouts, at most ``at_most`` of them drawn at random (seeded), ascending."""
    idx = [i for i, ok in enumerate(correct) if ok]
    return sorted(random.Random(seed).sample(idx, at_most)) if len(idx) > at_most else idx


def prompt_gradients(
    model,
    tok,
    task: Task,
    items: Sequence[Item],
    *,
    rollouts: int = 16,
    max_correct: int = 20,
    temperature: float = 0.7,
    max_new_tokens: int = 64,
    seed: int = 0,
    grad_temperature: float = 1.0,
    progress=None,
) -> PromptGradients:
    """Per-prompt mean gradient of its correct rollouts, at ``model`` (already LoRA-wrapped). The
    rollouts of all prompts are sampled in one call at ``temperature``, each prompt's keyed by its own
    seed (so a prompt's rollouts do not depend on the others); their log-probs in the gradient are of
    the logits divided by ``grad_temperature`` (1, raw logits: the source's)."""
    names = gradient_names(model)
    out = PromptGradients(names)
    if not items:
        return out
    sp = SamplingParams(temperature=temperature, max_new_tokens=max_new_tokens)
    model.eval()  # no dropout, in sampling and in the gradients
    with torch.no_grad():
        ro = HFEngine(model, tok).generate(
            [it.prompt for it in items], rollouts, sp, seeds=[stable_seed(seed, "unlearnable", it.key) for it in items]
        )
    for p, item in enumerate(items):
        mine = list(range(p * rollouts, (p + 1) * rollouts))  # prompt p's rows
        scores = [task.verify(ro.texts[r], item.answer, item.meta) for r in mine]
        correct = [is_correct(s) for s in scores]
        rewards = torch.tensor(scores, dtype=torch.float32)  # (G,) the task's verifier score
        if rewards.std(correction=0) == 0:  # all right or all wrong: A = 0, the source drops the prompt
            out.dropped[item.key] = f"all {rollouts} rollouts {'correct' if correct[0] else 'wrong'}"
        else:
            adv = group_advantages(rewards)  # (G,)
            rows = pick_correct(correct, max_correct, stable_seed(seed, "pick", item.key))
            g = mean_rollout_gradient(
                model, names, select_rows(ro, [mine[r] for r in rows]), adv[rows], grad_temperature
            )
            out.grads[item.key], out.kept[item.key] = g.half(), len(rows)
        if progress:
            progress(1)
    return out
