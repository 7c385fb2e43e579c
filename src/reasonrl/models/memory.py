"""GPU memory: rows per pass chosen from free device memory, activation checkpointing, bf16 precision.

``max_rows=auto`` (rows decoded at once) and ``micro_batch_size=auto`` (rows per forward/backward of
the update) are resolved once, when the trainer starts: on CUDA from the free memory
(``torch.cuda.mem_get_info`` plus what torch's allocator holds unused), less what training will still
allocate (gradients, AdamW states, a reference copy), times a safety fraction, divided by an estimate
of the bytes one row needs; anywhere else the fixed :data:`CPU_DEFAULTS` (host RAM is not the limit).

Per row, for a decoder of L layers, hidden size h, MLP width m, K key/value heads of size d
(kv = K * d), vocabulary V, b bytes per element of the compute dtype, P prompt and T new tokens:

* decode (:func:`decode_bytes_per_row`): the KV cache, ``L * 2 * kv * (P + T) * b``, keys and values
  both in the compute dtype (``rollout/kvcache.py``; under mixed precision too), ``P + T`` rounded up
  to a multiple of :data:`STATIC_WIDTH_MULTIPLE` with the static cache (measured on the tiny model in
  ``tests/test_gpu_path.py``; the Qwen2-0.5B shape, L 24, kv 2 x 64, bf16: 12,288 bytes a token and
  row, 1.5 GiB for 512 rows of 256 positions); the prefill's
  widest transient, one layer's MLP and a few hidden-size tensors, ``P * (2m + 4h) * b``; and the
  sampler's float32 (V,) vectors (logits, scaled, log-softmax, probabilities, top-p's sort, cumsum
  and mask: ~12 of them), ``SAMPLER_BYTES_PER_VOCAB * V``.
* update (:func:`update_bytes_per_row`), S = P + T tokens: what autograd keeps for the backward,
  ``L * S * ACT * b`` with ``ACT = 8h + 4kv + 4m`` values per token and layer
  (:func:`activation_values_per_token`; under mixed precision ``+ L * S * 4h * 4``); with
  activation checkpointing only each layer's input, ``L * S * h * b``, plus one layer's
  ``S * ACT * b`` while it is recomputed; and the logits,
  ``T * V * 12``: the logits and their gradient (float32: the output head runs outside autocast)
  and the float32 log-softmax (:func:`reasonrl.models.scoring.score_completions` slices it over
  time, so this is an upper bound). Attention is assumed to keep no (S, S) matrix (SDPA or flash
  attention, transformers' default); eager attention needs more.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import math
import types
from dataclasses import dataclass

import torch

from ..errors import UserError
from .chat import prompt_text
from .loading import resolve_dtype
from .lora import base_model, is_lora

CPU_DEFAULTS = {"max_rows": 512, "micro_batch_size": 64}  # off CUDA: the values before `auto` existed
FRACTION = 0.6  # of the free memory left after training's own allocations: margin for the estimates' error
SAMPLER_BYTES_PER_VOCAB = 48  # ~12 float32 (rows, V) tensors live at once in rollout.sampling.sample_next
PROMPT_SAMPLE = 64  # training prompts tokenised to estimate the prompt length
PROMPT_MARGIN = 1.25  # the longest sampled prompt times this: later prompts may be longer
AUTOCAST_ATTR = "reasonrl_autocast_dtype"  # the decoder's autocast dtype, set by install_autocast
TF32_ATTR = "reasonrl_tf32_head"  # set on the output head by install_tf32_head
STATIC_WIDTH_MULTIPLE = 64  # a static KV cache's positions are a multiple of this (rollout.kvcache.WIDTH_MULTIPLE)


@dataclass(frozen=True)
class Shape:
    """The sizes of a decoder-only transformer the estimates need."""

    layers: int
    hidden: int
    kv: int  # key/value heads x head size
    intermediate: int
    vocab: int

    @classmethod
    def of(cls, config) -> "Shape":
        """From an HF config (Llama, Qwen2, Mistral, ... field names)."""
        heads = config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        kv_heads = getattr(config, "num_key_value_heads", None) or heads
        return cls(
            config.num_hidden_layers,
            config.hidden_size,
            kv_heads * head_dim,
            config.intermediate_size,
            config.vocab_size,
        )


def rows_that_fit(free_bytes: float, bytes_per_row: float, fraction: float = FRACTION) -> int:
    """How many rows of ``bytes_per_row`` fit in ``fraction`` of ``free_bytes`` (0 when none does)."""
    if bytes_per_row <= 0:
        raise ValueError(f"bytes_per_row must be > 0, got {bytes_per_row}")
    return max(0, math.floor(max(0.0, free_bytes) * fraction / bytes_per_row))


def kv_cache_bytes(s: Shape, tokens: int, dtype_bytes: int) -> int:
    """One row's KV cache over ``tokens`` positions: keys and values of every layer."""
    return s.layers * 2 * s.kv * tokens * dtype_bytes


def decode_bytes_per_row(
    s: Shape, prompt_tokens: int, new_tokens: int, dtype_bytes: int, cache_multiple: int = 1
) -> int:
    """``cache_multiple``: the KV cache's positions are rounded up to a multiple of it
    (:data:`STATIC_WIDTH_MULTIPLE` with the static cache, 1 with the dynamic one)."""
    prefill = prompt_tokens * (2 * s.intermediate + 4 * s.hidden) * dtype_bytes
    positions = -(-(prompt_tokens + new_tokens) // cache_multiple) * cache_multiple
    return kv_cache_bytes(s, positions, dtype_bytes) + prefill + SAMPLER_BYTES_PER_VOCAB * s.vocab


def activation_values_per_token(s: Shape) -> int:
    """Values autograd keeps per token and layer of a Llama-style block (SDPA attention), an estimate
    checked against what autograd saves on the tiny model (tests/test_memory.py): the two RMSNorms'
    inputs (float32 inside the norm) and outputs, q, rotated q, the attention output and o_proj's
    output (~8h in compute-dtype units); k, v and rotated k (~4kv with margin); and the MLP's gate,
    up, activation and product (4m)."""
    return 8 * s.hidden + 4 * s.kv + 4 * s.intermediate


def update_bytes_per_row(
    s: Shape, prompt_tokens: int, new_tokens: int, dtype_bytes: int, checkpointing: bool, mixed: bool = False
) -> int:
    """``mixed``: float32 weights under autocast, whose residual stream stays float32, so each layer
    also keeps ~4h float32 values per token (both RMSNorms' inputs and the residual sums)."""
    seq = prompt_tokens + new_tokens
    act = seq * (activation_values_per_token(s) * dtype_bytes + (4 * s.hidden * 4 if mixed else 0))  # one layer's
    kept = s.layers * seq * s.hidden * (4 if mixed else dtype_bytes) + act if checkpointing else s.layers * act
    return kept + new_tokens * s.vocab * 12


def training_state_bytes(model, needs_reference: bool, autocast_bytes: int = 0) -> int:
    """What training allocates after the trainer starts: gradients and AdamW's two moments of the
    trainable parameters, a frozen reference copy of all weights (full fine-tuning with a KL term),
    and autocast's per-forward low-precision copy of the weights (``autocast_bytes`` per value)."""
    params = list(model.parameters())
    trainable = sum(p.numel() * p.element_size() for p in params if p.requires_grad)
    every = sum(p.numel() * p.element_size() for p in params)
    copy = every if needs_reference and not is_lora(model) else 0  # LoRA's reference: the base, adapters off
    return 3 * trainable + copy + autocast_bytes * sum(p.numel() for p in params)


def free_device_bytes(device: torch.device) -> int:
    """Free CUDA memory, counting what torch's caching allocator holds but does not use."""
    free, _ = torch.cuda.mem_get_info(device)
    return free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)


def prompt_tokens_estimate(task, tokenizer, seed: int) -> int:
    """The longest of the first :data:`PROMPT_SAMPLE` training prompts, in tokens, times :data:`PROMPT_MARGIN`."""
    prompts = [it.prompt for it in itertools.islice(task.iter_items("train", seed), PROMPT_SAMPLE)]
    longest = max((len(tokenizer(prompt_text(p))["input_ids"]) for p in prompts), default=1)  # chat: its JSON
    return math.ceil(longest * PROMPT_MARGIN)


def resolve_rows(cfg, model, tokenizer, task, *, new_tokens: int, needs_reference: bool):
    """``cfg`` (a :class:`reasonrl.config.train.TrainConfig`, not imported: config sits above models) with
    ``max_rows`` / ``micro_batch_size`` = ``auto`` replaced by numbers of rows (see the module docs);
    ``model`` is the policy as it will train (adapters, precision and checkpointing already set)."""
    auto = tuple(k for k in ("max_rows", "micro_batch_size") if getattr(cfg, k) == "auto")
    device = next(model.parameters()).device
    if not auto or device.type != "cuda":
        return dataclasses.replace(cfg, **{k: CPU_DEFAULTS[k] for k in auto})
    b = compute_dtype(model).itemsize
    autocast = b if compute_dtype(model) != next(model.parameters()).dtype else 0  # its per-forward weight copies
    free = free_device_bytes(device) - training_state_bytes(model, needs_reference, autocast)
    chosen = plan_rows(
        auto,
        Shape.of(base_model(model).config),
        free,
        b,
        prompt_tokens_estimate(task, tokenizer, cfg.seed),
        new_tokens,
        cfg.memory.gradient_checkpointing,
        mixed=autocast > 0,
        cache_multiple=STATIC_WIDTH_MULTIPLE if cfg.rollout.static_cache else 1,
    )
    return dataclasses.replace(cfg, **chosen)


def plan_rows(
    auto: tuple[str, ...],
    shape: Shape,
    free_bytes: int,
    dtype_bytes: int,
    prompt_tokens: int,
    new_tokens: int,
    checkpointing: bool,
    mixed: bool = False,
    cache_multiple: int = 1,
) -> dict[str, int]:
    """Rows for each knob in ``auto`` (``max_rows``: decoding, ``micro_batch_size``: the update) that
    fit in :data:`FRACTION` of ``free_bytes``; a knob for which not one row fits is an error."""
    per_row = {
        "max_rows": decode_bytes_per_row(shape, prompt_tokens, new_tokens, dtype_bytes, cache_multiple),
        "micro_batch_size": update_bytes_per_row(shape, prompt_tokens, new_tokens, dtype_bytes, checkpointing, mixed),
    }
    chosen = {k: rows_that_fit(free_bytes, per_row[k]) for k in auto}
    for k, n in chosen.items():
        if n == 0:
            raise UserError(
                f"{k}=auto: not one row fits in the free device memory ({free_bytes / 2**30:.2f} GiB after "
                f"the training state; a row of {prompt_tokens}+{new_tokens} tokens needs ~"
                f"{per_row[k] / 2**30:.2f} GiB / {FRACTION}). Set {k} to a number, turn on "
                "memory.gradient_checkpointing, or lower sampling.max_new_tokens"
            )
    return chosen


# ------------------------------------------------------------------ precision
def weights_dtype(dtype: str, master_fp32: bool) -> torch.dtype:
    """The dtype a run's weights are held in: float32 under mixed precision (``master_fp32`` with a
    half dtype: :func:`prepare_for_training`), else the run's ``dtype``."""
    return torch.float32 if master_fp32 else resolve_dtype(dtype)


def prepare_for_training(model, dtype: str, master_fp32: bool, checkpointing: bool):
    """The policy set up for the run's precision and activation checkpointing (in place; returned).

    ``dtype`` bfloat16 / float16 with ``master_fp32``: the weights (so their gradients and AdamW's
    states) are float32 and the decoder runs under ``torch.autocast(dtype)`` (:func:`install_autocast`):
    an update smaller than the half dtype's resolution at a weight's magnitude still lands (bf16 keeps
    8 significant bits: a step of lr 1e-6 on a weight of 0.02, whose bf16 spacing is 1.2e-4, is rounded
    away in pure bf16). Without ``master_fp32`` the weights stay as loaded (half: half the memory of
    weights, gradients and states, lossy updates). float16 has no loss scaling here: prefer bfloat16."""
    if master_fp32 and dtype != "float32":
        model.float()
        install_autocast(model, resolve_dtype(dtype))
    if checkpointing:
        enable_checkpointing(model)
    return model


def compute_dtype(model) -> torch.dtype:
    """The dtype the decoder computes in: autocast's, where installed, else the weights'."""
    return getattr(base_model(model).get_decoder(), AUTOCAST_ATTR, None) or next(model.parameters()).dtype


def install_autocast(model, dtype: torch.dtype) -> None:
    """Run the decoder under ``torch.autocast(dtype)`` on every call (generation, scoring, evaluation,
    the reference's copy alike): the decoder's ``forward`` is replaced, on the instance, by one that
    runs the class's forward inside a ``with torch.autocast(...)`` block. ``torch.compile`` traces a
    ``with`` block in one frame whole; the forward hooks this replaced entered the context in a
    pre-hook and left it in a post-hook, and a compiled graph kept the enter's effect but not the
    context object's state, so the exit failed (``'autocast' object has no attribute 'prev'``). The
    bound method survives ``deepcopy`` (the KL reference: ``copy`` rebinds it to the copy) and a peft
    wrapper (which calls the HF model's ``forward``, but the decoder through ``__call__``). The output
    head stays float32 (its weights are, and the residual stream reaching it is): bf16 logits of
    magnitude ~10 are rounded by up to 0.03, which is the largest source of the gap between the
    sampler's and the learner's token probabilities (MiniMax-M1, arXiv:2506.13585, keeps the LM head
    in fp32 for this reason; ``benchmarks/studies/head_precision.py`` measures the gap for each head)."""
    decoder = base_model(model).get_decoder()
    if getattr(decoder, AUTOCAST_ATTR, None) is None:  # installed once
        setattr(decoder, AUTOCAST_ATTR, dtype)
        decoder.forward = types.MethodType(_autocast_forward, decoder)


def _autocast_forward(self, *args, **kwargs):
    with torch.autocast(next(self.parameters()).device.type, dtype=getattr(self, AUTOCAST_ATTR)):
        return type(self).forward(self, *args, **kwargs)


def install_tf32_head(model) -> None:
    """On CUDA, the output head's float32 matmul runs in TF32 (inputs rounded to a 10-bit mantissa,
    float32 products and sums): several times float32's tensor-core throughput, for the one float32
    matmul left under mixed precision (the head: ~139 GFLOP a token at 512 rows and a 150k
    vocabulary). ``benchmarks/studies/head_precision.py`` measured the sampler/learner gap with TF32 emulated
    on the CPU: the same as float32's (mean 3.06e-4 vs 3.04e-4, 99.9th percentile 0.0262 vs 0.0261),
    where a bf16 head widens both by a third. Only the head: TF32 over the whole forward would also
    round the inputs of the rotary embedding's float32 angle matmul (position x frequency) to 11
    significant bits, up to 0.32 rad off at position 2048 (head size 64, base 10,000; 0.17 at base
    1e6: computed with the emulation). The head's backward runs outside its forward and stays float32. Off CUDA
    nothing changes. Installed by the trainer's engine (``rollout.tf32_head``) on a mixed-precision
    policy; like :func:`install_autocast`, a bound method that survives ``deepcopy``."""
    head = base_model(model).get_output_embeddings()
    if not getattr(head, TF32_ATTR, False):  # installed once
        setattr(head, TF32_ATTR, True)
        head.forward = types.MethodType(_tf32_head_forward, head)


def _tf32_head_forward(self, x):
    if x.device.type != "cuda":  # TF32 is a CUDA matmul mode
        return type(self).forward(self, x)
    return _tf32_call(self, x)


# eager, also inside a compiled decode step (a graph break): dynamo does not carry a matmul flag set
# inside a compiled region into its graph (tests/test_precision.py probes it on the CPU)
@torch.compiler.disable
def _tf32_call(head, x):
    with tf32_matmuls():
        return type(head).forward(head, x)


@contextlib.contextmanager
def tf32_matmuls():
    """float32 matmuls on CUDA in TF32 inside the block (torch's ``fp32_precision`` API; the legacy
    ``allow_tf32`` cannot be read once the new one is used)."""
    before = torch.backends.cuda.matmul.fp32_precision
    torch.backends.cuda.matmul.fp32_precision = "tf32"
    try:
        yield
    finally:
        torch.backends.cuda.matmul.fp32_precision = before


def enable_checkpointing(model) -> None:
    """Activation (gradient) checkpointing of every decoder layer, non-reentrant: gradients reach
    LoRA adapters behind frozen embeddings with no input requiring grad, and the recompute restores
    the autocast and RNG state, so the gradients equal those without checkpointing (tested).
    transformers applies it only in training mode with gradients on: generation (eval mode,
    inference mode) keeps its KV cache."""
    hf = base_model(model)
    if not hf.supports_gradient_checkpointing:
        raise UserError(
            f"memory.gradient_checkpointing=true: {type(hf).__name__} does not support activation "
            "checkpointing in transformers; set memory.gradient_checkpointing=false"
        )
    enable = getattr(hf, "activation_checkpointing_enable", None) or hf.gradient_checkpointing_enable  # renamed in 5.2x
    enable({"use_reentrant": False})
