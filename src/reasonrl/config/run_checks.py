"""The run's checks across keys, before anything loads (what :func:`reasonrl.config.validate.check_run` adds to
the per-key range rules): user reward functions and weights, the sandbox level a task needs, the extra
rewards' own problems, what the recipe's parts need of the run, what FSDP and Ray rollout workers hold. One line
per problem, each naming the key."""

from __future__ import annotations

import importlib.util
import math
from typing import Any

from ..errors import UserError
from ..parts import Recipe
from ..parts.protocol import part_needs
from ..rewards import FunctionReward, is_reward_path
from ..rewards.sandbox import LEVELS, SandboxUnavailable, isolation
from ..rewards.sandbox.levels import stronger_or_equal
from ..tasks import BUILTIN, DEFAULT_TASK
from .rules import Values


def reward_func_problems(funcs: Any, weights: Any) -> list[str]:
    """``reward_funcs`` (``--reward path.py:fn``) load and take TRL's arguments, and ``reward_weights`` holds one
    finite number for the task's verifier and one per function (issue 46), all before any model loads."""
    out = []
    for spec in funcs if isinstance(funcs, (list, tuple)) else [funcs]:
        if not isinstance(spec, str) or not is_reward_path(spec):
            out.append(f"config key 'reward_funcs': {spec!r} is not path/to/file.py:function")
            continue
        try:
            FunctionReward(spec)
        except UserError as err:
            out.append(str(err))
    if weights is not None:
        n = 1 + (len(funcs) if isinstance(funcs, (list, tuple)) else 1)
        numbers = isinstance(weights, (list, tuple)) and all(
            isinstance(w, (int, float)) and not isinstance(w, bool) and math.isfinite(w) for w in weights
        )
        if not numbers or len(weights) != n:
            out.append(
                f"config key 'reward_weights' = {weights!r} must be {n} finite numbers: the task's verifier's "
                f"weight first, then one per reward function ({n - 1} in reward_funcs)"
            )
    return out


def sandbox_problems(values: Values) -> list[str]:
    """A task that runs model-written code (its class declares ``untrusted_code = True``) needs the sandbox
    level ``sandbox.require`` or a stronger one here (issue 41): the levels are probed now (a tiny program
    each, once per process), before anything loads, instead of the run falling back to a weak level."""
    task, require = values.get("task") or DEFAULT_TASK, values.get("sandbox.require")
    task_cls = BUILTIN.get(task) if isinstance(task, str) else None
    if not getattr(task_cls, "untrusted_code", False) or require not in LEVELS:
        return []  # a bad value of the key is its rule's line
    try:
        info = isolation()
    except SandboxUnavailable as err:
        found, why = "none", str(err)
    else:
        if stronger_or_equal(info.level, require):
            return []
        found, why = info.level, "; ".join(f"{k}: {v}" for k, v in info.unavailable.items())
    opt_in = found if found in LEVELS else "rlimits"
    return [
        f"config key 'sandbox.require' = {require!r}: task {task!r} runs model-written code, and the strongest "
        f"sandbox level on this machine is {found!r} ({why}); run where Linux namespaces work (util-linux "
        f"unshare, as root or with unprivileged user namespaces), or opt in with sandbox.require={opt_in} "
        "(trusted code only: it then runs with the trainer's user, network and files; docs/sandbox.md)"
    ]


def reward_problems(recipe: Recipe) -> list[str]:
    """What an extra reward can tell is wrong before any model loads (its ``problems()``: one line
    each; a reward model's unset or missing directory)."""
    return [line for fn, _ in recipe.extra_rewards for line in (getattr(fn, "problems", None) or list)()]


def need_problems(values: Values, recipe: Recipe) -> list[str]:
    """What the recipe's parts need of the run (their ``needs``) and the run does not give."""
    out = []
    for key, part in recipe.hooked():
        needs = part_needs(part)
        if "pool" in needs and not values.get("data.pool"):
            out.append(
                f"recipe {recipe.name!r}: its part {key!r} keeps per-prompt state across epochs, so it needs "
                "prompts that recur: set data.pool=N (the first N distinct train problems of the task)"
            )
        if "lora" in needs and not values.get("lora.r"):
            out.append(
                f"recipe part {key!r} needs LoRA (its modules are adapters on one backbone): set lora.r > 0 "
                "(e.g. lora.r=8)"
            )
        workers = values.get("rollout.workers")
        if "in_process" in needs and isinstance(workers, int) and workers > 0:
            out.append(
                f"config key 'rollout.workers' = {workers} needs plain sampling; recipe {recipe.name!r} uses "
                f"{key} ({key}'s rollouts run on the trainer's model): set rollout.workers=0"
            )
    return out


def fsdp_problems(values: Values, recipe: Recipe) -> list[str]:
    """What ``dist.strategy=fsdp`` (FSDP2 shards, :mod:`reasonrl.dist.fsdp`) does not hold, one line each."""
    if values.get("dist.strategy") != "fsdp":
        return []
    out, r = [], values.get("lora.r")
    if isinstance(r, int) and r > 0:
        out.append(
            f"config key 'lora.r' = {r} with dist.strategy=fsdp: LoRA adapters are not sharded (peft's modules "
            "and adapter checkpoints are not built for FSDP2); use dist.strategy=ddp (adapters are small to "
            "replicate) or lora.r=0"
        )
    for key, part in recipe.hooked():
        for hook, what in (
            ("setup_model", "adds modules to the model"),
            ("setup_modules", "trains modules of its own"),
        ):
            if hasattr(part, hook):
                out.append(
                    f"recipe part {key!r} {what} ({hook}), which dist.strategy=fsdp does not shard: use "
                    "dist.strategy=ddp"
                )
        if "policy_in_loss" in part_needs(part):
            out.append(
                f"recipe part {key!r} runs the policy inside its loss term a data-dependent number of times, and "
                "dist.strategy=fsdp needs every rank to run the same forwards: use dist.strategy=ddp"
            )
    return out


def rollout_problems(values: Values, recipe: str) -> list[str]:
    """Ray rollout workers (``rollout.workers > 0``) need Ray; asynchronous generation needs workers.
    (Parts whose rollouts run on the trainer's model say so in their ``needs``: :func:`need_problems`.)"""
    workers = values.get("rollout.workers")
    if not isinstance(workers, int) or workers <= 0:
        if not values.get("rollout.async_"):
            return []
        return [
            "config key 'rollout.async' = true needs rollout.workers >= 1 (asynchronous generation runs on "
            "Ray rollout workers): set rollout.workers or drop rollout.async"
        ]
    if importlib.util.find_spec("ray") is None:
        return [
            f"config key 'rollout.workers' = {workers} runs rollout workers on Ray, which is not installed: "
            "pip install ray (or pip install 'reasonrl[ray]'), or set rollout.workers=0"
        ]
    return []
