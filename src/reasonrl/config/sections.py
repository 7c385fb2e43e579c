"""The nested sections of the run config (``lora.*``, ``guidance.*``, ``memory.*``, ``dist.*``,
``rollout.*``, ``data.*``, ``prompt.*``, ``sandbox.*``): run settings, not methods, so any recipe takes
them. Each class declares the rules of its options beside its fields (``RULES``), checked before anything
is loaded."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..rewards.sandbox.levels import LEVELS
from ..rewards.sandbox.policy import DEFAULT_REQUIRE
from .rules import Rule, at_least, one_of, within

PROMPT_FORMATS = ("auto", "chat", "plain")  # prompt.format (reasonrl.models.chat renders each)
PROMPT_OVERFLOW = ("drop", "truncate_left")  # prompt.overflow (reasonrl.tasks.limits applies each)
ROWS = Rule(
    lambda v, _: v == "auto" or (isinstance(v, int) and not isinstance(v, bool) and v >= 1),
    "auto (from free GPU memory) or an integer >= 1",
)


@dataclass(frozen=True)
class Lora:
    """Low-rank adapters (LoRA, Hu et al. 2021, arXiv:2106.09685) through ``peft``: a run setting, not
    a method, so any recipe takes it. ``r=0`` is full fine-tuning. ``targets`` is ``all-linear``
    (every linear layer but the output head) or a list of module names (``[q_proj, v_proj]``)."""

    r: int = 0  # rank; 0: off
    alpha: float = 32.0  # the update is scaled by alpha / r
    dropout: float = 0.0
    targets: str | tuple[str, ...] = "all-linear"

    RULES: ClassVar[dict[str, Rule]] = {
        "r": Rule(lambda v, _: v >= 0, ">= 0 (0: full fine-tuning, no adapters)"),
        "alpha": Rule(lambda v, _: v > 0, "> 0 (the adapter update is scaled by alpha / r)"),
        "dropout": within(0, 1, open_hi=True),
    }

    def __post_init__(self):
        if isinstance(self.targets, list):  # YAML gives a list; a frozen part holds a tuple
            object.__setattr__(self, "targets", tuple(self.targets))


@dataclass(frozen=True)
class Guidance:
    """What self-teacher methods show the policy, from JSONL files for tasks that cannot write it
    themselves (``reasonrl.tasks.guidance``): strategy hints (NudgeRL), reference solutions (EGRSD),
    critiques (STRIDE). One row per problem, matched by its key (file tasks: its prompt)."""

    hints: str | None = None  # rows {"key": ..., "hints": [str, ...]}
    solutions: str | None = None  # rows {"key": ..., "solution": str}
    critiques: str | None = None  # rows {"key": ..., "completion": str, "critique": str}


@dataclass(frozen=True)
class Memory:
    """What trades compute for GPU memory; none of it changes the maths."""

    gradient_checkpointing: bool = False  # recompute activations in the backward pass


@dataclass(frozen=True)
class Dist:
    """Data-parallel training over torch.distributed (launched by torchrun, or ``--nproc N``).
    ``strategy``: ``ddp`` replicates the model and all-reduces gradients; ``fsdp`` shards parameters,
    gradients and optimiser state over the ranks (FSDP2, ``reasonrl.dist.fsdp``; in one process there
    is nothing to shard and it is the plain model). ``backend``: ``auto`` is NCCL on GPUs and gloo on the CPU."""

    strategy: str = "ddp"
    backend: str = "auto"

    RULES: ClassVar[dict[str, Rule]] = {
        "strategy": one_of(("ddp", "fsdp")),
        "backend": one_of(("auto", "gloo", "nccl")),
    }


ENGINES = ("hf", "vllm")  # rollout.engine: the own decode loop (rollout/hf.py) or vLLM (rollout/vllm.py)
IS_CORRECTIONS = ("tis", "none")  # rollout.is_correction (losses/mismatch.py)


@dataclass(frozen=True)
class VLLMOpts:
    """The colocated vLLM engine's settings (``rollout.vllm.*``, issue 43, docs/generator.md). ``dtype``: auto
    is the trainer's compute dtype. CPU: ``kv_cache_gib`` (vLLM's ``kv_cache_memory_bytes``), ``threads``
    (torch/OpenMP threads while vLLM decodes in the trainer's process; the probe measured 183 tok/s with one
    and 33 with two on 2 shared cores). GPU: ``gpu_memory_utilization`` (TRL's colocate default 0.3) and
    ``sleep`` (release the KV cache between generations). ``enforce_eager``: None is true on a CPU
    (no compile), false on a GPU (CUDA graphs). ``max_model_len``: None is the model's context length."""

    dtype: str = "auto"
    kv_cache_gib: float = 1.0
    threads: int = 1
    gpu_memory_utilization: float = 0.3
    sleep: bool = False
    enforce_eager: bool | None = None
    max_model_len: int | None = None

    RULES: ClassVar[dict[str, Rule]] = {
        "dtype": one_of(("auto", "float32", "bfloat16", "float16")),
        "kv_cache_gib": Rule(lambda v, _: v > 0, "> 0 (GiB of KV cache on the CPU)"),
        "threads": at_least(1),
        "gpu_memory_utilization": within(0, 1, open_lo=True),
        "max_model_len": Rule(lambda v, _: v >= 2, ">= 2, or null for the model's context length"),
    }


@dataclass(frozen=True)
class SandboxOpts:
    """How isolated model-written code must be (``reasonrl.rewards.sandbox``; docs/sandbox.md). ``require``
    is the weakest level a run accepts for a task that runs such code (AZR, EvoEnv, the CodeAct FHIR task,
    ``code``): namespaces > userns > uid > rlimits, a level or a stronger one. Checked before anything
    loads; ``rlimits`` is the opt-in for trusted code only (the program runs as the trainer's user, with
    its network and files). Issue 41."""

    require: str = DEFAULT_REQUIRE

    RULES: ClassVar[dict[str, Rule]] = {
        "require": one_of(LEVELS),
    }


@dataclass(frozen=True)
class RolloutOpts:
    """Where rollouts are generated. ``workers=0``: in the trainer's process; ``workers=N``: N Ray
    actors, each with a copy of the policy (``address``: a running Ray cluster, None: a local one).
    ``async_`` (key ``rollout.async``): generate batch k+1 while the trainer updates on batch k.
    ``engine``: ``hf`` (the own decode loop on the trainer's model) or ``vllm`` (a colocated vLLM with its
    own copy of the weights, pushed every ``sync_every`` optimiser steps; the gap between its log-probs and
    the trainer's corrected by ``is_correction``: ``tis``, truncated importance weights capped at
    ``is_cap``, or ``none``), issue 43, docs/generator.md."""

    engine: str = "hf"
    sync_every: int = 1
    is_correction: str = "tis"
    is_cap: float = 2.0  # TRL's vllm_importance_sampling_cap (token_truncate) and verl's tis_imp_ratio_cap use 2
    vllm: VLLMOpts = field(default_factory=VLLMOpts)
    workers: int = 0
    address: str | None = None
    async_: bool = False
    check_every: int | None = (
        None  # decode steps between host looks (stop strings, dropping finished rows); None: 1 on a CPU, 8 on a GPU
    )
    static_cache: bool = False  # transformers' StaticCache in the decode loop (fixed shapes; GPU)
    compile: bool = False  # torch.compile(mode="reduce-overhead") of the decode step: CUDA graphs; needs static_cache
    # mixed precision on CUDA: the policy's float32 output head in TF32 (models.memory.install_tf32_head)
    tf32_head: bool = True

    RULES: ClassVar[dict[str, Rule]] = {
        "workers": Rule(lambda v, _: v >= 0, ">= 0 (0: generate in the trainer's process)"),
        "engine": one_of(ENGINES),
        "sync_every": at_least(1),
        "is_correction": one_of(IS_CORRECTIONS),
        "is_cap": Rule(lambda v, _: v >= 1, ">= 1 (the largest importance weight a token keeps; TRL and verl use 2)"),
        "check_every": at_least(1),
        "compile": Rule(
            lambda v, c: not v or bool(c.get("static_cache")),
            "false unless rollout.static_cache=true (CUDA graphs need the static cache's fixed shapes)",
        ),
    }


@dataclass(frozen=True)
class DataOpts:
    """Which training items the run draws (``reasonrl.data.pool``). ``pool=N``: the first N distinct
    train items of the task, cycled in a fresh seeded order each epoch (what a selector needs: prompts
    that recur); 0: the task's own stream (endless fresh problems for the built-in tasks)."""

    pool: int = 0

    RULES: ClassVar[dict[str, Rule]] = {
        "pool": Rule(lambda v, _: v >= 0, ">= 0 (0: the task's own stream; N: its first N distinct train problems)"),
    }


@dataclass(frozen=True)
class Prompting:
    """How prompts reach the model (``format``: auto | chat | plain, ``system_prompt``, the template's
    ``chat_template_kwargs``; :mod:`reasonrl.models.chat`) and how long they may be (``max_tokens``,
    None: the context length less the budget; a longer one: ``overflow`` drop | truncate_left,
    :mod:`reasonrl.tasks.limits`). docs/models-and-data.md."""

    format: str = "auto"
    system_prompt: str | None = None
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    max_tokens: int | None = None
    overflow: str = "drop"

    RULES: ClassVar[dict[str, Rule]] = {
        "format": one_of(PROMPT_FORMATS),
        "system_prompt": Rule(
            lambda v, c: c.get("format") != "plain",
            "unset with prompt.format=plain (a system turn needs the chat template)",
        ),
        "max_tokens": Rule(lambda v, _: v >= 1, ">= 1, or null for the context length less max_new_tokens"),
        "overflow": one_of(PROMPT_OVERFLOW),
    }
