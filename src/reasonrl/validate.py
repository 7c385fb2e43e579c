"""Every knob of a run checked before anything is loaded: types, finiteness and ranges.

:func:`check_run` walks the run config and every part of the recipe generically (so a field a part
gains later is covered without touching this module): each value must have its annotated type,
every float must be finite (a NaN learning rate or KL weight trains nothing and says nothing), and
each key in :data:`RULES` must satisfy its rule. All problems are reported at once, one line each,
in a :class:`~reasonrl.errors.UserError` that names the key, the bad value and the valid range.

:func:`check_inputs` builds the task (which reads and validates its data) and checks the model
name, so a bad task file or model folder also fails before a model is loaded.
"""
from __future__ import annotations

import dataclasses
import functools
import importlib.util
import math
import types
import typing
from typing import Any

import torch

from .advantages import ESTIMATORS, SCALES, VETO_TRIGGERS, get_estimator
from .config import KEY_ALIASES, RECIPE_SCALARS, RECIPE_SECTIONS, TrainConfig
from .errors import UserError
from .losses.aggregate import AGG_MODES
from .losses.kl import KL_ESTIMATORS
from .losses.policy import RATIO_LEVELS, TRUST_REGIONS
from .losses.divergence import DIVERGENCES
from .losses.selfteach import DIRECTIONS, FRONTIER_FORMS, MAGNITUDE_FORMS
from .parts import Recipe
from .parts.selfteach import template_problem
from .parts.teacher import TGPO_VARIANTS
from .distill.teacher import teacher_problem
from .rewards.options import rewards_dict
from .rules import SEED, Rule, Values, above, at_least, one_of, within  # noqa: F401 - re-exported
from .validate_methods import METHOD_RULES
from .tasks import get_task

@functools.lru_cache(maxsize=None)
def group_relative(estimator: str) -> bool:
    """True when the estimator compares a prompt's samples with each other, so a group of one
    sample gets no signal: probed on two one-sample groups with different rewards (an all-zero
    advantage, or a refusal as rloo's, means group-relative). Covers estimators added later."""
    if estimator not in ESTIMATORS:
        return False  # reported by the advantage.estimator rule
    try:
        adv = get_estimator(estimator)(torch.tensor([[0.0], [1.0]]))  # (B=2, G=1)
    except ValueError:
        return True
    return bool((adv == 0).all())


def _min_group(values: Values) -> int:
    return 2 if group_relative(values.get("advantage.estimator", "")) else 1


def _group_text(values: Values) -> str:
    estimator = values.get("advantage.estimator")
    if _min_group(values) == 2:
        return f">= 2 (estimator {estimator!r} compares the samples of a prompt; a group of 1 learns nothing)"
    return ">= 1"


ROWS = Rule(lambda v, _: v == "auto" or (isinstance(v, int) and not isinstance(v, bool) and v >= 1),
            "auto (from free GPU memory) or an integer >= 1")
TEMPLATE = Rule(lambda v, _: template_problem(v) is None,
                "a format string with {prompt} and {solution} and no other field")
RULES: dict[str, Rule] = {
    # run
    "steps": Rule(lambda v, _: v >= 0, ">= 0 (0: evaluate only)"),
    "prompts_per_step": at_least(1),
    "micro_batch_size": ROWS,
    "max_rows": ROWS,
    "seed": SEED,
    "eval_seed": SEED,
    "eval_every": Rule(lambda v, _: v >= 0, ">= 0 (0: no held-out eval during training)"),
    "eval_problems": Rule(lambda v, c: v >= 1 or c.get("eval_every") == 0, ">= 1 (or eval_every=0 to turn the eval off)"),
    "final_eval_problems": Rule(lambda v, _: v >= 0, ">= 0 (0: no before/after eval)"),
    "final_eval_k": Rule(lambda v, _: v >= 0, ">= 0 (0: greedy only)"),
    "final_eval_temperature": Rule(lambda v, _: v > 0, "> 0 (the sampled completions; greedy pass@1 is always reported)"),
    "save_every": Rule(lambda v, _: v >= 0, ">= 0 (0: no checkpoints)"),
    "keep_last": Rule(lambda v, _: v >= 0, ">= 0 (0: keep every checkpoint)"),
    "max_nonfinite": at_least(1),
    "dtype": one_of(("float32", "bfloat16", "float16")),  # models.loading.DTYPES, not imported: it pulls in transformers
    "device": Rule(lambda v, _: not v.startswith("cuda") or torch.cuda.is_available(),
                   "a device this machine has (torch sees no CUDA device: use auto or cpu)"),
    "lora.r": Rule(lambda v, _: v >= 0, ">= 0 (0: full fine-tuning, no adapters)"),
    "lora.alpha": Rule(lambda v, _: v > 0, "> 0 (the adapter update is scaled by alpha / r)"),
    "lora.dropout": within(0, 1, open_hi=True),
    "dist.strategy": Rule(lambda v, _: v == "ddp", "ddp (fsdp, FSDP2 sharding, is not built yet)"),
    "dist.backend": one_of(("auto", "gloo", "nccl")),
    "rollout.workers": Rule(lambda v, _: v >= 0, ">= 0 (0: generate in the trainer's process)"),
    "data.pool": Rule(lambda v, _: v >= 0, ">= 0 (0: the task's own stream; N: its first N distinct train problems)"),
    "rollout.check_every": at_least(1),
    "rollout.compile": Rule(lambda v, c: not v or bool(c.get("rollout.static_cache")),
                            "false unless rollout.static_cache=true (CUDA graphs need the static cache's fixed shapes)"),
    # recipe scalars
    "group_size": Rule(lambda v, c: v >= _min_group(c), _group_text),
    # advantage
    "advantage.estimator": one_of(ESTIMATORS),
    "advantage.scale": one_of(SCALES),
    "advantage.eps": at_least(0),
    # policy loss
    "loss.ratio": one_of(RATIO_LEVELS),
    "loss.trust_region": one_of(TRUST_REGIONS),
    "loss.agg": one_of(AGG_MODES),
    "loss.clip_low": at_least(0),
    "loss.clip_high": at_least(0),
    "loss.dual_clip": Rule(lambda v, _: v > 1, "> 1 (Ye et al. 2020 use 3), or null for none"),
    "loss.norm_len": Rule(lambda v, _: v >= 1, ">= 1, or null for the generation budget"),
    "loss.veto.trigger": one_of(VETO_TRIGGERS),
    "loss.veto.clip_low": at_least(0),
    "loss.veto.clip_high": at_least(0),
    # KL anchor
    "kl.coef": Rule(lambda v, _: v >= 0, ">= 0 (0: no KL term, no reference model)"),
    "kl.estimator": one_of(KL_ESTIMATORS),
    "kl.ratio": at_least(0),
    "kl.q_min": at_least(0),
    "kl.q_max": Rule(lambda v, c: v >= c.get("kl.q_min", 0), lambda c: f">= kl.q_min = {c.get('kl.q_min')}"),
    "kl.guide": one_of(("branch", "token", "random")),
    "kl.n_cycles": at_least(1),
    "kl.decay": within(0, 1, open_lo=True),
    "kl.norm": one_of(("minmax", "rank", "zscore")),
    "kl.source": one_of(("new", "ref")),
    # sampling
    "sampling.temperature": Rule(lambda v, _: v >= 0, ">= 0 (0: greedy)"),
    "sampling.top_p": within(0, 1, open_lo=True),
    "sampling.top_k": Rule(lambda v, _: v >= 0, ">= 0 (0: off)"),
    "sampling.min_p": within(0, 1, open_hi=True),  # only where Sampling has the field
    "sampling.max_new_tokens": Rule(lambda v, _: v >= 1, ">= 1, or null for the task's budget"),
    # optimiser
    "optim.lr": above(0),
    "optim.weight_decay": at_least(0),
    "optim.beta1": within(0, 1, open_hi=True),
    "optim.beta2": within(0, 1, open_hi=True),
    "optim.warmup_steps": at_least(0),
    "optim.schedule": one_of(("cosine", "constant")),  # the trainer's lr_lambda
    "optim.min_lr_ratio": within(0, 1),
    "optim.max_grad_norm": above(0),
    "optim.mu": at_least(1),
    "optim.minibatches": at_least(1),
    # optional parts (checked only when the recipe has them)
    "group_filter.max_rounds": Rule(lambda v, _: v >= 1, ">= 1, or null to refill until the batch is full"),
    "group_filter.max_rounds_cap": at_least(1),
    "stages.count": at_least(1),
    "steering.layer": at_least(0),
    "steering.alpha_max": at_least(0),
    "steering.alphas": one_of(("grid", "uniform")),
    "steering.anneal": one_of(("none", "linear", "cosine")),
    "beam.first_frac": within(0, 1, open_lo=True),
    "beam.k_max": at_least(1),
    # self-teachers (parts/selfteach.py)
    "ssopd.coef": at_least(0),
    "ssopd.template": TEMPLATE,
    "ssopd.divergence": one_of(DIVERGENCES),
    "ssopd.beta": within(0, 1),
    "ssopd.top_k": Rule(lambda v, _: v >= 1, ">= 1, or null for the full vocabulary"),
    "ssopd.clip": Rule(lambda v, _: v > 0, "> 0, or null for no clip"),
    "ssopd.frontier": one_of(FRONTIER_FORMS),
    "ssopd.max_prefix_tokens": Rule(lambda v, _: v >= 1, ">= 1, or null to distil every token"),
    "egrsd.template": TEMPLATE,
    "egrsd.direction": one_of(DIRECTIONS),
    "egrsd.magnitude": one_of(MAGNITUDE_FORMS),
    "egrsd.cap": Rule(lambda v, c: v >= 1 if c.get("egrsd.magnitude") == "ratio" else v > 0,
                      lambda c: ">= 1 (magnitude 'ratio' clips to [1/cap, cap])" if c.get("egrsd.magnitude") == "ratio"
                      else "> 0"),
    "egrsd.g_min": within(0, 1, open_lo=True),
    "egrsd.tau": above(0),
    "egrsd.lookahead": Rule(lambda v, _: v >= 0, ">= 0 (0: plain EGRSD, K >= 1: CL-EGRSD's window)"),
    "egrsd.alpha": at_least(0),
    "teacher.model": Rule(lambda v, _: teacher_problem(v) is None,
                          lambda c: f"a local HF model directory, tiny:<size> or builtin:teacher ({teacher_problem(c['teacher.model'])})"),
    "teacher.dtype": one_of(("float32", "bfloat16", "float16")),
    "teacher.chunk_rows": at_least(1),
    "tgpo.variant": Rule(lambda v, c: v in TGPO_VARIANTS and c.get("teacher.model") is not None,
                         f"one of {', '.join(TGPO_VARIANTS)}, with the teacher part on (teacher.model=PATH)"),
    "tgpo.coef": at_least(0), "tgpo.decay": at_least(0), "tgpo.min_coef": at_least(0),
    "rkl_opd.coef": Rule(lambda v, c: v >= 0 and c.get("teacher.model") is not None,
                         ">= 0, with the teacher part on (teacher.model=PATH)"),
    "kdrl.coef": Rule(lambda v, c: v >= 0 and c.get("teacher.model") is not None,
                      ">= 0, with the teacher part on (teacher.model=PATH)"),
    "kdrl.estimator": one_of(KL_ESTIMATORS),
    "hints.n_hints": at_least(1),
    # NudgeRL spends a group on M hints x K rollouts: G = M * K exactly (parts/nudge.py)
    "hints.per_hint": Rule(lambda v, c: v >= 1 and (c.get("hints.n_hints", 1) < 1  # that one is reported on its own
                                                     or v * c.get("hints.n_hints", 1) == c.get("group_size")),
                           lambda c: f">= 1 with hints.n_hints * hints.per_hint = group_size "
                                     f"({c.get('hints.n_hints')} * per_hint = {c.get('group_size')})"),
    "hints.p_drop": within(0, 1),
    "hints.sampler": one_of(("sequential", "random")),
    "hints.adv_lambda": at_least(0),
    "hints.distill_coef": at_least(0),
    "hints.template": Rule(lambda v, _: "{hint}" in v and "{prompt}" in v,
                           "a text containing {hint} and {prompt} (the hinted prompt should end as the bare one)"),
    "correction.p_max": within(0, 1, open_lo=True),
    "correction.q0": within(0, 1),
    "correction.kappa": at_least(0),
    "correction.weight": above(0),
    "correction.rho": within(0, 1, open_lo=True),
    "correction.rho_min": Rule(lambda v, c: 0 <= v <= c.get("correction.rho", 1),
                               lambda c: f"in [0, correction.rho = {c.get('correction.rho')}]"),
    "correction.acc_floor": within(0, 1),
    "correction.factor": Rule(lambda v, _: v >= 1, ">= 1 (1: a fixed replay ratio)"),
    "correction.template": Rule(lambda v, _: "{prompt}" in v and "{attempt}" in v,
                                "text with the slots {prompt} and {attempt} (end it with {prompt})"),
    # STRIDE redirection: a group packs group_size // n_r redirections (group_size // n_v critiques)
    "redirect.critic": one_of(("task", "model")),
    "redirect.n_r": Rule(lambda v, c: v >= 1 and c.get("group_size", v) % v == 0,
                         lambda c: f"a divisor of group_size = {c.get('group_size')} (>= 1)"),
    "redirect.n_v": Rule(lambda v, c: v >= 1 and c.get("group_size", v) % v == 0,
                         lambda c: f"a divisor of group_size = {c.get('group_size')} (>= 1)"),
    "redirect.clip": above(0),
    "redirect.lambda_r": at_least(0),
    "redirect.eta": at_least(0),
    "redirect.max_redirects": Rule(lambda v, _: v >= 1, ">= 1, or null for the number of prompts per step"),
    "redirect.template": Rule(lambda v, _: "{critique}" in v, "text containing {critique}"),
    **METHOD_RULES,  # D2Evo, FEST, drafts, VPD, SU-01 (validate_methods.py)
}

# the options of `reasonrl eval` and `reasonrl pretrain` (not run config keys), checked the same way
OPTION_RULES: dict[str, dict[str, Rule]] = {
    "eval": {"--problems": at_least(1), "--samples-per-problem": Rule(lambda v, _: v >= 0, ">= 0 (0: greedy only)"),
             "--temperature": at_least(0), "--top-p": within(0, 1, open_lo=True), "--max-new-tokens": at_least(1),
             "--seed": SEED, "--sample-seed": SEED},
    "pretrain": {"--steps": at_least(1), "--seconds": above(0), "--batch-size": at_least(1), "--lr": above(0),
                 "--eval-every": Rule(lambda v, _: v >= 0, ">= 0 (0: only at the end)"), "--eval-problems": at_least(1),
                 "--until-pass": within(0, 1), "--seed": SEED},
}

_KINDS = {bool: "true or false", int: "an integer", float: "a number", str: "text", type(None): "null"}


def _simple_types(hint: Any) -> tuple[type, ...] | None:
    """The plain types a field accepts (``float | None`` -> (float, NoneType)); None when the
    annotation is anything else (tuples, dicts, parts), which the type check leaves alone."""
    args = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    return args if all(a in _KINDS for a in args) else None


def _fits(value: Any, kinds: tuple[type, ...]) -> bool:
    if isinstance(value, bool):  # a bool is an int to Python, never to a config
        return bool in kinds
    if isinstance(value, int):
        return int in kinds or float in kinds
    return any(isinstance(value, k) for k in kinds if k is not bool and k is not int)


def _walk(obj: Any, prefix: str, out: dict[str, tuple[Any, Any]]) -> None:
    """Every leaf of a dataclass (nested parts and dicts included) as dotted key -> (value, hint)."""
    hints = typing.get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        _leaf(getattr(obj, f.name), hints.get(f.name), f"{prefix}{f.name}", out)


def _leaf(value: Any, hint: Any, key: str, out: dict[str, tuple[Any, Any]]) -> None:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        _walk(value, key + ".", out)
    elif isinstance(value, dict):
        for k, v in value.items():
            _leaf(v, None, f"{key}.{k}", out)
    else:
        out[key] = (value, hint)


def run_values(cfg: TrainConfig, recipe: Recipe) -> dict[str, tuple[Any, Any]]:
    """Every knob of the run as dotted key -> (value, type annotation or None): the run config, the
    recipe's scalars and sections (optional ones only when on) and its rewards' options."""
    out: dict[str, tuple[Any, Any]] = {}
    _walk(cfg, "", out)
    recipe_hints = typing.get_type_hints(Recipe)
    for name in RECIPE_SCALARS:
        out[name] = (getattr(recipe, name), recipe_hints[name])
    for name in RECIPE_SECTIONS:
        part = getattr(recipe, name, None)
        if part is not None:
            _walk(part, name + ".", out)
    for reward, options in rewards_dict(recipe.extra_rewards).items():
        for option, value in options.items():
            _leaf(value, None, f"rewards.{reward}.{option}", out)
    return out


def problems(cfg: TrainConfig, recipe: Recipe) -> list[str]:
    """One line per invalid knob: wrong type, non-finite float, or outside its rule's range."""
    entries = run_values(cfg, recipe)
    out, bad = [], set()
    for key, (value, hint) in entries.items():
        kinds = _simple_types(hint) if hint is not None else None
        if kinds is not None and not _fits(value, kinds):
            out.append(f"config key {_shown(key)!r} must be {' or '.join(_KINDS[k] for k in kinds)}, got {value!r}")
            bad.add(key)
        elif isinstance(value, float) and not math.isfinite(value):
            out.append(f"config key {key!r} must be a finite number, got {value!r}")
            bad.add(key)
    values = {k: v for k, (v, _) in entries.items() if k not in bad}
    return out + range_problems(values, RULES, "config key") + rollout_problems(values, recipe.name)


def _shown(key: str) -> str:
    """The dotted key as the user writes it (``rollout.async``, not the field name ``async_``)."""
    names = {field: alias for alias, field in KEY_ALIASES.items()}
    return ".".join(names.get(part, part) for part in key.split("."))


def rollout_problems(values: Values, recipe: str) -> list[str]:
    """Ray rollout workers (``rollout.workers > 0``) need Ray and plain sampling (per-prompt seeds
    split over workers; beam branching and steering hooks run on the trainer's model); asynchronous
    generation needs workers."""
    workers = values.get("rollout.workers")
    if not isinstance(workers, int) or workers <= 0:
        if not values.get("rollout.async_"):
            return []
        return ["config key 'rollout.async' = true needs rollout.workers >= 1 (asynchronous generation runs on "
                "Ray rollout workers): set rollout.workers or drop rollout.async"]
    out = []
    uses = [part for part, key in (("beam", "beam.k_max"), ("steering", "steering.layer"),
                                          ("redirect", "redirect.n_r")) if values.get(key) is not None]
    if uses:
        out.append(f"config key 'rollout.workers' = {workers} needs plain sampling; recipe {recipe!r} uses {uses[0]} "
                   f"({uses[0]}'s rollouts run on the trainer's model): set rollout.workers=0")
    if importlib.util.find_spec("ray") is None:
        out.append(f"config key 'rollout.workers' = {workers} runs rollout workers on Ray, which is not installed: "
                   "pip install ray (or pip install 'reasonrl[ray]'), or set rollout.workers=0")
    return out


def range_problems(values: Values, rules: dict[str, Rule], label: str) -> list[str]:
    """One line per key of ``rules`` whose value in ``values`` breaks its rule; a key that is absent
    or None (a field a part does not have, an optional part that is off, an unset option) passes."""
    out = []
    for key, rule in rules.items():
        value = values.get(key)
        if value is None:
            continue
        try:
            ok = rule.ok(value, values)
        except TypeError:  # a knob this rule reads is itself of the wrong type, reported on its own
            continue
        if not ok:
            out.append(f"{label} {key!r} = {value!r} is out of range: must be {rule.describe(values)}")
    return out


def check_run(cfg: TrainConfig, recipe: Recipe) -> None:
    """Raise a UserError listing every invalid knob of the run (see :data:`RULES`)."""
    found = problems(cfg, recipe)
    if found:
        raise UserError("\n".join(found))


def check_options(values: Values, rules: dict[str, Rule]) -> None:
    """The same checks for command-line options outside the run config (``{"--problems": 0}``)."""
    nonfinite = {k for k, v in values.items() if isinstance(v, float) and not math.isfinite(v)}
    found = [f"option {k!r} must be a finite number, got {values[k]!r}" for k in sorted(nonfinite)]
    found += range_problems({k: v for k, v in values.items() if k not in nonfinite}, rules, "option")
    if found:
        raise UserError("\n".join(found))


def check_inputs(cfg: TrainConfig) -> None:
    """The model name can load and the task can be built (its data read and validated)."""
    get_task(cfg.task, **cfg.task_options)
    from .models.loading import check_model_name  # imports transformers: only once the rest is valid

    check_model_name(cfg.model)


__all__ = ["OPTION_RULES", "RULES", "Rule", "check_inputs", "check_options", "check_run", "group_relative", "problems", "run_values"]
