"""Users' drafts from a JSONL file, for the ``drafts`` recipe (spec distill-and-data.md section 9).

One JSON object per line, one line per draft (a problem may have many, e.g. 32 samples):

- ``key`` (str): the problem's key (the built-in tasks' item key, e.g. ``"347+85"``); or, instead,
  ``problem`` (str): the problem text as the task's prompt writes it (file tasks key items by it);
- ``draft`` (str): the weak model's completion (may be empty: an empty draft is shown as ``N/A``);
- ``correct`` (bool, optional): the draft is strictly correct (the verifier gives 1); when absent,
  the task's verifier decides when the drafts are attached to the task;
- ``quasi`` (bool, optional): the right answer is there but not in the required format (no
  ``\\boxed``, no ``A:`` line); absent: the same as ``correct``. A draft marked ``correct`` is
  always quasi-correct, so ``"correct": true, "quasi": false`` is an error.

``reasonrl drafts make`` writes such files. A malformed row is a UserError naming the file and row.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import MissingPathError, UserError
from ..tasks.files import jsonl_rows

FIELDS = ("key", "problem", "draft", "correct", "quasi")


@dataclass(frozen=True)
class DraftEntry:
    """One row of a drafts file; ``correct`` None: to be decided by the task's verifier."""

    text: str
    correct: bool | None
    quasi: bool | None
    row: int  # the 1-based line of the file, for messages


def _flag(row: dict[str, Any], name: str, where: str) -> bool | None:
    value = row.get(name)
    if value is not None and not isinstance(value, bool):
        raise UserError(f"{where}: field {name!r} must be true or false when given, got {value!r}")
    return value


def _entry(row: dict[str, Any], n: int, where: str) -> tuple[str, DraftEntry]:
    unknown = sorted(set(row) - set(FIELDS))
    if unknown:
        raise UserError(f"{where}: unknown field(s) {unknown}; a drafts row has {list(FIELDS)}")
    if ("key" in row) == ("problem" in row):
        raise UserError(f"{where}: give exactly one of 'key' and 'problem' (the problem the draft was written for)")
    name = "key" if "key" in row else "problem"
    key = row[name]
    if not isinstance(key, str) or not key.strip():
        raise UserError(f"{where}: field {name!r} must be a non-empty string, got {key!r}")
    if not isinstance(row.get("draft"), str):
        raise UserError(f"{where}: field 'draft' must be a string (the draft completion), got {row.get('draft')!r}")
    correct, quasi = _flag(row, "correct", where), _flag(row, "quasi", where)
    if correct and quasi is False:
        raise UserError(
            f"{where}: a correct draft is quasi-correct too; 'correct': true with 'quasi': false contradicts"
        )
    return key, DraftEntry(row["draft"], correct, quasi, n)


def load_drafts(path: str | Path) -> dict[str, list[DraftEntry]]:
    """The drafts of a JSONL file by problem key (or problem text), in file order."""
    path = Path(path)
    if not path.is_file():
        raise MissingPathError(f"drafts file {path} does not exist" + (" (it is a folder)" if path.is_dir() else ""))
    out: dict[str, list[DraftEntry]] = {}
    for n, row in jsonl_rows(path, where=lambda n: f"{path} row {n}"):
        key, entry = _entry(row, n, f"{path} row {n}")
        out.setdefault(key, []).append(entry)
    if not out:
        raise UserError(f"drafts file {path} has no rows")
    return out


def draft_line(key: str, draft: str, correct: bool | None = None, quasi: bool | None = None) -> str:
    """One row of a drafts file (what :func:`load_drafts` reads back)."""
    row: dict[str, Any] = {"key": key, "draft": draft}
    if correct is not None:
        row["correct"] = correct
    if quasi is not None:
        row["quasi"] = quasi
    return json.dumps(row) + "\n"


__all__ = ["DraftEntry", "FIELDS", "draft_line", "load_drafts"]
