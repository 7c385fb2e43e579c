"""Where the audit's items come from and where the cleaned training set goes.

A source is a JSONL file, a Parquet file, an HF ``datasets`` directory (``save_to_disk``), or a task
split ``NAME:SPLIT`` (``arithmetic:train``, ``rg:leg_counting:test``; ``n`` distinct items drawn
with :func:`reasonrl.tasks.take_items`). Each item is (id, text): the id is the ``id_field`` column
when given (or an ``id`` column when the rows have one), else the row number (0-based); the text is
the ``text_field`` column, by default the first of ``prompt``, ``question``, ``problem``, ``text`` the
first row has; a task item is (key, prompt). A malformed row is a UserError naming file and row.

The cleaned set keeps the input's format and order: JSONL in -> the kept lines verbatim, Parquet ->
Parquet (same schema), HF directory -> HF directory, task -> JSONL rows ``{id, prompt, answer}``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from ..errors import MissingPathError, UserError
from ..models.chat import prompt_text
from ..tasks import get_task, take_items
from ..tasks.base import SPLITS
from ..tasks.files import jsonl_rows

TEXT_FIELDS = ("prompt", "question", "problem", "text")


@dataclass
class AuditItems:
    """One side of the audit: ids and texts in source order, plus what writing a subset back needs."""

    source: str
    fmt: str  # "jsonl" | "parquet" | "hf" | "task" | "memory"
    ids: list[str]
    texts: list[str]
    extra: dict[str, Any] = field(default_factory=dict)  # jsonl: raw lines; task: answers

    def __len__(self) -> int:
        return len(self.ids)


def from_pairs(pairs: Sequence[tuple[str, str]], source: str = "memory") -> AuditItems:
    """Items given in Python: ``[(id, text), ...]``."""
    rows = [{"id": i, "text": t} for i, t in pairs]
    return _build(source, "memory", [(n, r) for n, r in enumerate(rows)], lambda n: f"{source} item {n}", "text", "id")


def load_items(
    spec: str, text_field: str | None = None, id_field: str | None = None, n: int = 1000, seed: int = 0
) -> AuditItems:
    """Items of a file, dataset directory or ``task:split`` (see the module doc)."""
    path = Path(spec)
    if path.exists():
        if path.is_dir():
            return _load_hf(path, text_field, id_field)
        if path.suffix == ".parquet":
            return _load_parquet(path, text_field, id_field)
        if path.suffix in (".jsonl", ".json"):
            return _load_jsonl(path, text_field, id_field)
        raise UserError(
            f"unsupported audit source {path}: use .jsonl, .parquet, a saved HF dataset directory "
            "or a task split like arithmetic:train"
        )
    name, _, split = spec.rpartition(":")
    if name and split in SPLITS:
        return _load_task(spec, name, split, n, seed)
    if spec.endswith((".jsonl", ".json", ".parquet")):
        raise MissingPathError(f"audit source {spec} does not exist")
    raise UserError(
        f"audit source {spec!r} is neither an existing file/directory nor a task split "
        f"NAME:SPLIT with SPLIT in {list(SPLITS)} (e.g. arithmetic:train)"
    )


def _load_jsonl(path: Path, text_field: str | None, id_field: str | None) -> AuditItems:
    numbered = list(jsonl_rows(path))  # UserError on a line that is not a JSON object, naming path:line
    lines = path.read_text(encoding="utf-8").splitlines()  # the same split jsonl_rows numbers
    items = _build(str(path), "jsonl", numbered, lambda n: f"{path}:{n}", text_field, id_field)
    items.extra["lines"] = [lines[n - 1] for n, _ in numbered]
    return items


def _load_parquet(path: Path, text_field: str | None, id_field: str | None) -> AuditItems:
    import pyarrow.parquet as pq

    rows = pq.read_table(path).to_pylist()
    return _build(str(path), "parquet", list(enumerate(rows)), lambda n: f"{path} row {n}", text_field, id_field)


def _load_hf(path: Path, text_field: str | None, id_field: str | None) -> AuditItems:
    from datasets import load_from_disk

    try:
        ds = load_from_disk(str(path))
    except FileNotFoundError as err:
        raise UserError(f"{path} is not a saved HF dataset directory (datasets.save_to_disk): {err}") from err
    if not hasattr(ds, "select"):  # a DatasetDict: the user must pick one split
        raise UserError(f"{path} holds several splits {list(ds)}; give the directory of one of them")
    rows = [dict(r) for r in ds]
    return _build(str(path), "hf", list(enumerate(rows)), lambda n: f"{path} row {n}", text_field, id_field)


def _load_task(spec: str, name: str, split: str, n: int, seed: int) -> AuditItems:
    if n < 1:
        raise UserError(f"{spec}: the number of items to draw must be >= 1, got {n}")
    task = get_task(name)
    items = take_items(task, split, n, seed=seed)
    out = AuditItems(spec, "task", [it.key for it in items], [prompt_text(it.prompt) for it in items])
    out.extra["answers"] = [it.answer for it in items]
    return out


def _pick_text_field(rows: list[tuple[int, dict]], where, text_field: str | None) -> str:
    if text_field:
        return text_field
    first_no, first = rows[0]
    for name in TEXT_FIELDS:
        if name in first:
            return name
    raise UserError(
        f"{where(first_no)}: none of the text columns {list(TEXT_FIELDS)} is present (the row has "
        f"{sorted(first)}); name one with --text-field"
    )


def _build(
    source: str, fmt: str, rows: list[tuple[int, dict]], where, text_field: str | None, id_field: str | None
) -> AuditItems:
    """Validated (id, text) per row; a missing or empty text, a missing or repeated id is a UserError
    naming ``where(row number)``."""
    if not rows:
        raise UserError(f"{source}: no rows to audit")
    text_field = _pick_text_field(rows, where, text_field)
    id_field = id_field or ("id" if "id" in rows[0][1] else None)
    ids, texts, seen = [], [], {}
    for pos, (no, row) in enumerate(rows):
        text = row.get(text_field)
        if not isinstance(text, str) or not text.strip():
            raise UserError(f"{where(no)}: column {text_field!r} must be a non-empty string, got {text!r}")
        if id_field is not None:
            if id_field not in row or row[id_field] is None:
                raise UserError(f"{where(no)}: missing id column {id_field!r} (the row has {sorted(row)})")
            rid = str(row[id_field])
        else:
            rid = str(pos)
        if rid in seen:
            raise UserError(f"{where(no)}: id {rid!r} repeats {where(seen[rid])}; ids must be unique")
        seen[rid] = no
        ids.append(rid)
        texts.append(text)
    return AuditItems(source, fmt, ids, texts)


def write_cleaned(items: AuditItems, drop_ids: set[str], out_dir: Path) -> str:
    """Write ``items`` minus ``drop_ids``, in order, in the input's format; returns the file name."""
    keep = [i for i, rid in enumerate(items.ids) if rid not in drop_ids]
    if items.fmt == "parquet":
        import pyarrow.parquet as pq

        table = pq.read_table(items.source)
        pq.write_table(table.take(keep), out_dir / "train_clean.parquet")
        return "train_clean.parquet"
    if items.fmt == "hf":
        from datasets import load_from_disk

        load_from_disk(items.source).select(keep).save_to_disk(str(out_dir / "train_clean"))
        return "train_clean"
    if items.fmt == "jsonl":
        lines = [items.extra["lines"][i] for i in keep]
    elif items.fmt == "task":
        lines = [
            json.dumps({"id": items.ids[i], "prompt": items.texts[i], "answer": items.extra["answers"][i]})
            for i in keep
        ]
    else:
        lines = [json.dumps({"id": items.ids[i], "text": items.texts[i]}) for i in keep]
    (out_dir / "train_clean.jsonl").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return "train_clean.jsonl"
