"""Parts and recipes are found where they stand, and the hook order is the one the parts declare."""

import dataclasses
import json
import sys
import textwrap

import pytest
from typer.testing import CliRunner

import reasonrl.parts as parts_pkg
import reasonrl.recipes as recipes_pkg
from reasonrl.cli import app
from reasonrl.parts import PART_TYPES, Recipe
from reasonrl.parts.registry import hook_order, import_all, order_parts
from reasonrl.recipes import RECIPES

# The order the hooks ran in before it was declared: the import order of src/reasonrl/parts/__init__.py at
# commit 2965079 (steering, beam from generation.py; then episodes, critic, nudge, correction, redirect,
# selfteach, d2evo, teacher, fest, drafts, vpd, su01, azr, evoenv, populora, prompt_policy, balance, diffusion)
BEFORE = (
    "steering",
    "beam",
    "episodes",
    "critic",
    "hints",
    "correction",
    "redirect",
    "ssopd",
    "egrsd",
    "d2evo",
    "teacher",
    "tgpo",
    "rkl_opd",
    "kdrl",
    "fest",
    "drafts",
    "vpd",
    "refine_replay",
    "azr",
    "evoenv",
    "populora",
    "prompt_policy",
    "balance",
    "diffusion",
)


def test_the_declared_order_is_the_order_before_it_was_declared():
    # no behaviour change: every hook runs in the order it ran in when the imports decided it
    assert list(PART_TYPES) == list(BEFORE)
    assert hook_order(PART_TYPES) == list(BEFORE)
    # a recipe's parts run in that order whatever order the recipe names them in
    assert list(Recipe("x", tgpo=PART_TYPES["tgpo"](), teacher=PART_TYPES["teacher"]()).parts) == ["teacher", "tgpo"]


def _part(name, module="m", **attrs):
    return type(name, (), {"__module__": module, **attrs})


def test_phases_then_after_then_found_order():
    # found order: module a (X, then Y: definition order), then module b (Z); Z's phase comes first,
    # X waits for Y: Z, Y, X
    types = {"x": _part("X", "a", AFTER=("y",)), "y": _part("Y", "a"), "z": _part("Z", "b", PHASE="rollout")}
    assert hook_order(types) == ["z", "y", "x"]
    types = {"x": _part("X", "a"), "y": _part("Y", "a"), "z": _part("Z", "b")}
    assert hook_order(types) == ["x", "y", "z"]


def test_a_cycle_is_an_error_naming_it():
    types = {
        "a": _part("A", AFTER=("c",)),
        "b": _part("B", AFTER=("a",)),
        "c": _part("C", AFTER=("b",)),
        "d": _part("D"),
    }
    with pytest.raises(ValueError, match=r"cycle: a -> c -> b -> a"):
        hook_order(types)


def test_a_bad_declaration_is_an_error_naming_it():
    with pytest.raises(ValueError, match="part 'a': AFTER names 'nope'"):
        hook_order({"a": _part("A", AFTER="nope")})
    with pytest.raises(ValueError, match="part 'a' .* AFTER 'b', which runs in the later phase 'model'"):
        hook_order({"a": _part("A", AFTER="b"), "b": _part("B", PHASE="model")})
    with pytest.raises(ValueError, match="PHASE 'late' is not a phase"):
        hook_order({"a": _part("A", PHASE="late")})


def test_the_cli_prints_the_declared_order_and_each_recipes_hook_order():
    listed = json.loads(CliRunner().invoke(app, ["recipes", "--parts", "--json"]).stdout)
    assert [p["key"] for p in listed] == list(BEFORE)
    assert listed[11] == {"key": "tgpo", "part": "TGPO", "phase": "method", "after": ["teacher"]}
    recipes = {r["name"]: r for r in json.loads(CliRunner().invoke(app, ["recipes", "--json"]).stdout)}
    assert recipes["tgpo"]["hooks"]["score_batch"] == ["teacher", "tgpo"]  # the teacher's tokens, then TGPO reads them
    assert recipes["trafl"]["hooks"]["setup_model"] == ["diffusion"]


TWIN = """\
import dataclasses

from reasonrl.recipes.grpo import GRPO

GRPO_TWIN = dataclasses.replace(GRPO, name="grpo_twin")
"""


@pytest.fixture
def dropped_recipe(tmp_path):
    """A one-file recipe module in a folder searched as part of recipes/ (no other file edited)."""
    (tmp_path / "grpo_twin.py").write_text(TWIN)
    path = list(recipes_pkg.__path__)
    recipes_pkg.__path__[:] = path + [str(tmp_path)]
    try:
        recipes_pkg.reload()
        yield
    finally:
        recipes_pkg.__path__[:] = path
        sys.modules.pop("reasonrl.recipes.grpo_twin", None)
        recipes_pkg.reload()


def test_a_dropped_in_recipe_module_is_listed_and_tested(dropped_recipe):
    # RECIPES is what test_every_recipe.py and test_recipes_pinned.py parametrise over
    assert RECIPES["grpo_twin"] == dataclasses.replace(RECIPES["grpo"], name="grpo_twin")
    assert "grpo" in RECIPES  # imported by the new module, still counted once, where it is assigned
    listed = [r["name"] for r in json.loads(CliRunner().invoke(app, ["recipes", "--json"]).stdout)]
    assert listed.count("grpo_twin") == 1 and listed.count("grpo") == 1


def test_two_recipes_with_one_name_are_an_error(tmp_path):
    (tmp_path / "clash.py").write_text(TWIN.replace('name="grpo_twin"', 'name="dapo"'))
    path = list(recipes_pkg.__path__)
    recipes_pkg.__path__[:] = path + [str(tmp_path)]
    try:
        with pytest.raises(
            ValueError, match=r"two recipes are named 'dapo': in recipes/objectives.py and recipes/clash.py"
        ):
            recipes_pkg.discover()
    finally:
        recipes_pkg.__path__[:] = path
        sys.modules.pop("reasonrl.recipes.clash", None)


PART = '''\
"""A shaper and a loss term in one file."""
from dataclasses import dataclass

from reasonrl.parts.protocol import register_part


@register_part("scaled")
@dataclass(frozen=True)
class Scaled:
    scale: float = 2.0

    def shape_advantages(self, adv, ctx):
        return adv * self.scale

    def loss_term(self, ctx):
        return ctx.logp.sum() * 0.0, {"scaled/term": 0.0}
'''


def test_a_dropped_in_part_module_is_registered_in_its_phase(tmp_path):
    (tmp_path / "scaled.py").write_text(textwrap.dedent(PART))
    path = list(parts_pkg.__path__)
    parts_pkg.__path__[:] = path + [str(tmp_path)]
    try:
        import_all(parts_pkg)
        order_parts(PART_TYPES)
        # phase "method" (the default), no AFTER: it goes where the found order puts it among the parts free to
        # run. Modules by name: ... nudge (hints), redirect, scaled, selfteach (ssopd, egrsd) ...; after redirect
        # the first part whose AFTER is met in that order is scaled (d2evo waits on egrsd, drafts on fest, fest on
        # kdrl), so it runs between redirect and ssopd, and every other part keeps its place
        assert list(PART_TYPES) == list(BEFORE[:7]) + ["scaled"] + list(BEFORE[7:])
        recipe = Recipe("x", scaled=PART_TYPES["scaled"](scale=3.0))
        assert [k for k, _ in recipe.hooked("shape_advantages")] == ["scaled"]
        assert [k for k, _ in recipe.hooked("loss_term")] == ["scaled"]
        from reasonrl.config.train import valid_keys

        assert "scaled.scale" in valid_keys()  # its options are config keys, as every registered part's
    finally:
        parts_pkg.__path__[:] = path
        PART_TYPES.pop("scaled", None)
        sys.modules.pop("reasonrl.parts.scaled", None)
    assert list(PART_TYPES) == list(BEFORE)
