"""Named recipes: each a few lines composing parts, with its paper and every inferred choice.

``get_recipe(name)`` returns the frozen :class:`~reasonrl.parts.Recipe`; register your own with
``register(recipe)``.
"""
from __future__ import annotations

import difflib

from ..errors import UserError
from ..parts import Recipe
from .agents import AGENT_RECIPES
from .azr import AZR_RECIPE
from .evoenv import EVOENV_RECIPE
from .populora import POPULORA_RECIPE
from .prompt_policy import PROMPT_POLICY_RECIPE
from .cipo import CIPO
from .d2evo import D2EVO
from .fest import FEST_RECIPE
from .distmatch import DISTMATCH_RECIPES
from .drafts import DRAFTS
from .grpo import DR_GRPO, GRPO
from .lze import LZE
from .nudge import NUDGERL
from .physics import PHYSICS_R1
from .ppo import GRLO, PPO
from .objectives import CORR_PO, CISPO, DAPO, EDAS_DAPO, GSPO, MU_GRPO, REINFORCE_PP, RLOO, SAGE
from .selfteach import SELFTEACH_RECIPES
from .stride import STRIDE
from .su01 import SU01
from .tasks import TASK_RECIPES
from .teacher import TEACHER_RECIPES
from .vpd import VPD_RECIPE

RECIPES: dict[str, Recipe] = {}


def register(recipe: Recipe) -> Recipe:
    RECIPES[recipe.name] = recipe
    return recipe


for _r in (GRPO, DR_GRPO, DAPO, GSPO, RLOO, REINFORCE_PP, CISPO, EDAS_DAPO, MU_GRPO, SAGE, CORR_PO, NUDGERL, CIPO, STRIDE,
           PHYSICS_R1, *TASK_RECIPES, *SELFTEACH_RECIPES, LZE, D2EVO, *TEACHER_RECIPES,
           FEST_RECIPE, DRAFTS, VPD_RECIPE, SU01, AZR_RECIPE, EVOENV_RECIPE, POPULORA_RECIPE,
           PROMPT_POLICY_RECIPE, PPO, GRLO, *DISTMATCH_RECIPES, *AGENT_RECIPES):
    register(_r)


def get_recipe(name: str) -> Recipe:
    if not isinstance(name, str) or name not in RECIPES:
        raise UserError(f"unknown recipe {name!r}{_closest(name)}; valid: {sorted(RECIPES)} (see `reasonrl recipes`)")
    return RECIPES[name]


def _closest(name: str) -> str:
    near = difflib.get_close_matches(str(name), list(RECIPES), n=1)
    return f" (did you mean {near[0]!r}?)" if near else ""


__all__ = ["RECIPES", "Recipe", "get_recipe", "register"]
