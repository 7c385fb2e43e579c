"""Named recipes: each a few lines composing parts, with its paper and every inferred choice.

``get_recipe(name)`` returns the frozen :class:`~reasonrl.parts.Recipe`; register your own with
``register(recipe)``.
"""
from __future__ import annotations

from ..parts import Recipe
from .grpo import DR_GRPO, GRPO
from .objectives import CORR_PO, CISPO, DAPO, EDAS_DAPO, GSPO, MU_GRPO, REINFORCE_PP, RLOO, SAGE
from .tasks import TASK_RECIPES

RECIPES: dict[str, Recipe] = {}


def register(recipe: Recipe) -> Recipe:
    RECIPES[recipe.name] = recipe
    return recipe


for _r in (GRPO, DR_GRPO, DAPO, GSPO, RLOO, REINFORCE_PP, CISPO, EDAS_DAPO, MU_GRPO, SAGE, CORR_PO, *TASK_RECIPES):
    register(_r)


def get_recipe(name: str) -> Recipe:
    if name not in RECIPES:
        raise ValueError(f"unknown recipe {name!r}; valid: {sorted(RECIPES)} (see `reasonrl recipes`)")
    return RECIPES[name]


__all__ = ["RECIPES", "Recipe", "get_recipe", "register"]
