"""The docs' tables that list things are generated (python -m reasonrl.docs_tables): the committed
README.md, docs/recipes.md and docs/parts.md must be what the registry and the package tree say."""

import dataclasses
import shutil

import pytest

from reasonrl import docs_tables
from reasonrl.docs_tables import ROOT, drifted, first_sentence, rewritten
from reasonrl.recipes import RECIPES

FILES = ("README.md", "docs/recipes.md", "docs/parts.md")


def test_the_committed_tables_are_the_generated_ones():
    assert drifted() == [], "run: python -m reasonrl.docs_tables"


@pytest.fixture
def docs_copy(tmp_path):
    for rel in FILES:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    return tmp_path


def test_a_changed_recipe_makes_the_docs_drift_until_regenerated(docs_copy, monkeypatch):
    # a recipe's one line changes: the README's table and docs/recipes.md (its details are its summary) drift
    monkeypatch.setitem(RECIPES, "azr", dataclasses.replace(RECIPES["azr"], summary="self-play, renamed"))
    assert drifted(docs_copy) == ["README.md", "docs/recipes.md"]
    assert drifted(docs_copy, write=True) == ["README.md", "docs/recipes.md"]
    assert drifted(docs_copy) == []
    assert "| `azr` | self-play, renamed | [selfplay](docs/selfplay.md) |" in (docs_copy / "README.md").read_text()


def test_a_hand_edit_inside_a_table_is_drift(docs_copy):
    path = docs_copy / "docs/parts.md"
    path.write_text(path.read_text().replace("| `critic` | `Critic` | estimate |", "| `critic` | `Critic` | method |"))
    assert drifted(docs_copy) == ["docs/parts.md"]


def test_missing_markers_name_the_table():
    with pytest.raises(ValueError, match="README.md: needs the markers of table 'layout' once each"):
        rewritten("no markers here", "layout", "| table |", "README.md")


def test_rows_group_recipes_sharing_a_line_and_a_page():
    # tgpo, tgpo_adv, rkl_opd, kdrl share one summary and docs/teacher.md: one row
    row = next(line for line in docs_tables.readme_recipes(RECIPES).splitlines() if "`tgpo`" in line)
    assert row.startswith("| `tgpo`, `tgpo_adv`, `rkl_opd`, `kdrl` | ") and row.endswith("[teacher](docs/teacher.md) |")


def test_first_sentence_of_a_docstring(tmp_path):
    (tmp_path / "m.py").write_text('"""Widgets: ``a`` and :mod:`b.c`. More text.\n\nDetails."""\n')
    assert first_sentence(tmp_path / "m.py") == "Widgets: `a` and `b.c`"
