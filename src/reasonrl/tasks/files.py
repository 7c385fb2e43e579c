"""A task from the user's own data: JSONL, Parquet or a local HF dataset directory.

Columns are mapped by name (``prompt_column``, ``answer_column``, optional ``demo_column``;
:mod:`.rows`: prompts may be chat messages); the reward that verifies a completion is chosen by
name from :mod:`reasonrl.rewards` (or is a user's function in a Python file) and sees the answer
pulled out by ``extract``. Rows are validated when the file is opened, so a malformed row
is reported with its file and row number before any training starts. Without ``test_path`` the
held-out split is a hash-of-prompt fraction of the rows.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any, Callable, Iterator

from ..errors import MissingPathError, UserError
from ..rewards import UserReward, get_reward, score_rewards
from ..rewards.answers import EXTRACTORS
from .base import Item, epochs, split_user_items, user_splits
from .rows import TRL_ROW, RowSpec


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
        raise UserError(
            f"{path}: not a UTF-8 text file ({err.reason} at byte {err.start}); "
            "a .jsonl file holds one JSON object per line"
        ) from err
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
    """A task from rows: ``prompt_column`` (a string or chat messages; a ``messages`` column is read as
    a conversation), ``answer_column`` (dots reach nested fields) turned into the reference by
    ``answer_format``, an optional ``demo_column``; ``reward``: a built-in reward's name or a user's
    function, ``path/to/rewards.py:function`` (TRL's contract, :mod:`reasonrl.rewards.user`)."""

    def __init__(
        self,
        path: str,
        *,
        prompt_column: str = "prompt",
        answer_column: str = "answer",
        demo_column: str | None = None,
        reward: str = "exact_match",
        extract: str = "answer_tag",
        test_path: str | None = None,
        test_fraction: float = 0.1,
        answer_format: str = "as_is",
        prompt_suffix: str = "",
        **reward_options: Any,
    ):
        self._setup(
            f"file:{path}",
            path,
            RowSpec(prompt_column, answer_column, demo_column, answer_format, prompt_suffix),
            reward,
            extract,
            test_fraction,
            reward_options,
        )
        self._rows = user_splits(path, test_path, lambda p: self.items_of(read_rows(p), str(p)))

    def _setup(
        self,
        name: str,
        path: Any,
        spec: RowSpec,
        reward: str,
        extract: str,
        test_fraction: float,
        reward_options: dict[str, Any],
    ) -> None:
        if extract not in EXTRACTORS:
            raise UserError(f"unknown extract {extract!r}; valid: {sorted(EXTRACTORS)}")
        self.name, self.path, self.test_fraction, self.spec = name, path, test_fraction, spec
        self._extract = EXTRACTORS[extract]
        opts = dict(reward_options)
        if reward in ("exact_match", "numeric"):
            opts.setdefault("extract", self._extract)
        self.reward = get_reward(reward, **opts)

    def items_of(self, rows: list[dict[str, Any]], source: str) -> list[Item]:
        """The rows' items, each checked (a bad row is named by ``source`` and its index)."""
        if not rows:
            raise UserError(f"task file {source} has no rows")
        spec, user = self.spec.for_rows(rows[0]), isinstance(self.reward, UserReward)
        if user:  # the function sees the row's columns: it must take them (checked before training)
            self.reward.check([c for c in rows[0] if c != spec.prompt_column])
        return [spec.item(row, f"{source} row {i}", keep_row=user) for i, row in enumerate(rows)]

    @property
    def columns(self) -> tuple[str, str, str | None]:
        return self.spec.prompt_column, self.spec.answer_column, self.spec.demo_column

    def split_items(self, split: str) -> list[Item]:
        return split_user_items(
            self.name, self._rows["train"], self._rows["test"], split, self.test_fraction, str(self.path)
        )

    def iter_items(self, split: str, seed: int) -> Iterator[Item]:
        return epochs(self.split_items(split), random.Random(f"{seed}:{split}"))

    def verify(self, completion: str, answer: str, meta: dict[str, Any]) -> float:
        if TRL_ROW in meta:  # a user's function: TRL's arguments, the row's own prompt and columns
            row = meta[TRL_ROW]
            cols = {k: [v] for k, v in row["columns"].items()}
            value = score_rewards(self.reward, [row["prompt"]], [completion], cols, task=self.name).values[0]
        else:
            value = self.reward([""], [completion], answer=[answer], meta=[meta])[0]
        return 0.0 if value is None else float(value)

    def extract_answer(self, completion: str) -> str | None:
        return self._extract(completion)
