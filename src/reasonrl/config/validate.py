"""Every knob of a run checked before anything is loaded: types, finiteness, ranges and needs.

:func:`check_run` walks the run config and every part of the recipe generically (so a field a part
gains later is covered without touching this module): each value must have its annotated type,
every float must be finite (a NaN learning rate or KL weight trains nothing and says nothing),
each key must satisfy the rule its class declares beside its fields (``RULES``: gathered by
:func:`all_rules`, none listed here), and what a part ``needs`` (a finite pool, LoRA, the
in-process engine) must be there. All problems are reported at once, one line each, in a
:class:`~reasonrl.errors.UserError` that names the key, the bad value and the valid range.

:func:`check_inputs` builds the task (which reads and validates its data), checks that it has the
abilities the recipe's parts declare in ``task_needs`` (:mod:`reasonrl.tasks.protocols`:
:func:`task_problems`) and checks the model name, so a bad task file, a task without the hints a
part needs or a bad model folder also fails before a model is loaded.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import dataclass
from typing import Any

from .train import KEY_ALIASES, TrainConfig, nested_part, recipe_scalars, recipe_sections
from ..errors import UserError
from ..loop.tracking import tracking_problems  # issue 46: the sinks are checked with the rest, before loading
from ..parts import Recipe
from ..parts.episodes import episodic_problems
from ..rewards.options import rewards_dict
from ..rollout.vllm_checks import vllm_problems  # issue 43
from .rules import SEED, Rule, Values, above, at_least, one_of, within  # noqa: F401 - re-exported
from .run_checks import (  # noqa: F401 - re-exported (tests, commands)
    fsdp_problems,
    need_problems,
    reward_func_problems,
    reward_problems,
    rollout_problems,
    sandbox_problems,
)
from ..tasks import GuidedTask, get_task
from ..tasks.protocols import missing, provides


@dataclass(frozen=True)
class ScopedRule:
    """A part's rule, read inside its section: the rule's own keys (``c.get("q_min")``) resolve to the
    section's (``kl.q_min``) first, then to the run's (``group_size``, ``teacher.model``)."""

    rule: Rule
    prefix: str

    def ok(self, value: Any, values: Values) -> bool:
        return self.rule.ok(value, _Scoped(values, self.prefix))

    def describe(self, values: Values) -> str:
        return self.rule.describe(_Scoped(values, self.prefix))


class _Scoped(dict):
    def __init__(self, values: Values, prefix: str):
        super().__init__(values)
        self.prefix = prefix

    def get(self, key: str, default: Any = None) -> Any:
        mine = f"{self.prefix}.{key}" if self.prefix else key
        return super().get(mine, super().get(key, default))

    def __getitem__(self, key: str) -> Any:
        return super().__getitem__(key)


def class_rules(cls: type, prefix: str) -> dict[str, ScopedRule]:
    """``cls.RULES`` as dotted keys under ``prefix``, with the rules of its nested parts (``loss.veto``)."""
    out = {f"{prefix}.{k}" if prefix else k: ScopedRule(rule, prefix) for k, rule in getattr(cls, "RULES", {}).items()}
    for f in dataclasses.fields(cls):
        nested = nested_part(cls, f.name)
        if nested is not None:
            out.update(class_rules(nested, f"{prefix}.{f.name}" if prefix else f.name))
    return out


def all_rules(recipe: Recipe | None = None) -> dict[str, ScopedRule]:
    """Every rule of a run, gathered from the classes that declare them: the run config (and its
    nested sections), the Recipe, each section's part class (``recipe``'s own classes where given)."""
    out = class_rules(TrainConfig, "")
    out.update(class_rules(Recipe, ""))
    for name, cls in recipe_sections(recipe).items():
        out.update(class_rules(cls, name))
    return out


RULES = all_rules()  # every rule of the built-in parts (tests walk it); check_run gathers a run's own

# the options of `reasonrl eval` and `reasonrl pretrain` (not run config keys), checked the same way
OPTION_RULES: dict[str, dict[str, Rule]] = {
    "eval": {
        "--problems": at_least(1),
        "--samples-per-problem": Rule(lambda v, _: v >= 0, ">= 0 (0: greedy only)"),
        "--temperature": at_least(0),
        "--top-p": within(0, 1, open_lo=True),
        "--max-new-tokens": at_least(1),
        "--seed": SEED,
        "--sample-seed": SEED,
    },
    "pretrain": {
        "--steps": at_least(1),
        "--seconds": above(0),
        "--batch-size": at_least(1),
        "--lr": above(0),
        "--eval-every": Rule(lambda v, _: v >= 0, ">= 0 (0: only at the end)"),
        "--eval-problems": at_least(1),
        "--until-pass": within(0, 1),
        "--seed": SEED,
    },
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
    for name in recipe_scalars():
        out[name] = (getattr(recipe, name), recipe_hints[name])
    for name in recipe_sections(recipe):
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
    return (
        out
        + range_problems(values, all_rules(recipe), "config key")
        + need_problems(values, recipe)
        + rollout_problems(values, recipe.name)
        + fsdp_problems(values, recipe)
        + reward_problems(recipe)
        + sandbox_problems(values)
        + vllm_problems(values, recipe)
        + tracking_problems(cfg.tracking)
        + reward_func_problems(cfg.reward_funcs, cfg.reward_weights)
    )


def _shown(key: str) -> str:
    """The dotted key as the user writes it (``rollout.async``, not the field name ``async_``)."""
    names = {field: alias for alias, field in KEY_ALIASES.items()}
    return ".".join(names.get(part, part) for part in key.split("."))


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


def check_part(part: Any, recipe: Recipe | None = None) -> None:
    """Raise a UserError naming every bad option of one part (the rules its class declares), judged
    inside ``recipe`` (default: a plain recipe holding just this part): the Python API's check of a
    part made by hand, which holds any value until a run is checked."""
    base = recipe or Recipe(name="check")
    key = next((name for name, cls in recipe_sections(base).items() if type(part) is cls), None)
    if key is None:
        raise TypeError(f"{type(part).__name__} is not a recipe section's part")
    recipe = dataclasses.replace(base, **{key: part})
    found = [p for p in problems(TrainConfig(), recipe) if f"'{key}." in p]
    if found:
        raise UserError("\n".join(found))


def check_options(values: Values, rules: dict[str, Rule]) -> None:
    """The same checks for command-line options outside the run config (``{"--problems": 0}``)."""
    nonfinite = {k for k, v in values.items() if isinstance(v, float) and not math.isfinite(v)}
    found = [f"option {k!r} must be a finite number, got {values[k]!r}" for k in sorted(nonfinite)]
    found += range_problems({k: v for k, v in values.items() if k not in nonfinite}, rules, "option")
    if found:
        raise UserError("\n".join(found))


def task_for(cfg: TrainConfig) -> Any:
    """The run's task, with ``guidance.*`` files attached (self-teacher context a task cannot write)."""
    task, g = get_task(cfg.task, **cfg.task_options), cfg.guidance
    if g.hints or g.solutions or g.critiques:
        task = GuidedTask(task, hints=g.hints, solutions=g.solutions, critiques=g.critiques)
    return task


def task_problems(task: Any, recipe: Recipe) -> list[str]:
    """One line per ability a part of ``recipe`` declares in its ``task_needs`` (protocols of
    :mod:`reasonrl.tasks.protocols`) and ``task`` lacks, naming the recipe, the part and the missing
    methods; and the episodes part a task with environments needs (:func:`episodic_problems`)."""
    out = []
    for key, part in recipe.hooked():
        for ability in getattr(part, "task_needs", ()):
            if not provides(task, ability):
                out.append(
                    f"recipe {recipe.name!r}: its part {key!r} needs a task with {ability.__name__}, but "
                    f"{missing(task, ability)} ({ability.__doc__.splitlines()[0]})"
                )
    return out + episodic_problems(task, recipe)


def check_inputs(cfg: TrainConfig, *recipes: Recipe) -> None:
    """The model name can load and the task can be built (its data read and validated), and each of
    ``recipes`` can train the task: the abilities its parts need, the episodes part for a task with
    environments (:func:`task_problems`)."""
    task = task_for(cfg)
    found = [line for recipe in recipes for line in task_problems(task, recipe)]
    if found:
        raise UserError("\n".join(found))
    from ..models.loading import check_model_name  # imports transformers: only once the rest is valid

    check_model_name(cfg.model)


# two statements, each within a line: ruff format would put one name per line
__all__ = ["OPTION_RULES", "RULES", "Rule", "all_rules", "check_inputs", "check_options", "check_part", "check_run"]
__all__ += ["problems", "run_values", "task_for", "task_problems"]
