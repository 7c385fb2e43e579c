"""One dataset row -> one :class:`~reasonrl.tasks.base.Item`: the column mapping of file and Hub tasks.

The prompt column holds a string or a conversation (TRL's conversational format: a list of
``{"role", "content"}`` messages ending with the user's turn); a ``messages`` column (TRL's SFT
format) is a conversation whose trailing assistant turns (the reference reply) are dropped, so the
model answers the last user turn. Columns are named with dots for nested fields
(``reward_model.ground_truth``). ``answer_format`` turns the answer column into the reference
answer (GSM8K's ``#### 72``, a solution's last ``\\boxed{}``); ``prompt_suffix`` is appended to the
prompt's text (a conversation's last user turn).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ..errors import UserError
from ..models.chat import check_messages, is_conversational, prompt_text, user_text, with_user_text
from ..rewards.answers import extract_boxed
from .base import Item

TRL_ROW = "_trl_row"  # meta key of a row's prompt and columns, kept for a user's reward function (TRL's arguments)


def _gsm8k(text: str) -> str | None:
    """GSM8K's reference: the number after the last ``####``, thousands separators removed."""
    parts = str(text).rsplit("####", 1)
    if len(parts) < 2:
        return None
    return parts[1].strip().replace(",", "") or None


ANSWER_FORMATS: dict[str, Callable[[Any], str | None]] = {
    "as_is": lambda v: str(v),
    "gsm8k": _gsm8k,
    "boxed": lambda v: extract_boxed(str(v)),  # MATH: the solution's last \boxed{...}
}


def column(row: dict[str, Any], name: str) -> tuple[bool, Any]:
    """(found, value) of ``name`` in ``row``; dots reach into nested mappings."""
    if name in row:
        return True, row[name]
    value: Any = row
    for part in name.split("."):
        if not isinstance(value, dict) or part not in value:
            return False, None
        value = value[part]
    return True, value


@dataclass(frozen=True)
class RowSpec:
    """How a row's columns become an item (see the module docs)."""

    prompt_column: str = "prompt"
    answer_column: str = "answer"
    demo_column: str | None = None
    answer_format: str = "as_is"
    prompt_suffix: str = ""

    def __post_init__(self):
        if self.answer_format not in ANSWER_FORMATS:
            raise UserError(f"unknown answer_format {self.answer_format!r}; valid: {sorted(ANSWER_FORMATS)}")

    def for_rows(self, first: dict[str, Any]) -> "RowSpec":
        """With the default ``prompt_column``, a file without a ``prompt`` column but with a
        ``messages`` one reads its prompts from ``messages``."""
        if self.prompt_column == "prompt" and "prompt" not in first and "messages" in first:
            return RowSpec("messages", self.answer_column, self.demo_column, self.answer_format, self.prompt_suffix)
        return self

    def prompt(self, value: Any, where: str) -> str | list[dict[str, str]]:
        if isinstance(value, str):
            if not value:
                raise UserError(
                    f"{where}: column {self.prompt_column!r} must be a non-empty string or a list of messages"
                )
            return value + self.prompt_suffix
        if not is_conversational(value):
            raise UserError(
                f"{where}: column {self.prompt_column!r} must be a non-empty string or a list of messages, "
                f"got {type(value).__name__}"
            )
        turns = list(value)
        while (
            self.prompt_column == "messages"
            and turns
            and isinstance(turns[-1], dict)
            and turns[-1].get("role") == "assistant"
        ):
            turns.pop()  # the reference reply of an SFT conversation: the model writes its own
        turns = check_messages(turns, f"{where}: column {self.prompt_column!r}")
        return with_user_text(turns, user_text(turns) + self.prompt_suffix) if self.prompt_suffix else turns

    def item(self, row: dict[str, Any], where: str, keep_row: bool = False) -> Item:
        """The row's item; ``keep_row``: its prompt and columns in ``meta[TRL_ROW]`` (a user's reward)."""
        cols = (self.prompt_column, self.answer_column, self.demo_column)
        found = {c: column(row, c) for c in cols if c}
        missing = [c for c, (ok, _) in found.items() if not ok]
        if missing:
            raise UserError(
                f"{where}: missing column(s) {missing}; the row has {sorted(row)} "
                "(the task options prompt_column / answer_column / demo_column name them)"
            )
        nulls = [c for c in cols[1:] if c and found[c][1] is None]
        if nulls:  # str(None) would make "None" the reference answer
            raise UserError(f"{where}: column {nulls[0]!r} is null; every row needs a value there")
        prompt = self.prompt(found[self.prompt_column][1], where)
        answer = ANSWER_FORMATS[self.answer_format](found[self.answer_column][1])
        if answer is None:
            raise UserError(
                f"{where}: column {self.answer_column!r} holds no answer in answer_format "
                f"{self.answer_format!r}: {str(found[self.answer_column][1])[-120:]!r}"
            )
        meta = {k: v for k, v in row.items() if k not in cols}
        if keep_row:
            meta[TRL_ROW] = {"prompt": prompt, "columns": {k: v for k, v in row.items() if k != self.prompt_column}}
        demo = str(found[self.demo_column][1]) if self.demo_column else None
        return Item(key=prompt_text(prompt), prompt=prompt, answer=answer, meta=meta, demo=demo)
