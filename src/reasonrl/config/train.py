"""Run configuration: a dataclass, a YAML file and dotted ``key=value`` overrides, validated.

One flat namespace: the fields of :class:`TrainConfig` (``steps``, ``lr`` is *not* one of them:
optimiser settings belong to the recipe) plus the recipe's sections (``optim.lr``,
``loss.clip_high``, ``advantage.scale``, ``kl.coef``, ``sampling.temperature``) and scalars
(``group_size``, ``entropy_coef``), and ``rewards.<name>.<option>`` for the recipe's extra rewards
(:mod:`reasonrl.rewards.options`). A typo names the bad key, the closest valid one and all valid ones.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import yaml

import torch

from ..errors import MissingPathError, UserError
from ..rewards.options import apply_reward_overrides, rewards_dict
from ..parts import IDENTITY, PART_TYPES, Recipe
from .rules import SEED, Rule, at_least, one_of
from .sections import ROWS, DataOpts, Dist, Guidance, Lora, Memory, Prompting, RolloutOpts, SandboxOpts

KEY_ALIASES = {"async": "async_"}  # field names that are Python keywords


def recipe_sections(recipe: Recipe | None = None) -> dict[str, type]:
    """Config section -> part class, derived from the Recipe: its dataclass-valued fields (``loss``,
    ``kl``, ``group_filter``, ``selector``, ...) and every registered method part (``correction``,
    ``vpd``, ...). A section the given ``recipe`` fills with another class of part validates
    against that class (a selector other than LZE)."""
    out: dict[str, type] = {}
    for f in dataclasses.fields(Recipe):
        cls = f.metadata.get("part") or nested_part(Recipe, f.name)
        if cls is not None:
            out[f.name] = cls
    out.update(PART_TYPES)
    if recipe is not None:
        for name in out:
            value = getattr(recipe, name, None)
            if dataclasses.is_dataclass(value):
                out[name] = type(value)
    return out


def optional_sections() -> tuple[str, ...]:
    """The sections a recipe may lack (None turns the part off, a mapping turns it on)."""
    hints = typing.get_type_hints(Recipe)  # a field typed "X | None" may be turned off (loss=null)
    return tuple(
        f.name for f in dataclasses.fields(Recipe) if f.default is None or type(None) in typing.get_args(hints[f.name])
    ) + tuple(PART_TYPES)


def recipe_scalars() -> tuple[str, ...]:
    """The Recipe's plain number / flag fields (``group_size``, ``entropy_coef``, ...)."""
    hints = typing.get_type_hints(Recipe)
    return tuple(
        f.name for f in dataclasses.fields(Recipe) if f.name not in IDENTITY and hints[f.name] in (int, float, bool)
    )


@dataclass
class TrainConfig:
    recipe: str = "grpo"
    model: str | None = None  # None: the shipped base
    task: str | None = None  # None: arithmetic
    task_options: dict[str, Any] = field(default_factory=dict)
    steps: int = 180  # the defaults are the tuned no-argument run: ~4 min on 2 CPU cores (README)
    prompts_per_step: int = 8
    micro_batch_size: int | str = (
        "auto"  # rows per forward/backward (auto: from free GPU memory, models.memory); memory only, never the maths
    )
    skip_zero_advantage_rows: bool = True  # exact when the loss is the policy term alone (trainer docs)
    seed: int = 0  # training: prompt order, sampling, minibatch order
    eval_seed: int = 0  # which held-out problems are evaluated: fixed, so runs of any seed share them
    out: str | None = None  # None: runs/<recipe>-<time>
    eval_every: int = 30  # greedy held-out pass@1 every N steps (0: off)
    eval_problems: int = 200
    final_eval_problems: int = 500  # before/after evaluation, as `reasonrl eval`
    final_eval_k: int = 8
    save_every: int = 30
    keep_last: int = 2
    reward_funcs: list[str] = field(
        default_factory=list
    )  # path/to/file.py:fn rewards added to the task's verifier (--reward)
    reward_weights: list[float] | None = None  # the verifier's weight, then one per reward_funcs entry (default all 1)
    tracking: list[str] = field(default_factory=lambda: ["jsonl"])  # sinks: jsonl (always), tensorboard, wandb, trackio
    log_completions: int | float = (
        2  # rollouts per step written to completions.jsonl as text (a fraction < 1: of the rows; 0: off)
    )
    max_nonfinite: int = 3  # consecutive skipped steps (NaN/inf loss or gradient) before stopping
    max_rows: int | str = (
        "auto"  # rows decoded at once by the rollout engine (auto: from free GPU memory; 512 off CUDA)
    )
    device: str = "auto"  # auto (cuda if available, else cpu) | cpu | cuda | cuda:N
    dtype: str = "float32"  # float32 | bfloat16 (GPU) | float16: the compute dtype
    master_fp32: bool = (
        True  # half dtype: fp32 weights + AdamW states, forward under autocast (false: weights in dtype, lossy updates)
    )
    lora: Lora = field(default_factory=Lora)  # lora.r=16 trains adapters only (models.lora)
    guidance: Guidance = field(default_factory=Guidance)  # guidance.hints=FILE.jsonl: hints / solutions / critiques
    memory: Memory = field(default_factory=Memory)
    dist: Dist = field(default_factory=Dist)
    rollout: RolloutOpts = field(default_factory=RolloutOpts)
    data: DataOpts = field(default_factory=DataOpts)  # data.pool=N: a finite pool with epochs
    prompt: Prompting = field(
        default_factory=Prompting
    )  # prompt.format=chat, prompt.max_tokens=N: prompts as the model sees them
    sandbox: SandboxOpts = field(
        default_factory=SandboxOpts
    )  # sandbox.require=userns: the isolation model-written code needs
    final_eval_temperature: float = 1.0  # of the before/after eval's sampled completions (unlearnability, spec 12: 0.7)

    RULES: ClassVar[dict[str, Rule]] = {
        "steps": Rule(lambda v, _: v >= 0, ">= 0 (0: evaluate only)"),
        "prompts_per_step": at_least(1),
        "micro_batch_size": ROWS,
        "max_rows": ROWS,
        "seed": SEED,
        "eval_seed": SEED,
        "eval_every": Rule(lambda v, _: v >= 0, ">= 0 (0: no held-out eval during training)"),
        "eval_problems": Rule(
            lambda v, c: v >= 1 or c.get("eval_every") == 0, ">= 1 (or eval_every=0 to turn the eval off)"
        ),
        "final_eval_problems": Rule(lambda v, _: v >= 0, ">= 0 (0: no before/after eval)"),
        "final_eval_k": Rule(lambda v, _: v >= 0, ">= 0 (0: greedy only)"),
        "final_eval_temperature": Rule(
            lambda v, _: v > 0, "> 0 (the sampled completions; greedy pass@1 is always reported)"
        ),
        "save_every": Rule(lambda v, _: v >= 0, ">= 0 (0: no checkpoints)"),
        "keep_last": Rule(lambda v, _: v >= 0, ">= 0 (0: keep every checkpoint)"),
        "max_nonfinite": at_least(1),
        "log_completions": Rule(
            lambda v, _: v == 0 or 0 < v < 1 or (v >= 1 and v == int(v)),
            "0 (off), a whole number of rows per step, or a fraction in (0, 1) of the step's rows",
        ),
        "dtype": one_of(
            ("float32", "bfloat16", "float16")
        ),  # models.loading.DTYPES (importing it pulls in transformers)
        "device": Rule(
            lambda v, _: not v.startswith("cuda") or torch.cuda.is_available(),
            "a device this machine has (torch sees no CUDA device: use auto or cpu)",
        ),
    }


def unknown_key(key: str, valid: list[str]) -> UserError:
    """One short line: the closest few keys (difflib) and the `reasonrl keys` command that lists them all with
    type, default and help (issue 46: the whole list was one line of about 5,900 characters)."""
    near = difflib.get_close_matches(key, valid, n=4, cutoff=0.6)
    hint = f" (did you mean {near[0]!r}?)" if near else ""
    if len(near) > 1:
        hint += f"; other close keys: {', '.join(repr(k) for k in near[1:])}"
    section = key.partition(".")[0]
    scoped = (
        f"; `reasonrl keys {section}.` lists the {section} keys"
        if any(k.startswith(section + ".") for k in valid)
        else ""
    )
    return UserError(
        f"unknown config key {key!r}{hint}{scoped}; `reasonrl keys [PATTERN]` lists all {len(valid)} "
        "with type, default and help"
    )


def dotted_to_nested(pairs: dict[str, Any]) -> dict[str, Any]:
    """{"optim.lr": 1e-5, "steps": 3} -> {"optim": {"lr": 1e-5}, "steps": 3}."""
    out: dict[str, Any] = {}
    for key, value in pairs.items():
        head, _, rest = key.partition(".")
        if rest:
            out.setdefault(head, {})
            if not isinstance(out[head], dict):
                raise UserError(f"config key {head!r} is not a section, so {key!r} is invalid")
            out[head] = merge(out[head], dotted_to_nested({rest: value}))  # deep: a.b.c and a.b.d both kept
        else:
            out[head] = value
    return out


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) and k != "task_options" else v
    return out


def valid_keys() -> list[str]:
    keys = list(recipe_scalars())
    for f in dataclasses.fields(TrainConfig):  # a nested run part (lora) by its dotted keys
        part = nested_part(TrainConfig, f.name)
        keys += _section_keys(part, f.name) if part else [f.name]
    for name, cls in recipe_sections().items():
        keys += _section_keys(cls, name)
    return keys + ["rewards.<name>.<option>"]


def _section_keys(cls: type, prefix: str) -> list[str]:
    out = []
    for f in dataclasses.fields(cls):
        part = nested_part(cls, f.name)
        out += _section_keys(part, f"{prefix}.{f.name}") if part else [f"{prefix}.{f.name}"]
    return out


def coerce(cls: type, key: str, value: Any, where: str) -> Any:
    """Convert ``value`` to the annotated number type of ``cls.key`` where YAML left it a string
    (YAML 1.1 reads ``1e-4`` as text) or an int; a value that cannot be converted names the key."""
    allowed = set(typing.get_args(typing.get_type_hints(cls)[key])) or {typing.get_type_hints(cls)[key]}
    if value is None or isinstance(value, bool) or not isinstance(value, (int, str)):
        return value
    text = str(value).strip()
    if int in allowed and re.fullmatch(r"[+-]?\d+", text):
        return int(text)
    if float in allowed:
        try:
            return float(text)
        except ValueError:
            raise UserError(f"config key {where!r} must be a number, got {value!r}") from None
    if int in allowed and str not in allowed:  # int | str (micro_batch_size: a number or auto): text stays text
        raise UserError(f"config key {where!r} must be an integer, got {value!r}")
    return value


def nested_part(cls: type, key: str) -> type | None:
    """The dataclass type of ``cls.key`` (e.g. ``PolicyLoss.veto: Veto | None`` -> Veto), else None."""
    hint = typing.get_type_hints(cls)[key]
    return next((t for t in (typing.get_args(hint) or (hint,)) if dataclasses.is_dataclass(t)), None)


def check_section(cls: type, value: dict[str, Any], where: str) -> dict[str, Any]:
    """Validate a section's keys (recursively into nested parts) and coerce its values."""
    fields = {f.name for f in dataclasses.fields(cls)}
    out = {}
    for sub, v in value.items():
        sub = KEY_ALIASES.get(sub, sub)
        if sub not in fields:
            raise unknown_key(f"{where}.{sub}", valid_keys())
        part = nested_part(cls, sub)
        out[sub] = (
            check_section(part, v, f"{where}.{sub}")
            if part and isinstance(v, dict)
            else coerce(cls, sub, v, f"{where}.{sub}")
        )
    return out


def build_part(cls: type, current: Any, value: dict[str, Any], where: str | None = None) -> Any:
    """``current`` (or a default ``cls()`` when it is None) with ``value``'s fields replaced, nested
    parts built the same way. A part's own check of its values (its ``__post_init__``, or a wrong
    type reaching it) becomes a :class:`UserError` naming the config keys given (``where`` is the
    section's dotted name, e.g. ``stages``)."""
    where = where or cls.__name__
    changes = {}
    for k, v in value.items():
        part = nested_part(cls, k)
        changes[k] = (
            build_part(part, getattr(current, k, None), v, f"{where}.{k}") if part and isinstance(v, dict) else v
        )
    try:
        return dataclasses.replace(current, **changes) if current is not None else cls(**changes)
    except (ValueError, TypeError) as err:
        given = ", ".join(f"{where}.{k}={v!r}" for k, v in value.items() if not isinstance(v, dict))
        raise UserError(f"bad value in config section {where!r} ({given or 'defaults'}): {err}") from err


def split_config(raw: dict[str, Any]) -> tuple[TrainConfig, dict[str, Any]]:
    """Validate a nested config dict; return the run config and the recipe overrides."""
    run_fields = {f.name for f in dataclasses.fields(TrainConfig)}
    sections, optional, scalars = recipe_sections(), optional_sections(), recipe_scalars()
    run, recipe = {}, {}
    for key, value in raw.items():
        if key in run_fields:
            run[key] = _run_value(key, value)
        elif key in scalars:
            recipe[key] = coerce(Recipe, key, value, key)
        elif key == "rewards":  # rewards.<name>.<option>: checked against the recipe in apply_overrides
            if not isinstance(value, dict):
                raise UserError("config key 'rewards' is a section: give rewards.<name>.<option>=value")
            recipe[key] = value
        elif key in optional and value is None:
            recipe[key] = None
        elif key in sections:
            if not isinstance(value, dict):
                raise UserError(f"config key {key!r} is a section: give {key}.<field>=value")
            recipe[key] = check_section(sections[key], value, key)
        else:
            raise unknown_key(key, valid_keys())
    return TrainConfig(**run), recipe


def _run_value(key: str, value: Any) -> Any:
    """A run field's value, coerced; a nested run part (``lora``) built from its section."""
    part = nested_part(TrainConfig, key)
    if key in ("tracking", "reward_funcs") and isinstance(value, str):  # tracking=wandb: one sink, not 5 letters
        return [name.strip() for name in value.split(",") if name.strip()]
    if part is None:
        return coerce(TrainConfig, key, value, key)
    if not isinstance(value, dict):
        raise UserError(f"config key {key!r} is a section: give {key}.<field>=value")
    return build_part(part, None, check_section(part, value, key), key)


def apply_overrides(recipe: Recipe, overrides: dict[str, Any]) -> Recipe:
    """A copy of ``recipe`` with section fields and scalars replaced."""
    changes: dict[str, Any] = {}
    sections = recipe_sections(recipe)
    for key, value in overrides.items():
        if key == "rewards":
            changes["extra_rewards"] = _reward_overrides(recipe, value)
        elif key in sections and value is not None:
            changes[key] = build_part(sections[key], getattr(recipe, key, None), value, key)
        else:
            changes[key] = value
    return dataclasses.replace(recipe, **changes)


def _reward_overrides(recipe: Recipe, value: dict[str, Any]):
    """``rewards.<name>.<option>`` applied; a reward's own check of an option becomes a UserError
    (the messages of :mod:`reasonrl.rewards.options` already name the key)."""
    try:
        return apply_reward_overrides(recipe.extra_rewards, value)
    except UserError:
        raise
    except ValueError as err:
        raise UserError(str(err)) from err
    except TypeError as err:
        raise UserError(f"bad value in config section 'rewards' ({value}): {err}") from err


def _plain(value: Any) -> Any:
    """Tuples as lists, recursively: YAML's safe dumper writes lists, not tuples."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def load_yaml(path: str | Path) -> dict[str, Any]:
    """A config file as a mapping; a missing, binary or malformed file is a UserError naming it
    (and the line and column YAML stopped at)."""
    path = Path(path)
    if not path.is_file():
        raise MissingPathError(
            f"config file {str(path)!r} does not exist" + (" (it is a folder)" if path.is_dir() else "")
        )
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except UnicodeDecodeError as err:
        raise UserError(f"config file {str(path)!r} is not a text file ({err.reason} at byte {err.start})") from err
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        raise UserError(f"{where}: not valid YAML ({getattr(err, 'problem', None) or err})") from err
    if not isinstance(data, dict):
        raise UserError(
            f"{path}: a config file must be a mapping of keys to values (key: value lines), got {type(data).__name__}"
        )
    return data


def resolved_dict(cfg: TrainConfig, recipe: Recipe) -> dict[str, Any]:
    """What config.yaml holds: every run field and every recipe knob, enough to rebuild the run."""
    out = _plain(dataclasses.asdict(cfg))  # lora.targets may be a tuple
    for name in recipe_sections(recipe):
        part = getattr(recipe, name)
        out[name] = None if part is None else _plain(dataclasses.asdict(part))
    out.update({k: getattr(recipe, k) for k in recipe_scalars()})
    out["rewards"] = _plain(rewards_dict(recipe.extra_rewards))
    return out
