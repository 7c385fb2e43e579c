"""A task from the user's own data: JSONL, Parquet or a local HF dataset directory.

Columns are mapped by name (``prompt_column``, ``answer_column``, optional ``demo_column``); the
reward that verifies a completion is chosen by name from :mod:`reasonrl.rewards` and sees the
answer pulled out by ``extract``. Rows are validated when the file is opened, so a malformed row
is reported with its file and row number before any training starts. Without ``test_path`` the
held-out split is a hash-of-prompt fraction of the rows.
"""
from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any, Callable, Iterator

from ..errors import MissingPathError, UserError
from ..rewards import get_reward
from ..rewards.answers import EXTRACTORS
from .base import Item, epochs, split_user_items, user_splits

def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a .jsonl/.json-lines, .parquet file or a ``datasets.save_to_disk`` directory."""
    path = Path(path)
    if not path.exists():
        raise MissingPathError(f"task file {path} does not exist")
    if path.is_dir():
        from datasets import load_from_disk

        return [dict(r) for r in load_from_disk(str(path))]
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    if path.suffix in (".jsonl", ".json"):
        return _read_jsonl(path)
    raise UserError(f"unsupported task file {path}: use .jsonl, .parquet or a saved HF dataset directory")


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [row for _, row in jsonl_rows(path)]


def jsonl_rows(path: Path, where: Callable[[int], str] | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """(1-based line number, object) of each non-blank line of a JSONL file; a line that is not a
    JSON object, or a file that is not UTF-8 text, is a UserError naming ``where(line)``
    (default ``path:line``)."""
    where = where or (lambda n: f"{path}:{n}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise UserError(f"{path}: not a UTF-8 text file ({err.reason} at byte {err.start}); "
                        "a .jsonl file holds one JSON object per line") from err
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise UserError(f"{where(lineno)}: not valid JSON ({err.msg}): {line[:120]!r}") from err
        if not isinstance(row, dict):
            raise UserError(f"{where(lineno)}: expected a JSON object, got {type(row).__name__}")
        yield lineno, row


class FileTask:
    def __init__(self, path: str, *, prompt_column: str = "prompt", answer_column: str = "answer",
                 demo_column: str | None = None, reward: str = "exact_match", extract: str = "answer_tag",
                 test_path: str | None = None, test_fraction: float = 0.1, **reward_options: Any):
        if extract not in EXTRACTORS:
            raise UserError(f"unknown extract {extract!r}; valid: {sorted(EXTRACTORS)}")
        self.name, self.path, self.test_fraction = f"file:{path}", path, test_fraction
        self.columns = (prompt_column, answer_column, demo_column)
        self._extract = EXTRACTORS[extract]
        opts = dict(reward_options)
        if reward in ("exact_match", "numeric"):
            opts.setdefault("extract", self._extract)
        self.reward = get_reward(reward, **opts)
        self._rows = user_splits(path, test_path, self._items)

    def _items(self, path: str) -> list[Item]:
        prompt_c, answer_c, demo_c = self.columns
        items = []
        for i, row in enumerate(read_rows(path)):
            missing = [c for c in (prompt_c, answer_c, demo_c) if c and c not in row]
            if missing:
                raise UserError(f"{path} row {i}: missing column(s) {missing}; the row has {sorted(row)} "
                                "(the task options prompt_column / answer_column / demo_column name them)")
            if not isinstance(row[prompt_c], str) or not row[prompt_c]:
                raise UserError(f"{path} row {i}: column {prompt_c!r} must be a non-empty string")
            nulls = [c for c in (answer_c, demo_c) if c and row[c] is None]
            if nulls:  # str(None) would make "None" the reference answer
                raise UserError(f"{path} row {i}: column {nulls[0]!r} is null; every row needs a value there")
            meta = {k: v for k, v in row.items() if k not in (prompt_c, answer_c, demo_c)}
            demo = str(row[demo_c]) if demo_c else None
            items.append(Item(key=row[prompt_c], prompt=row[prompt_c], answer=str(row[answer_c]), meta=meta, demo=demo))
        if not items:
            raise UserError(f"task file {path} has no rows")
        return items

    def split_items(self, split: str) -> list[Item]:
        return split_user_items(self.name, self._rows["train"], self._rows["test"], split, self.test_fraction,
                                str(self.path))

    def iter_items(self, split: str, seed: int) -> Iterator[Item]:
        return epochs(self.split_items(split), random.Random(f"{seed}:{split}"))

    def verify(self, completion: str, answer: str, meta: dict[str, Any]) -> float:
        value = self.reward([""], [completion], answer=[answer], meta=[meta])[0]
        return 0.0 if value is None else float(value)

    def extract_answer(self, completion: str) -> str | None:
        return self._extract(completion)
