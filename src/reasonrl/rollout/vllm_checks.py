"""What ``rollout.engine=vllm`` cannot do, refused before anything loads, one line each (issue 43).

vLLM samples from its own copy of the weights with its own sampler, so it cannot run what needs the
trainer's own decode loop: forward hooks on the trainer's model (VSPO's activation steering), adapters
switched per row on the trainer's model (PopuLoRA, VPD's teacher adapter) -- parts that declare the need
``own_engine`` --, token statistics recorded while sampling (entropies, sum p^2, CorR-PO's hidden norm:
rewards that declare ``engine_stats`` or ask ``sampling_needs``), the masked-diffusion LM, and the own
engine's settings (static cache, compiled step, Ray workers). No vLLM import here: the checks run where
vLLM is not installed too, and say how to install it.
"""

from __future__ import annotations

import importlib.util
import json
import os
from typing import Any

from ..parts.protocol import part_needs
from .vllm_setup import INSTALL_HINT

DIFFUSION_NAMES = ("builtin:diffusion", "diffusion:")  # models.loading's names of masked-diffusion LMs
DIFFUSION_TYPE = "reasonrl_mdlm"  # models.diffusion.MODEL_TYPE (importing it pulls in transformers)
HF_ONLY = ("static_cache", "compile")  # rollout.* options of the own decode loop


def vllm_problems(values: dict[str, Any], recipe: Any) -> list[str]:
    """One line per setting of the run that ``rollout.engine=vllm`` cannot serve; none for another engine."""
    if values.get("rollout.engine") != "vllm":
        return []
    key = "config key 'rollout.engine' = 'vllm'"
    out = [
        f"{key}: recipe part {name!r} needs the own engine's decode loop on the trainer's model (forward hooks "
        "or adapters switched per row): use rollout.engine=hf"
        for name, part in recipe.hooked()
        if "own_engine" in part_needs(part)
    ]
    for fn, _ in recipe.extra_rewards:
        stats = list(getattr(fn, "engine_stats", ())) + sorted(getattr(fn, "sampling_needs", {}) or {})
        if stats:
            out.append(
                f"{key}: reward {getattr(fn, 'name', type(fn).__name__)!r} reads {', '.join(stats)} recorded "
                "while sampling, which vLLM does not record: use rollout.engine=hf"
            )
    out += [
        f"{key}: rollout.{opt}=true is an option of the own decode loop; drop it"
        for opt in HF_ONLY
        if values.get(f"rollout.{opt}")
    ]
    workers = values.get("rollout.workers")
    if isinstance(workers, int) and workers > 0:
        out.append(
            f"{key}: rollout.workers={workers} runs the own engine on Ray actors; vLLM runs in the trainer's "
            "process: set rollout.workers=0"
        )
    if values.get("dist.strategy") == "fsdp":
        out.append(
            f"{key} with dist.strategy=fsdp: not supported (each rank would gather the whole model for its "
            "own engine at every push; not built); use dist.strategy=ddp (each rank its own engine)"
        )
    if is_diffusion_name(values.get("model")):
        out.append(
            f"{key}: model {values.get('model')!r} is a masked-diffusion LM, which vLLM cannot sample: use "
            "rollout.engine=hf"
        )
    if importlib.util.find_spec("vllm") is None:
        out.append(f"{key} needs vLLM, which is not installed: {INSTALL_HINT}")
    return out


def is_diffusion_name(name: Any) -> bool:
    """Whether model ``name`` is a masked-diffusion LM: one of its built-in names, or a folder whose
    config says so (read as JSON, nothing loaded)."""
    if not isinstance(name, str):
        return False
    if name.startswith(DIFFUSION_NAMES):
        return True
    config = os.path.join(name, "config.json")
    if not os.path.isfile(config):
        return False
    try:
        with open(config, encoding="utf-8") as f:
            return json.load(f).get("model_type") == DIFFUSION_TYPE
    except (OSError, ValueError):  # an unreadable config: the model check (check_inputs) names it
        return False
