"""``reasonrl keys [PATTERN] [--recipe R]``: the run keys with their type, default and one line of help,
grouped by section (issue 46: 338 keys, and ``train --help`` shows the 9 options).

The help of a key is the comment beside its field in the source (``r: int = 0  # rank; 0: off``), else
the range its rule states (``>= 1``), so a field documented where it is declared needs nothing here.
Defaults are the recipe's (``--recipe``, default grpo): a section the recipe leaves off is listed with
its class defaults and marked off.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import inspect
import io
import json
import tokenize
import typing
from functools import lru_cache
from typing import Any, Optional

import typer
from rich.table import Table

from .common import console


@lru_cache(maxsize=None)
def field_comments(cls: type) -> dict[str, str]:
    """Field name -> the comment on its declaration line in ``cls``'s source (``name: T = v  # comment``)."""
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):  # a class made at run time has no source: no comments, the rules still help
        return {}
    out: dict[str, str] = {}
    line_start: dict[int, tuple[str, bool]] = {}  # line -> (first name, followed by ':')
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    for i, tok in enumerate(tokens[:-1]):
        if (
            tok.type == tokenize.NAME
            and tok.start[0] not in line_start
            and tokens[i - 1].type in (tokenize.INDENT, tokenize.NEWLINE, tokenize.NL, tokenize.DEDENT)
        ):
            line_start[tok.start[0]] = (tok.string, tokens[i + 1].string == ":")
        if tok.type == tokenize.COMMENT:
            name, annotated = line_start.get(tok.start[0], ("", False))
            if annotated and name not in out:
                out[name] = tok.string.lstrip("#").strip()
    return out


def _type_name(hint: Any) -> str:
    if isinstance(hint, type) and not typing.get_args(hint):
        return hint.__name__
    return str(hint).replace("typing.", "").replace("NoneType", "None")


def _default(cls: type, f: dataclasses.Field, current: Any) -> Any:
    if current is not None:
        return getattr(current, f.name)
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return f.default_factory()  # type: ignore[misc]
    return None


def _walk(cls: type, current: Any, prefix: str, section: str, off: bool, out: list[dict[str, Any]]) -> None:
    """A row per leaf field of the dataclass ``cls`` (nested parts walked), defaults from ``current``."""
    from ..config.train import KEY_ALIASES, nested_part

    shown = {field: alias for alias, field in KEY_ALIASES.items()}
    hints, comments = typing.get_type_hints(cls), field_comments(cls)
    for f in dataclasses.fields(cls):
        value = _default(cls, f, current)
        key = f"{prefix}{shown.get(f.name, f.name)}"
        part = nested_part(cls, f.name)
        if part is not None and (value is None or dataclasses.is_dataclass(value)):
            _walk(part, value, key + ".", section, off or value is None, out)
            continue
        out.append(
            {
                "key": key,
                "section": section,
                "type": _type_name(hints.get(f.name)),
                "default": value,
                "help": comments.get(f.name, ""),
                "off": off,
                "field": f"{prefix}{f.name}",
            }
        )


def key_rows(recipe_name: str | None = None) -> list[dict[str, Any]]:
    """Every run key of ``recipe_name`` (default grpo) as {key, section, type, default, help, off}."""
    from ..config.train import TrainConfig, nested_part, recipe_scalars, recipe_sections
    from ..config.validate import all_rules
    from ..parts import Recipe
    from ..recipes import get_recipe
    from ..rewards.options import rewards_dict

    recipe = get_recipe(recipe_name or "grpo")
    out: list[dict[str, Any]] = []
    cfg, hints, comments = TrainConfig(), typing.get_type_hints(TrainConfig), field_comments(TrainConfig)
    for f in dataclasses.fields(TrainConfig):
        part = nested_part(TrainConfig, f.name)
        if part is not None:
            _walk(part, getattr(cfg, f.name), f.name + ".", f.name, False, out)
        else:
            out.append(
                {
                    "key": f.name,
                    "section": "run",
                    "type": _type_name(hints[f.name]),
                    "default": getattr(cfg, f.name),
                    "help": comments.get(f.name, ""),
                    "off": False,
                    "field": f.name,
                }
            )
    recipe_hints, recipe_comments = typing.get_type_hints(Recipe), field_comments(Recipe)
    for name in recipe_scalars():
        out.append(
            {
                "key": name,
                "section": "recipe",
                "type": _type_name(recipe_hints[name]),
                "default": getattr(recipe, name),
                "help": recipe_comments.get(name, ""),
                "off": False,
                "field": name,
            }
        )
    for name, cls in recipe_sections(recipe).items():
        current = getattr(recipe, name, None)
        _walk(cls, current if dataclasses.is_dataclass(current) else None, name + ".", name, current is None, out)
    for reward, options in rewards_dict(recipe.extra_rewards).items():  # rewards.<name>.<option> of its rewards
        for option, value in options.items():
            out.append(
                {
                    "key": f"rewards.{reward}.{option}",
                    "section": "rewards",
                    "type": type(value).__name__,
                    "default": value,
                    "help": f"an option of the recipe's reward {reward!r}",
                    "off": False,
                    "field": "",
                }
            )
    rules = all_rules(recipe)
    values = {row["field"]: row["default"] for row in out}
    for row in out:  # no comment at the field: its rule's range is the help
        rule = rules.get(row.pop("field"))
        if not row["help"] and rule is not None:
            row["help"] = _rule_text(rule, values)
    return out


def _rule_text(rule: Any, values: dict[str, Any]) -> str:
    try:
        return rule.describe(values)
    except (TypeError, KeyError, AttributeError):  # a rule whose text reads a knob of another shape: no help
        return ""


def matches(key: str, pattern: str | None) -> bool:
    """A glob (``loss.*``) when the pattern has a wildcard, a section (its keys) when it ends with a dot
    (``lora.``: not ``populora.``), else a case-insensitive substring."""
    if not pattern:
        return True
    if pattern.endswith("."):
        return key.startswith(pattern)
    if any(c in pattern for c in "*?["):
        return fnmatch.fnmatch(key, pattern)
    return pattern.lower() in key.lower()


def _shown(value: Any) -> str:
    text = json.dumps(value, default=str) if isinstance(value, (list, tuple, dict)) else str(value)
    return "null" if value is None else text


def keys_cmd(
    pattern: Optional[str] = typer.Argument(
        None, help="Only keys containing this text, a section's keys (lora.) or those matching a glob ('loss.*')."
    ),
    recipe: Optional[str] = typer.Option(None, help="Whose defaults to show (default grpo)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
) -> None:
    """The run keys (key=value on `reasonrl train`) with type, default and help, grouped by section."""
    from ..errors import UserError

    rows = [r for r in key_rows(recipe) if matches(r["key"], pattern)]
    if not rows:
        raise UserError(f"no run key matches {pattern!r}; `reasonrl keys` lists them all")
    if as_json:
        print(json.dumps(rows, indent=2, default=str))
        return
    sections: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        sections.setdefault(row["section"], []).append(row)
    for section, members in sections.items():
        off = f" (off in {recipe or 'grpo'}: setting a key turns it on)" if all(r["off"] for r in members) else ""
        table = Table(title=f"{section}{off}", title_justify="left")
        for col in ("key", "type", "default", "help"):
            table.add_column(col, overflow="fold")
        for r in members:
            table.add_row(r["key"], r["type"], _shown(r["default"]), r["help"])
        console.print(table)
    console.print(f"{len(rows)} keys; set one with `reasonrl train KEY=VALUE` (or in a YAML config file)")
