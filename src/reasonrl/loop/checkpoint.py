"""Atomic checkpoints of everything a run needs to continue bit-exactly.

A checkpoint is written into ``checkpoints/.tmp-step-N`` and renamed to ``checkpoints/step-N``
only when complete (a rename within one filesystem is atomic), so a process killed mid-save
leaves the previous checkpoint as the latest. It holds the model (HF safetensors, float32; with
LoRA the adapter weights alone, as peft's ``adapter_model.safetensors``), the
optimiser and scheduler, every RNG state and the trainer's own counters (step, task position), and
the parts' own modules (a critic: ``modules/<part>.<name>.safetensors``, float32 as trained).
"""

from __future__ import annotations

import os
import random
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..errors import UserError

STEP_RE = re.compile(r"^step-(\d+)$")


def rng_state(sampler: torch.Generator | None = None) -> dict[str, Any]:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if sampler is not None:
        state["sampler"] = sampler.get_state()
    return state


def set_rng_state(state: dict[str, Any], sampler: torch.Generator | None = None) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if sampler is not None and "sampler" in state:
        sampler.set_state(state["sampler"])


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, write) -> Path:
    """Write ``path`` through ``write(tmp_path)`` and rename it into place: a process killed midway
    leaves the old file (or none), never a truncated one that a resume would then fail to read."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    write(tmp)
    os.replace(tmp, path)
    return path


def atomic_write_text(path: Path, text: str) -> Path:
    return atomic_write(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


def save_checkpoint(
    run_dir: Path,
    step: int,
    model,
    optimizer,
    scheduler,
    state: dict[str, Any],
    keep_last: int = 2,
    weights: dict[str, torch.Tensor] | None = None,
    optimizer_state: dict[str, Any] | None = None,
    modules: dict[str, Any] | None = None,
) -> Path:
    """``weights`` / ``optimizer_state``: what to write instead of the model's and the optimiser's own
    state dicts (a sharded model's, gathered whole: :mod:`reasonrl.dist.fsdp`); ``modules``: the parts'
    own modules (``modules/<key>.<name>.safetensors``)."""
    root = Path(run_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final, tmp = root / f"step-{step:06d}", root / f".tmp-step-{step:06d}"
    shutil.rmtree(tmp, ignore_errors=True)  # leftovers of an earlier killed save
    tmp.mkdir()
    model.save_pretrained(tmp, safe_serialization=True, state_dict=weights)
    save_modules(tmp / "modules", modules or {})
    optimizer_state = optimizer.state_dict() if optimizer_state is None else optimizer_state
    torch.save(
        {"optimizer": optimizer_state, "scheduler": scheduler.state_dict(), "state": state}, tmp / "trainer_state.pt"
    )
    _fsync_dir(tmp)
    if final.exists():  # re-saving the same step (after a resume): replace it whole
        shutil.rmtree(final)
    os.rename(tmp, final)
    _fsync_dir(root)
    prune(root, keep_last)
    return final


def list_checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    root = Path(run_dir) / "checkpoints"
    if not root.exists():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := STEP_RE.match(p.name)) and p.is_dir()]
    return sorted(found)


def latest_checkpoint(run_dir: Path) -> Path | None:
    found = list_checkpoints(run_dir)
    return found[-1][1] if found else None


def prune(root: Path, keep_last: int) -> None:
    found = list_checkpoints(root.parent)
    for _, path in found[:-keep_last] if keep_last > 0 else []:
        shutil.rmtree(path)


def load_checkpoint(path: Path, model, optimizer, scheduler, modules: dict[str, Any] | None = None) -> dict[str, Any]:
    """Restore model, part modules, optimiser and scheduler in place; return the trainer state dict."""
    if (Path(path) / "adapter_model.safetensors").exists():
        _load_adapter(path, model)
    else:
        _load_weights(path, model)
    load_modules(Path(path) / "modules", modules or {})
    blob = torch.load(Path(path) / "trainer_state.pt", weights_only=False)
    optimizer.load_state_dict(blob["optimizer"])
    scheduler.load_state_dict(blob["scheduler"])
    return blob["state"]


def _load_weights(path: Path, model) -> None:
    from safetensors.torch import load_file

    weights = load_file(str(Path(path) / "model.safetensors"))
    missing, unexpected = model.load_state_dict(weights, strict=False)
    check_weights(path, model, missing, unexpected)


def check_weights(path: Path, model, missing: list[str], unexpected: list[str]) -> None:
    """Loaded weights matched the model: every key, but a tied output head (saved once, as the embedding)."""
    tied = {k for k in missing if "lm_head" in k} if getattr(model.config, "tie_word_embeddings", False) else set()
    if set(missing) - tied or unexpected:
        raise RuntimeError(f"checkpoint {path} does not match the model: missing {missing}, unexpected {unexpected}")


def _load_adapter(path: Path, model) -> None:
    """A LoRA checkpoint holds the adapter weights only (the base is the run's model, never trained):
    copied into the model's adapters, every one of them present. peft saves the ``default`` adapter at
    the top and any other (VPD's teacher) in a subfolder of its name."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    if not hasattr(model, "peft_config"):
        raise RuntimeError(
            f"checkpoint {path} holds LoRA adapters but the model has none: resume with the run's "
            "lora.* settings (config.yaml records them)"
        )
    for name in model.peft_config:
        folder = Path(path) if name == "default" else Path(path) / name
        if not (folder / "adapter_model.safetensors").exists():
            raise RuntimeError(
                f"checkpoint {path} has no weights for the model's adapter {name!r} "
                f"(expected {folder / 'adapter_model.safetensors'})"
            )
        weights = load_file(str(folder / "adapter_model.safetensors"))
        result = set_peft_model_state_dict(model, weights, adapter_name=name)
        adapters = {k for k in model.state_dict() if "lora_" in k and f".{name}." in k}
        missing = {k for k in result.missing_keys if "lora_" in k and f".{name}." in k}
        if missing or result.unexpected_keys or len(weights) != len(adapters):
            raise RuntimeError(
                f"checkpoint {path} does not match the model's adapter {name!r}: missing "
                f"{sorted(missing)}, unexpected {result.unexpected_keys}, {len(weights)} saved vs "
                f"{len(adapters)} in the model"
            )


def save_modules(folder: Path, modules: dict[str, Any]) -> None:
    """Each module's weights as ``folder/<name>.safetensors`` (shared tensors handled by safetensors'
    ``save_model``); nothing (no folder) when there are none."""
    if not modules:
        return
    from safetensors.torch import save_model

    folder.mkdir()
    for name, module in modules.items():
        save_model(module, str(folder / f"{name}.safetensors"))


def load_modules(folder: Path, modules: dict[str, Any]) -> None:
    """Restore every module of ``modules`` from ``folder`` (strict: every weight, nothing else); a
    checkpoint without one of them, or holding a module the run lacks, is refused by name."""
    from safetensors.torch import load_model

    saved = {p.name.removesuffix(".safetensors") for p in folder.glob("*.safetensors")} if folder.is_dir() else set()
    if saved != set(modules):
        raise UserError(
            f"checkpoint {folder.parent} holds the part modules {sorted(saved)} but this run has "
            f"{sorted(modules)}: resume with the run's recipe"
        )
    for name, module in modules.items():
        missing, unexpected = load_model(module, str(folder / f"{name}.safetensors"), strict=False)
        if missing or unexpected:
            raise UserError(
                f"checkpoint {folder.parent}: part module {name!r} does not match (missing {missing}, "
                f"unexpected {unexpected}); resume with the run's settings"
            )
