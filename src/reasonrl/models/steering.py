"""Activation steering for rollouts (VSPO, arXiv 2605.15604; specifics inferred, see the spec).

A steering vector is a difference of mean residual-stream activations at one decoder layer
between prompts that show a behaviour and prompts that lack it (contrastive activation addition).
During generation a forward hook adds ``alpha * scale * v`` to that layer's output at generated
positions (and, as an option, at prompt positions), with one ``alpha`` per sample of a group (an
intensity grid or uniform draws, alpha_max optionally annealed), so a group mixes unsteered and
steered rollouts. The training forward passes never carry the hook, and by default
the behaviour log-probs are re-scored without it: the steered samples are treated as samples of
the unsteered policy (VSPO's self-distillation reading).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Sequence

import math

import torch

from .lora import base_model
from .scoring import score_completions


def decoder_layer(model, layer: int) -> torch.nn.Module:
    """Decoder layer ``layer`` of an HF decoder-only model (Llama, Qwen2, Mistral, ... share this path)."""
    layers = base_model(model).model.layers  # under a peft model's adapters when it has them
    if not -len(layers) <= layer < len(layers):
        raise ValueError(f"layer {layer} out of range for a model with {len(layers)} decoder layers")
    return layers[layer]


def intensity_grid(group_size: int, alpha_max: float) -> list[float]:
    """Linear intensities alpha_i = alpha_max * i / (G - 1), i = 0..G-1: always includes 0 (spec)."""
    if group_size == 1:
        return [0.0]
    return [alpha_max * i / (group_size - 1) for i in range(group_size)]


def uniform_intensities(group_size: int, alpha_max: float, seed: int) -> list[float]:
    """Sample 0 at alpha 0, samples 1..G-1 ~ U[0, alpha_max] (spec option), from a generator seeded
    by ``seed`` alone, so a resumed run draws the same intensities. Sample 0 stays unsteered as in
    the grid: every group keeps one sample of the policy being trained, and the two schedules differ
    only in the steered intensities."""
    u = torch.rand(group_size - 1, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)  # (G-1,)
    return [0.0] + (alpha_max * u).tolist()


def annealed_alpha_max(alpha_max: float, anneal: str, step: int, total_steps: int) -> float:
    """alpha_max at training step ``step`` (0-based) of ``total_steps``, annealed to 0 at the last
    step (spec option, so the policy ends up working without the hook): ``linear`` alpha_max * (1 - p),
    ``cosine`` alpha_max * (1 + cos(pi p)) / 2, ``none`` constant, with p = step / (total_steps - 1)."""
    if anneal == "none":
        return alpha_max
    p = min(1.0, step / max(1, total_steps - 1))
    if anneal == "linear":
        return alpha_max * (1.0 - p)
    if anneal == "cosine":
        return alpha_max * 0.5 * (1.0 + math.cos(math.pi * p))
    raise ValueError(f"unknown steering anneal {anneal!r}; valid: none, linear, cosine")


def add_steering(h: torch.Tensor, unit: torch.Tensor, scale: float, alpha: torch.Tensor) -> torch.Tensor:
    """(b, s, H) hidden states + alpha (b,) * scale * unit (H,): the residual-stream edit."""
    return h + (alpha.to(h.dtype)[:, None, None] * scale) * unit.to(h.dtype)


@torch.no_grad()
def mean_activation(model, tokenizer, texts: Sequence[str], layer: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean over texts of the mean over real tokens of layer ``layer``'s output: (H,), and the mean
    token norm there (the scale that makes alpha scale-free)."""
    enc = tokenizer(list(texts), return_tensors="pt", padding=True)
    device = next(model.parameters()).device
    out = model(**{k: v.to(device) for k, v in enc.items()}, output_hidden_states=True, use_cache=False)
    hs = out.hidden_states[layer + 1 if layer >= 0 else layer]  # (N, S, H); index 0 is the embeddings
    mask = enc["attention_mask"].to(device, hs.dtype)[..., None]  # (N, S, 1)
    per_text = (hs * mask).sum(1) / mask.sum(1)  # (N, H)
    norms = (hs.norm(dim=-1, keepdim=True) * mask).sum() / mask.sum()
    return per_text.mean(0), norms


def steering_vector(model, tokenizer, positive: Sequence[str], negative: Sequence[str], layer: int):
    """(unit vector (H,), scale c): v = mean h(positive) - mean h(negative), normalised; c is the
    mean residual norm at the layer over both sets."""
    if not positive or not negative:
        raise ValueError("a steering vector needs at least one positive and one negative example")
    decoder_layer(model, layer)  # a clear error for a layer the model does not have
    pos, c_pos = mean_activation(model, tokenizer, positive, layer)
    neg, c_neg = mean_activation(model, tokenizer, negative, layer)
    diff = pos - neg
    if float(diff.norm()) == 0.0:
        raise ValueError("positive and negative examples give identical mean activations: no direction to steer")
    return diff / diff.norm(), float((c_pos + c_neg) / 2)


@contextmanager
def steer(
    model, layer: int, unit: torch.Tensor, scale: float, alphas: Sequence[float], steer_prompt: bool = False
) -> Iterator[None]:
    """Add ``alphas[j] * scale * unit`` at generated positions of sample j of every group.

    Rows are prompt-major (row r is sample r % n), so a batch of b rows gets ``alphas`` tiled
    b / n times. Prefill calls (more than one position) are left alone unless ``steer_prompt``:
    then every position of every call is steered, the prompt's included (the prefill must then
    hold one row per sample, see :func:`generate_steered`). The hook is removed on exit, whatever
    happens inside.
    """
    per_sample = torch.tensor(list(alphas), dtype=torch.float32)

    def hook(module, args, output):
        h = output[0] if isinstance(output, tuple) else output
        if h.shape[1] != 1 and not steer_prompt:  # prefill: prompt positions are not steered
            return output
        if h.shape[0] % len(per_sample):
            raise RuntimeError(
                f"steered batch of {h.shape[0]} rows is not a whole number of groups of {len(per_sample)}"
            )
        alpha = per_sample.to(h.device).repeat(h.shape[0] // len(per_sample))  # (b,)
        h = add_steering(h, unit.to(h.device), scale, alpha)
        return (h, *output[1:]) if isinstance(output, tuple) else h

    handle = decoder_layer(model, layer).register_forward_hook(hook)
    try:
        yield
    finally:
        handle.remove()


def generate_steered(
    engine,
    prompts: Sequence[str],
    sampling,
    *,
    unit: torch.Tensor,
    scale: float,
    layer: int,
    alphas: Sequence[float],
    generator: torch.Generator | None = None,
    is_correction: bool = False,
    steer_prompt: bool = False,
):
    """One group of ``len(alphas)`` samples per prompt, sample j at intensity ``alphas[j]``, from an
    :class:`~reasonrl.rollout.HFEngine` (its Rollouts come back, with ``extras["alpha"]``).

    Finished rows stay in the batch (``compact_below=0`` for the call) so that every row keeps its
    intensity. The engine prefills a prompt once for its whole group; ``steer_prompt`` needs one
    prefill per intensity, so each prompt is then repeated ``len(alphas)`` times and sampled once
    (with whole groups per engine chunk). Unless ``is_correction``, the behaviour log-probs are
    re-scored without the hook.
    """
    n, saved = len(alphas), (engine.compact_below, engine.max_rows)
    engine.compact_below = 0.0
    if steer_prompt:  # a chunk of max_rows prompts must not split a group
        engine.max_rows = max(n, engine.max_rows - engine.max_rows % n)
    try:
        with steer(engine.model, layer, unit, scale, alphas, steer_prompt=steer_prompt):
            if steer_prompt:
                ro = engine.generate([p for p in prompts for _ in range(n)], 1, sampling, generator=generator)
                ro.n = n
            else:
                ro = engine.generate(prompts, n, sampling, generator=generator)
    finally:
        engine.compact_below, engine.max_rows = saved
    if not is_correction:
        with torch.no_grad():
            lp, _ = score_completions(
                engine.model,
                ro.prompt_ids,
                ro.prompt_mask,
                ro.completion_ids,
                ro.completion_mask,
                temperature=sampling.temperature or 1.0,
                entropies=False,
            )
        ro.logprobs = lp.cpu()
    ro.extras["alpha"] = torch.tensor(list(alphas) * len(prompts))  # (R,)
    return ro
