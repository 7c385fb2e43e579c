"""The docs' tables that list things, generated from the registry and the package tree.

``python -m reasonrl.docs_tables`` rewrites them in place; ``--check`` exits 1 naming the files whose
tables differ from what the code says (tests/test_docs_tables.py runs it). Each table sits between two
markers in its file, ``<!-- generated: NAME ... -->`` and ``<!-- end generated: NAME -->``; the text
around them is written by hand. The tables:

- ``recipes`` (README.md) and ``recipes-detail`` (docs/recipes.md): every registered recipe, from its
  ``summary``, ``details`` and ``doc`` (recipes sharing a text and a page share a row);
- ``parts`` (docs/parts.md): every registered part in the order its hooks run (``PHASE``, ``AFTER``),
  its hooks, needs and recipes; ``fields``: the Recipe fields that hold parts, and who sets them;
- ``layout`` (README.md): the packages and loose modules of src/reasonrl, each with the first sentence
  of its docstring, deepest imports last (each after everything it imports).
"""

from __future__ import annotations

import ast
import dataclasses
import re
import sys
from pathlib import Path
from typing import Any, Callable

from .data.selector import Selector
from .parts import HOOKS, NOT_HOOKED, PART_TYPES, Recipe, part_needs
from .parts.registry import after_of, phase_of
from .recipes import RECIPES

ROOT = Path(__file__).resolve().parents[2]  # the repository (src/reasonrl/docs_tables.py)
PACKAGE = Path(__file__).resolve().parent
START = "<!-- generated: {name} (python -m reasonrl.docs_tables; edit the code, not this table) -->"
END = "<!-- end generated: {name} -->"


# ------------------------------------------------------------------------------------------ recipes
def ordered_recipes(recipes: dict[str, Recipe]) -> list[Recipe]:
    """recipes.md's recipes first, then by doc page; in registry order within a page."""
    names = list(recipes)
    return sorted(recipes.values(), key=lambda r: (r.doc != "", r.doc, names.index(r.name)))


def _grouped(recipes: list[Recipe], text: Callable[[Recipe], str]) -> list[tuple[list[str], str, str]]:
    """(names, text, doc) rows: consecutive recipes with the same text and page share one."""
    rows: list[tuple[list[str], str, str]] = []
    for r in recipes:
        if not text(r):
            raise ValueError(f"recipe {r.name!r} has no summary: give Recipe(summary=...) (the README's one line)")
        if rows and rows[-1][1:] == (text(r), r.doc):
            rows[-1][0].append(r.name)
        else:
            rows.append(([r.name], text(r), r.doc))
    return rows


def _names(names: list[str]) -> str:
    return ", ".join(f"`{n}`" for n in names)


def readme_recipes(recipes: dict[str, Recipe]) -> str:
    lines = ["| recipe | in one line | doc |", "|---|---|---|"]
    for names, text, doc in _grouped(ordered_recipes(recipes), lambda r: r.summary):
        page = doc or "recipes.md"
        lines.append(f"| {_names(names)} | {text} | [{page.removesuffix('.md')}](docs/{page}) |")
    return "\n".join(lines)


def recipes_detail(recipes: dict[str, Recipe]) -> str:
    lines = ["| recipe | what it changes (parts) | doc |", "|---|---|---|"]
    for names, text, doc in _grouped(ordered_recipes(recipes), lambda r: r.details or r.summary):
        lines.append(f"| {_names(names)} | {text} | {f'[{doc}]({doc})' if doc else ''} |")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------ parts
def _users(recipes: dict[str, Recipe], has: Callable[[Recipe], bool]) -> str:
    return ", ".join(f"`{n}`" for n, r in recipes.items() if has(r))


def parts_table(recipes: dict[str, Recipe]) -> str:
    lines = [
        "| key (config section) | part | phase | after | hooks | needs (in its recipes) | recipes |",
        "|---|---|---|---|---|---|---|",
    ]
    for key, cls in PART_TYPES.items():
        hooks = [h for h in HOOKS if hasattr(cls, h)] + (["selector"] if issubclass(cls, Selector) else [])
        used = [r.parts[key] for r in recipes.values() if key in r.parts]
        needs = sorted(set().union(*(part_needs(p) for p in used))) if used else []
        after = ", ".join(f"`{a}`" for a in after_of(cls))
        lines.append(
            f"| `{key}` | `{cls.__name__}` | {phase_of(cls)} | {after} | {', '.join(hooks)} | "
            f"{', '.join(needs)} | {_users(recipes, lambda r: key in r.parts)} |"  # noqa: B023 - _users calls it at once
        )
    return "\n".join(lines)


def _field_parts(value: Any) -> list[Any]:
    return list(value) if isinstance(value, tuple) else [] if value is None else [value]


def fields_table(recipes: dict[str, Recipe]) -> str:
    """The Recipe's own fields that hold parts beside the skeleton's defaults (a selector, dynamic
    sampling, stages, shapers, auxiliary losses): each class used, and its recipes."""
    default = {f.name: f.default for f in dataclasses.fields(Recipe)}
    lines = ["| Recipe field | part | recipes |", "|---|---|---|"]
    for f in dataclasses.fields(Recipe):
        if f.name in NOT_HOOKED or f.name == "parts" or default[f.name] not in (None, ()):
            continue
        classes: dict[str, list[str]] = {}
        for name, r in recipes.items():
            for part in _field_parts(getattr(r, f.name)):
                classes.setdefault(type(part).__name__, []).append(name)
        for cls, names in classes.items():
            lines.append(f"| `{f.name}` | `{cls}` | {_names(names)} |")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------ layout
def _units(package: Path) -> dict[str, list[Path]]:
    """Top-level unit (a package ``name/`` or a loose module ``name``) -> its source files."""
    out: dict[str, list[Path]] = {}
    for path in sorted(package.iterdir()):
        if path.is_dir() and (path / "__init__.py").exists():
            out[f"{path.name}/"] = sorted(path.rglob("*.py"))
        elif path.suffix == ".py" and path.stem not in ("__init__", "__main__"):
            out[path.stem] = [path]
    return out


def _imports(path: Path, package: Path) -> set[str]:
    """The reasonrl modules (dotted, relative to the package) that ``path`` imports, lazily or not."""
    rel = path.relative_to(package).with_suffix("").parts
    here = list(rel[:-1])  # the importing module's package
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = here[: len(here) - node.level + 1]
            mod = base + (node.module.split(".") if node.module else [])
            out |= {".".join(mod + [a.name]) for a in node.names} | {".".join(mod)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            out |= {n.removeprefix("reasonrl.") for n in names if n.startswith("reasonrl.")}
    return {m for m in out if m}


def layout_order(package: Path = PACKAGE) -> list[str]:
    """The top-level units by the length of the longest import chain below their modules (ties by name):
    a unit comes after the units its modules import, as far as their modules' layers allow."""
    units = _units(package)
    owner = {
        ".".join(f.relative_to(package).with_suffix("").parts).removesuffix(".__init__"): unit
        for unit, files in units.items()
        for f in files
    }
    files = {m: package.joinpath(*m.split(".")) for m in owner}
    # a module importing its own package's __init__ (``from . import x``) is not below it: not an edge
    deps = {
        m: sorted(d for d in _imports(_file(files[m]), package) if d in owner and not m.startswith(d + ".") and d != m)
        for m in sorted(owner)
    }
    depth: dict[str, int] = {}
    chain: list[str] = []

    def dig(m: str) -> int:  # memoised longest import chain below m (tests/test_layering.py: there is no cycle)
        if m in chain:
            raise ValueError(f"import cycle: {' -> '.join(chain[chain.index(m) :] + [m])}")
        if m not in depth:
            chain.append(m)
            depth[m] = 1 + max((dig(d) for d in deps[m]), default=-1)
            chain.pop()
        return depth[m]

    unit_depth = {u: max(dig(m) for m in owner if owner[m] == u) for u in units}
    return sorted(units, key=lambda u: (unit_depth[u], u))


def _file(base: Path) -> Path:
    return base / "__init__.py" if base.is_dir() else base.with_suffix(".py")


def first_sentence(path: Path) -> str:
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
    if not doc:
        raise ValueError(f"{path} has no docstring: the README's layout table reads its first sentence")
    text = " ".join(doc.split("\n\n")[0].split())
    text = re.sub(r":[a-z]+:`~?([^`]+)`", r"`\1`", text).replace("``", "`")  # reST roles and literals to markdown
    return re.split(r"\.\s+(?=[A-Z`])", text, maxsplit=1)[0].rstrip(".")


def layout_table(package: Path = PACKAGE) -> str:
    lines = ["| package / module | what it holds |", "|---|---|"]
    for unit in layout_order(package):
        path = package / unit / "__init__.py" if unit.endswith("/") else package / f"{unit}.py"
        lines.append(f"| `{unit}` | {first_sentence(path).replace('|', '/')} |")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------ files
def tables() -> dict[str, dict[str, str]]:
    """file (relative to the repository) -> table name -> its markdown."""
    return {
        "README.md": {"recipes": readme_recipes(RECIPES), "layout": layout_table()},
        "docs/recipes.md": {"recipes-detail": recipes_detail(RECIPES)},
        "docs/parts.md": {"parts": parts_table(RECIPES), "fields": fields_table(RECIPES)},
    }


def rewritten(text: str, name: str, table: str, where: str) -> str:
    start, end = START.format(name=name), END.format(name=name)
    if text.count(start) != 1 or text.count(end) != 1:
        raise ValueError(f"{where}: needs the markers of table {name!r} once each:\n{start}\n{end}")
    head, rest = text.split(start)
    _, tail = rest.split(end)
    return f"{head}{start}\n{table}\n{end}{tail}"


def drifted(root: Path = ROOT, write: bool = False) -> list[str]:
    """The files whose tables differ from the code (rewritten when ``write``)."""
    out = []
    for rel, named in tables().items():
        path = root / rel
        old = path.read_text(encoding="utf-8")
        new = old
        for name, table in named.items():
            new = rewritten(new, name, table, rel)
        if new != old:
            out.append(rel)
            if write:
                path.write_text(new, encoding="utf-8")
    return out


def main(argv: list[str]) -> int:
    check = "--check" in argv
    files = drifted(write=not check)
    if check and files:
        print(f"generated tables out of date in {', '.join(files)}: run python -m reasonrl.docs_tables")
        return 1
    print(("rewrote " + ", ".join(files)) if files else "the tables are up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
