"""What ``reasonrl report`` reads: a run folder (``reasonrl train``) or a compare folder
(``reasonrl compare``), recognised by the file each always has, and the optional audit.

A run folder is one with ``config.yaml`` and ``metrics.jsonl`` (both written as the run starts);
``summary.json`` exists once the run finished, ``samples.jsonl`` and ``completions.jsonl`` since runs
write them (an older or unfinished run lacks them: the page says so). A compare folder is one with ``compare.json``.
An audit (``reasonrl audit --out DIR``) is ``DIR/audit.json`` or ``DIR/audit/audit.json``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..errors import MissingPathError, UserError
from ..tasks.files import jsonl_rows
from ..loop.tracking import COMPLETIONS_FILE, read_metrics

AUDIT_KEYS = ("stages", "counts", "seconds")  # what the audit summary cannot do without


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise UserError(f"{path}: not valid JSON ({err.msg} at line {err.lineno}); was the file cut short?") from err


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a JSONL file, a bad line named by its number (the task loader's reader)."""
    return [row for _, row in jsonl_rows(path)]


def read_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        raise UserError(f"{path}: not valid YAML ({getattr(err, 'problem', None) or err})") from err
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a mapping of config keys, got {type(data).__name__}")
    return data


@dataclass
class RunFolder:
    path: Path
    config: dict[str, Any]
    metrics: list[dict[str, Any]]
    summary: dict[str, Any] | None  # None: the run has not finished (no summary.json)
    samples: list[dict[str, Any]] | None  # None: no samples.jsonl (an older or unfinished run)
    events: list[dict[str, Any]] = field(default_factory=list)
    completions: list[dict[str, Any]] | None = None  # completions.jsonl; None: a run that wrote none


@dataclass
class CompareFolder:
    path: Path
    report: dict[str, Any]  # compare.json
    configs: dict[str, dict[str, Any]]  # recipe entry -> config.yaml of its first run folder that has one
    samples: dict[str, list[dict[str, Any]] | None]  # recipe entry -> samples.jsonl of that run folder


def folder_kind(path: Path) -> str:
    """``"compare"`` or ``"run"``; anything else is a UserError naming the files looked for."""
    if not path.exists():
        raise MissingPathError(
            f"{path} does not exist; give a run folder (reasonrl train --out) or a compare "
            "folder (reasonrl compare --out)"
        )
    if not path.is_dir():
        raise MissingPathError(f"{path} is a file; give the folder that holds it")
    if (path / "compare.json").is_file():
        return "compare"
    missing = [n for n in ("config.yaml", "metrics.jsonl") if not (path / n).is_file()]
    if not missing:
        return "run"
    raise MissingPathError(
        f"{path} is neither a compare folder (no compare.json) nor a run folder (no {' and no '.join(missing)})"
    )


def load_run(path: Path) -> RunFolder:
    folder_kind(path)
    try:
        metrics = read_metrics(path / "metrics.jsonl")
    except ValueError as err:  # tracking's reader names file and line; a user's file, so a UserError
        raise UserError(str(err)) from err
    summary = read_json(path / "summary.json") if (path / "summary.json").is_file() else None
    samples = read_jsonl(path / "samples.jsonl") if (path / "samples.jsonl").is_file() else None
    events = read_jsonl(path / "events.jsonl") if (path / "events.jsonl").is_file() else []
    done = read_jsonl(path / COMPLETIONS_FILE) if (path / COMPLETIONS_FILE).is_file() else None
    return RunFolder(path, read_yaml(path / "config.yaml"), metrics, summary, samples, events, done)


def _check_compare(path: Path, report: Any) -> dict[str, Any]:
    if not isinstance(report, dict):
        raise UserError(f"{path}: expected a JSON object as `reasonrl compare` writes, got {type(report).__name__}")
    missing = [k for k in ("recipes", "table", "runs") if k not in report]
    if missing:
        raise UserError(
            f"{path}: no {', '.join(repr(k) for k in missing)}; is it a compare.json of `reasonrl compare`?"
        )
    return report


def run_folder_of(compare_dir: Path, run: dict[str, Any]) -> Path:
    """A run's folder: as compare.json names it, or by its name inside the compare folder (moved or copied)."""
    named = Path(run["run_dir"])
    return named if named.is_dir() else compare_dir / named.name


def load_compare(path: Path) -> CompareFolder:
    if folder_kind(path) != "compare":
        raise MissingPathError(f"{path}: no compare.json; give the --out folder of `reasonrl compare`")
    report = _check_compare(path / "compare.json", read_json(path / "compare.json"))
    configs: dict[str, dict[str, Any]] = {}
    samples: dict[str, list[dict[str, Any]] | None] = {}
    for run in report["runs"]:
        entry, folder = run["recipe"], run_folder_of(path, run)
        if entry not in configs and (folder / "config.yaml").is_file():
            configs[entry] = read_yaml(folder / "config.yaml")
        if samples.get(entry) is None and run.get("ok"):
            samples[entry] = read_jsonl(folder / "samples.jsonl") if (folder / "samples.jsonl").is_file() else None
    return CompareFolder(path, report, configs, samples)


def find_audit(path: Path) -> Path | None:
    for candidate in (path / "audit.json", path / "audit" / "audit.json"):
        if candidate.is_file():
            return candidate
    return None


def load_audit(path: Path) -> dict[str, Any]:
    audit = read_json(path)
    if not isinstance(audit, dict):
        raise UserError(f"{path}: expected the JSON object `reasonrl audit` writes, got {type(audit).__name__}")
    missing = [k for k in AUDIT_KEYS if k not in audit]
    if missing:
        raise UserError(f"{path}: no {', '.join(repr(k) for k in missing)}; is it an audit.json of `reasonrl audit`?")
    return audit
