"""Users' teacher outputs from a JSONL file: completions a teacher wrote offline, one per line.

Schema (one JSON object per line; blank lines are skipped)::

    {"key": "arith-17", "prompt": "12+3=?\\n", "completion": "12+3=15\\nA:15"}
    {"key": "arith-17", "prompt": "12+3=?\\n", "completion": "...", "teacher": "qwen3-30b", "correct": true}

* ``key`` (string or integer, required): the problem's key (a file task's key is its prompt); a key
  may have several rows (several samples of the teacher).
* ``prompt``, ``completion`` (non-empty strings, required): what the teacher was shown and wrote.
* ``teacher`` (string) and ``correct`` (true/false), optional: which model, and its verdict if known.

Any other key is an error (a typo would otherwise be dropped silently). A bad row is a
:class:`~reasonrl.errors.UserError` naming the file and its line number. The id-level methods
(TGPO, RKL-OPD, KDRL) run the teacher itself (:mod:`reasonrl.distill.teacher`); this loader is for
teachers that cannot run beside the student (another vocabulary, an API): their text outputs, for
sequence-level distillation or as demonstrations. docs/teacher.md says what reads it.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from ..errors import MissingPathError, UserError
from ..tasks.files import jsonl_rows

REQUIRED = ("key", "prompt", "completion")
OPTIONAL = ("teacher", "correct")


@dataclass(frozen=True)
class TeacherOutput:
    key: str
    prompt: str
    completion: str
    teacher: str | None = None
    correct: bool | None = None


def load_teacher_outputs(path: str | Path) -> list[TeacherOutput]:
    """Every row of ``path`` (JSONL, schema in the module docstring), in file order."""
    path = Path(path)
    if not path.is_file():
        raise MissingPathError(f"teacher outputs file {path} does not exist")
    out = [_row(row, f"{path}:{n}") for n, row in jsonl_rows(path)]
    if not out:
        raise UserError(f"teacher outputs file {path} has no rows")
    return out


def outputs_by_key(outputs: list[TeacherOutput]) -> dict[str, list[TeacherOutput]]:
    """The outputs grouped by problem key, each key's rows in file order."""
    grouped: dict[str, list[TeacherOutput]] = defaultdict(list)
    for o in outputs:
        grouped[o.key].append(o)
    return dict(grouped)


def _row(row: dict, where: str) -> TeacherOutput:
    missing = [k for k in REQUIRED if k not in row]
    unknown = sorted(set(row) - set(REQUIRED) - set(OPTIONAL))
    if missing or unknown:
        what = [f"missing {', '.join(missing)}"] if missing else []
        what += [f"unknown key(s) {', '.join(unknown)}"] if unknown else []
        raise UserError(
            f"{where}: {'; '.join(what)} (a row needs {', '.join(REQUIRED)}; optional: {', '.join(OPTIONAL)})"
        )
    key = row["key"]
    if isinstance(key, bool) or not isinstance(key, (str, int)) or str(key) == "":
        raise UserError(f"{where}: 'key' must be a non-empty string or an integer, got {key!r}")
    for name in ("prompt", "completion"):
        if not isinstance(row[name], str) or not row[name]:
            raise UserError(f"{where}: {name!r} must be a non-empty string, got {row[name]!r}")
    teacher, correct = row.get("teacher"), row.get("correct")
    if teacher is not None and not isinstance(teacher, str):
        raise UserError(f"{where}: 'teacher' must be a string, got {teacher!r}")
    if correct is not None and not isinstance(correct, bool):
        raise UserError(f"{where}: 'correct' must be true or false, got {correct!r}")
    return TeacherOutput(
        key=str(key), prompt=row["prompt"], completion=row["completion"], teacher=teacher, correct=correct
    )
