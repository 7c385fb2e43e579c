"""Tasks: ``arithmetic`` (default), ``rg:<reasoning-gym name>``, ``hf:<repo>[:<config>]`` (a Hub
dataset) and files (JSONL/Parquet/HF dir)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import UserError
from .arithmetic import ArithmeticTask
from .base import Item, Task, TaskReward, TaskWrapper, in_test_split, is_correct, reward_columns, take_items
from .files import FileTask
from .guidance import Critique, GuidedTask, load_guidance
from .gym import ReasoningGymTask, rg_config_fields, rg_dataset_names
from .hub import HubTask
from .azr import AZRTask
from .evoenv import EvoEnvTask
from .code import CodeTask
from .diagnosis import DiagnosisTask
from .explain import ExplainTask
from .fhir import FhirTask
from .multipart import MultipartTask
from .recommend import RecommendTask
from .temporal import TemporalTask
from .word_math import WordMathTask

DEFAULT_TASK = "arithmetic"
BUILTIN = {
    "arithmetic": ArithmeticTask,
    "azr": AZRTask,
    "code": CodeTask,
    "diagnosis": DiagnosisTask,
    "evoenv": EvoEnvTask,
    "explain": ExplainTask,
    "fhir": FhirTask,
    "multipart": MultipartTask,
    "recommend": RecommendTask,
    "temporal": TemporalTask,
    "word_math": WordMathTask,
}
FILE_SUFFIXES = (".jsonl", ".json", ".parquet")


def get_task(spec: str | None = None, **options: Any) -> Task:
    """``arithmetic``, ``rg:<name>``, ``hf:<repo>[:<config>]``, ``file:<path>`` or a path to a
    .jsonl/.parquet file or dataset dir.

    Every task checks its options and reads (so validates) its data when built, so a task that
    cannot be built is the user's doing: a ValueError or TypeError from its constructor becomes a
    :class:`~reasonrl.errors.UserError` naming the task and the options given."""
    spec = spec or DEFAULT_TASK
    if not isinstance(spec, str):
        raise UserError(f"task must be a name or a path, got {spec!r}")
    try:
        return _build(spec, options)
    except UserError:
        raise
    except (ValueError, TypeError) as err:
        given = f" with options {options}" if options else ""
        raise UserError(f"task {spec!r}{given}: {err}") from err


def _build(spec: str, options: dict[str, Any]) -> Task:
    if spec in BUILTIN:
        return BUILTIN[spec](**options)
    if spec.startswith("rg:"):
        return ReasoningGymTask(spec[3:], **options)
    if spec.startswith("hf:"):
        return HubTask(spec[3:], **options)
    path = spec[5:] if spec.startswith("file:") else spec
    if spec.startswith("file:") or path.endswith(FILE_SUFFIXES) or Path(path).is_dir():
        return FileTask(path, **options)
    raise UserError(
        f"unknown task {spec!r}; valid: {sorted(BUILTIN)}, 'rg:<name>' (see `reasonrl tasks`), "
        "'hf:<repo>[:<config>]' (a Hub dataset), or a .jsonl/.parquet file or dataset directory"
    )


def list_tasks() -> list[dict[str, Any]]:
    """Every built-in task and reasoning-gym dataset with its options and their defaults."""
    out = [
        {"name": name, "kind": "builtin", "options": _dataclass_defaults(cls().config)} for name, cls in BUILTIN.items()
    ]
    out += [{"name": f"rg:{n}", "kind": "reasoning-gym", "options": rg_config_fields(n)} for n in rg_dataset_names()]
    return out


def _dataclass_defaults(cfg: Any) -> dict[str, Any]:
    import dataclasses

    return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}


__all__ = [
    "ArithmeticTask",
    "Critique",
    "GuidedTask",
    "load_guidance",
    "FileTask",
    "HubTask",
    "Item",
    "ReasoningGymTask",
    "Task",
    "CodeTask",
    "DiagnosisTask",
    "ExplainTask",
    "FhirTask",
    "MultipartTask",
    "RecommendTask",
    "TemporalTask",
    "WordMathTask",
    "TaskReward",
    "TaskWrapper",
    "get_task",
    "in_test_split",
    "is_correct",
    "list_tasks",
    "reward_columns",
    "take_items",
]
