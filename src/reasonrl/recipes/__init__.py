"""Named recipes: each a few lines composing parts, with its paper and every inferred choice.

Found where they stand: every public :class:`~reasonrl.parts.Recipe` a module of this package
assigns at its top level is registered under its name (modules by name, recipes in the order a module defines
them), so a new recipe is one file here and nothing else. ``get_recipe(name)`` returns the frozen
recipe; register your own at run time with ``register(recipe)``.
"""

from __future__ import annotations

import ast
import difflib
import importlib
import pkgutil
import sys

from ..errors import UserError
from ..parts import Recipe

RECIPES: dict[str, Recipe] = {}


def register(recipe: Recipe) -> Recipe:
    RECIPES[recipe.name] = recipe
    return recipe


def discover() -> dict[str, Recipe]:
    """name -> recipe for every public Recipe the modules of this package (``__path__``: a folder
    added to it is searched too) assign at top level; a recipe imported from another module counts
    where it is assigned. Two recipes with one name are an error naming both modules."""
    found: dict[str, Recipe] = {}
    where: dict[str, str] = {}
    for info in pkgutil.iter_modules(sys.modules[__name__].__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        own = _assigned(module.__file__)
        for attr, value in vars(module).items():
            if attr.startswith("_") or attr not in own or not isinstance(value, Recipe):
                continue
            if value.name in found:
                raise ValueError(
                    f"two recipes are named {value.name!r}: in recipes/{where[value.name]}.py and "
                    f"recipes/{info.name}.py ({attr})"
                )
            found[value.name], where[value.name] = value, info.name
    return found


def _assigned(path: str) -> set[str]:
    """The names a module's source assigns at top level (``X = ...``, ``X: T = ...``), not those it imports."""
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    names = set()
    for node in tree.body:
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names


def reload() -> dict[str, Recipe]:
    """The registry found again, in place (a recipe module added since, a changed ``__path__``)."""
    RECIPES.clear()
    RECIPES.update(discover())
    return RECIPES


def get_recipe(name: str) -> Recipe:
    if not isinstance(name, str) or name not in RECIPES:
        raise UserError(f"unknown recipe {name!r}{_closest(name)}; valid: {sorted(RECIPES)} (see `reasonrl recipes`)")
    return RECIPES[name]


def _closest(name: str) -> str:
    near = difflib.get_close_matches(str(name), list(RECIPES), n=1)
    return f" (did you mean {near[0]!r}?)" if near else ""


reload()

__all__ = ["RECIPES", "Recipe", "discover", "get_recipe", "register", "reload"]
