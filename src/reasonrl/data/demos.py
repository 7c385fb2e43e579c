"""Users' demonstrations from a JSONL file (FEST's few-shot set, and any method that learns from demos).

One JSON object per line::

    {"prompt": "12+7=?\\n", "completion": "2+7=9\\n1+0=1\\nA:19", "answer": "19", "key": "12+7"}

* ``prompt`` (text, required): exactly what the model sees, as the task's own prompts are written
  (the arithmetic task ends its prompts with a newline).
* ``completion`` (text, required): the demonstrated answer, chain of thought included; the model
  learns it followed by its end-of-sequence token.
* ``answer`` (text, optional): the reference answer the task's verifier checks rollouts of this
  prompt against (FEST needs it to find an *incorrect* rollout). Absent: the answer the task
  extracts from the completion.
* ``key`` (text, optional): the problem's identity (default: the prompt).

Blank lines are skipped. A row that is not a JSON object, misses a required field, has a field of
the wrong type or an unknown field is a :class:`~reasonrl.errors.UserError` naming the file and its
line number; so is a file without any row.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import MissingPathError, UserError

__all__ = ["Demo", "DEMO_FIELDS", "load_demos"]

REQUIRED = ("prompt", "completion")
DEMO_FIELDS = REQUIRED + ("answer", "key")


@dataclass(frozen=True)
class Demo:
    """One demonstration: the prompt, the demonstrated completion, and optionally its answer and key."""

    prompt: str
    completion: str
    answer: str | None = None
    key: str | None = None
    line: int = field(default=0, compare=False)  # its line in the file (for messages); 0: not from a file


def _row(obj: object, path: Path, line: int) -> Demo:
    where = f"{path}:{line}"
    if not isinstance(obj, dict):
        raise UserError(
            f"{where}: a demonstration row must be a JSON object with 'prompt' and 'completion', "
            f"got {type(obj).__name__}"
        )
    unknown = sorted(set(obj) - set(DEMO_FIELDS))
    if unknown:
        raise UserError(f"{where}: unknown field(s) {unknown}; a demonstration row has {list(DEMO_FIELDS)}")
    for name in DEMO_FIELDS:
        if name in REQUIRED and name not in obj:
            raise UserError(f"{where}: missing required field {name!r} (rows need {list(REQUIRED)})")
        value = obj.get(name)
        if value is not None and not isinstance(value, str):
            raise UserError(f"{where}: field {name!r} must be text, got {type(value).__name__} {value!r:.60}")
        if name in REQUIRED and not value.strip():
            raise UserError(f"{where}: field {name!r} is empty")
    return Demo(
        prompt=obj["prompt"], completion=obj["completion"], answer=obj.get("answer"), key=obj.get("key"), line=line
    )


def load_demos(path: str | Path) -> list[Demo]:
    """The demonstrations of a JSONL file, in file order (see the module docstring for the schema)."""
    path = Path(path)
    if not path.is_file():
        raise MissingPathError(
            f"demonstrations file {str(path)!r} does not exist" + (" (it is a folder)" if path.is_dir() else "")
        )
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as err:
        raise UserError(f"demonstrations file {str(path)!r} is not UTF-8 text ({err.reason})") from err
    demos = []
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{n}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as err:
            raise UserError(f"{where}: not valid JSON ({err.msg} at column {err.colno})") from err
        demos.append(_row(obj, path, n))
    if not demos:
        raise UserError(f"demonstrations file {str(path)!r} has no rows")
    return demos
