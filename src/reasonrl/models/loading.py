"""Loading and saving causal LMs: the shipped base, a local HF directory, a hub id, or a fresh
tiny model (``tiny:small`` / ``tiny:tiny``, random weights, for tests and pretraining)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from ..errors import MissingPathError, UserError
from .lora import is_lora, merged_copy
from . import presets
from .diffusion import MODEL_TYPE, DiffusionLM, build_diffusion
from .diffusion import SIZES as DIFFUSION_SIZES
from .tiny import SIZES, build_tiny

BASE_DIR = Path(__file__).resolve().parent / "base"
DIFFUSION_DIR = Path(__file__).resolve().parent / "mdlm"  # the shipped masked-diffusion LM ("builtin:diffusion")
BUILTIN_DIFFUSION = "builtin:diffusion"
REGENERATE_DIFFUSION = (
    "reasonrl pretrain --arch diffusion --steps 3000 --eval-every 250 --until-pass 0.40 --half "
    "--out src/reasonrl/models/mdlm"
)
REGENERATE = "reasonrl pretrain --steps 400 --eval-every 5 --until-pass 0.40 --half --out src/reasonrl/models/base"


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_device(name: str = "auto") -> str:
    """``auto`` picks CUDA when available; anything else is passed to torch as is."""
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(f"device {name!r} was asked for but torch sees no CUDA device")
    return name


def resolve_dtype(name: str) -> torch.dtype:
    if name not in DTYPES:
        raise ValueError(f"unknown dtype {name!r}; valid: {sorted(DTYPES)}")
    return DTYPES[name]


def base_model_path() -> Path:
    """Directory of the shipped base checkpoint (an ordinary HF model directory)."""
    if not (BASE_DIR / "config.json").exists():
        raise FileNotFoundError(
            f"the shipped base checkpoint is missing from {BASE_DIR}; regenerate it with:\n  {REGENERATE}"
        )
    return BASE_DIR


def _merged_if_adapter(name: str) -> str:
    """A LoRA run's ``final/`` (an adapter beside ``merged/``, see :func:`save_model`) stands for its
    merged model, so ``--model runs/x/final`` works for LoRA runs as for full fine-tuning."""
    path = Path(name)
    if (path / "adapter_config.json").is_file() and (path / "merged" / "config.json").is_file():
        return str(path / "merged")
    return name


def resolve_model_name(name: str | os.PathLike | None) -> str:
    """What a model name stands for: None is ``base``, a preset's name (``smollm2-135m-instruct``,
    :mod:`.presets`) its fetched folder (a UserError naming ``reasonrl models get`` when it is not
    fetched), a LoRA run's ``final/`` its merged model; anything else as it is."""
    return _merged_if_adapter(presets.resolve("base" if name is None else str(name)))


def _is_hub_id(name: str) -> bool:
    return not os.path.exists(name) and name.count("/") == 1 and not name.startswith((".", "/"))


def check_model_name(name: str | os.PathLike | None) -> None:
    """Fail on a model name that cannot load, before anything is loaded: an unknown tiny size, a
    path that does not exist (and is no hub id) or a folder that is not an HF model directory (no
    config.json). A hub id passes: only downloading it can check it."""
    name = resolve_model_name(name)
    if name.startswith("tiny:") and name[5:] not in SIZES:
        raise UserError(
            f"model {name!r}: unknown tiny-model size {name[5:]!r}; valid: "
            f"{', '.join(f'tiny:{s}' for s in sorted(SIZES))}"
        )
    if name.startswith("diffusion:") and name[10:] not in DIFFUSION_SIZES:
        raise UserError(
            f"model {name!r}: unknown diffusion-model size {name[10:]!r}; valid: "
            f"{', '.join(f'diffusion:{s}' for s in sorted(DIFFUSION_SIZES))}"
        )
    if name in ("base", BUILTIN_DIFFUSION) or name.startswith(("tiny:", "diffusion:")):
        return
    if not os.path.exists(name) and not _is_hub_id(name):
        raise MissingPathError(
            f"model {name!r} is neither a local directory nor a hub id (owner/name); "
            "give an HF model directory (e.g. a run's final/ folder), a preset "
            f"({', '.join(sorted(presets.PRESETS))}: `reasonrl models list`) or omit it for the shipped base"
        )
    if os.path.exists(name) and not os.path.isfile(os.path.join(name, "config.json")):
        raise MissingPathError(
            f"model {name!r} is not an HF model directory (no config.json in it); "
            "give a folder written by save_pretrained (e.g. a run's final/ folder)"
        )


def load_tokenizer(name: str | os.PathLike):
    tok = AutoTokenizer.from_pretrained(str(name))
    if tok.pad_token is None:  # many causal LMs ship without one; left-padded generation needs it
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    return tok


def load_model(name: str | os.PathLike | None = None, *, dtype: torch.dtype = torch.float32, device: str = "cpu"):
    """``(model, tokenizer)`` for ``name``: None/'base' = shipped base, 'tiny:<size>' = fresh tiny
    model, 'builtin:diffusion' = the shipped masked-diffusion LM, 'diffusion:<size>' = a fresh one,
    a preset's name (``reasonrl models list``; fetched by ``reasonrl models get``),
    a local directory (a causal LM, or a masked-diffusion LM by its config), or a hub id (needs
    network; the error says so when offline)."""
    name = resolve_model_name(name)
    check_model_name(name)
    if name.startswith(("tiny:", "diffusion:")):
        kind, size = name.split(":", 1)
        model, tok = build_tiny(size) if kind == "tiny" else build_diffusion(size)
        return model.to(device=device, dtype=dtype), tok
    path = {"base": lambda: str(base_model_path()), BUILTIN_DIFFUSION: _diffusion_path}.get(name, lambda: name)()
    try:
        cls = DiffusionLM if _is_diffusion_dir(path) else AutoModelForCausalLM
        model = cls.from_pretrained(path, dtype=dtype, **_plain_config(path))
        tok = load_tokenizer(path)
    except OSError as err:
        if _is_hub_id(path):
            raise MissingPathError(
                f"could not load hub model {path!r}: a hub id needs network access (or a local cache). "
                f"Offline, pass a local HF model directory instead. Cause: {err}"
            ) from err
        raise
    return model.to(device), tok


def _plain_config(path: str) -> dict:
    """``{"config": ...}`` without the GGUF ``quantization_config`` that a folder saved from a model
    loaded out of a GGUF file keeps in its config.json (issue 42): its safetensors hold the plain,
    dequantised weights, yet transformers would mark the model quantized and refuse to save it, so a
    run's final save would fail after training. Any other folder: ``{}`` (the config as it is)."""
    config = Path(path) / "config.json"
    if not config.is_file():
        return {}
    quant = json.loads(config.read_text()).get("quantization_config") or {}
    if quant.get("quant_method") != "gguf" or any(Path(path).glob("*.gguf")):
        return {}
    plain = AutoConfig.from_pretrained(path)
    del plain.quantization_config
    return {"config": plain}


def _diffusion_path() -> str:
    if not (DIFFUSION_DIR / "config.json").exists():
        raise MissingPathError(
            f"the shipped diffusion model is missing from {DIFFUSION_DIR}; regenerate it with:\n"
            f"  {REGENERATE_DIFFUSION}"
        )
    return str(DIFFUSION_DIR)


def _is_diffusion_dir(path: str) -> bool:
    """A local model folder whose config names the masked-diffusion model type."""
    config = Path(path) / "config.json"
    return config.is_file() and json.loads(config.read_text()).get("model_type") == MODEL_TYPE


def save_model(
    model,
    tokenizer,
    out: str | os.PathLike,
    *,
    dtype: torch.dtype | None = None,
    state_dict: dict[str, torch.Tensor] | None = None,
) -> Path:
    """Save as a plain HF directory (safetensors); ``dtype`` converts a copy (e.g. fp16 to ship). A
    LoRA model saves its adapter (peft's directory) and, in ``out/merged``, a plain HF model with the
    adapters merged in, which loads without peft. ``state_dict``: the weights to write instead of the
    model's own (a sharded model's, gathered whole; with neither LoRA nor ``dtype``)."""
    if state_dict is not None and (dtype is not None or is_lora(model)):
        raise ValueError("save_model(state_dict=...) writes the given weights as they are: no dtype, no LoRA")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if is_lora(model):
        save_model(merged_copy(model), tokenizer, out / "merged", dtype=dtype)
    to_save = model if dtype is None or is_lora(model) else _converted_copy(model, dtype)
    to_save.save_pretrained(out, safe_serialization=True, state_dict=state_dict)
    tokenizer.save_pretrained(out)
    return out


def _converted_copy(model, dtype: torch.dtype):
    clone = type(model)(model.config)
    clone.load_state_dict(model.state_dict())
    clone.config.dtype = dtype  # the file says what it holds; load_model casts back to float32
    return clone.to(dtype)
