"""Metric sinks for a training run: a local JSONL file (always) plus optional TensorBoard, wandb, trackio.

``metrics.jsonl`` is the run's source of truth: plots, comparisons and resume checks read it, so it
is always written, flushed line by line, and truncated on resume so that a resumed run's file is
byte-identical to the file a straight run would have produced. The other sinks are conveniences
for live dashboards; they only receive numeric values.

Non-finite floats are written with Python's default ``json.dumps`` behaviour (``NaN``, ``Infinity``,
``-Infinity``). That is not strict JSON, but Python's ``json`` reads it back and, unlike ``null``, it
keeps "the loss diverged" distinguishable from "the metric was not logged".
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import json
import numbers
import os
import secrets
import tempfile
from pathlib import Path
from typing import Any, Protocol

VALID_KINDS = ("jsonl", "tensorboard", "wandb", "trackio")
METRICS_FILE = "metrics.jsonl"
COMPLETIONS_FILE = "completions.jsonl"  # a few rollouts per step as text (log_completions; CompletionsSink)
PROJECT = "reasonrl"

# The import name that must be present for each optional sink (and the pip name in the error).
_PACKAGE_FOR_KIND = {"tensorboard": "tensorboard", "wandb": "wandb", "trackio": "trackio"}


class Sink(Protocol):
    def log(self, metrics: dict[str, Any], step: int) -> None: ...

    def close(self) -> None: ...


def numeric_only(metrics: dict[str, Any]) -> dict[str, float]:
    """The values a dashboard can plot; strings and other non-numbers stay JSONL-only.

    ``numbers.Real`` admits numpy scalars as well as Python ints/floats (bools included, as 0/1)."""
    return {k: float(v) for k, v in metrics.items() if isinstance(v, numbers.Real)}


def tracking_kinds(value: str | list[str] | tuple[str, ...]) -> list[str]:
    """The sinks a ``tracking`` value names: a list as it is, a string as a one-item list (``tracking=wandb``)
    or a comma list (``tracking=wandb,tensorboard``), never its characters."""
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return list(value)


def tracking_problems(value: Any) -> list[str]:
    """One line per sink of ``value`` that cannot open: an unknown name (with the closest valid one) or an
    optional package that is not installed. The run's checks (:mod:`reasonrl.config.validate`) call this
    before anything loads, so a typo fails in a second, not after the model and the first evaluation."""
    if not isinstance(value, (str, list, tuple)) or not all(isinstance(k, str) for k in tracking_kinds(value)):
        return [
            f"config key 'tracking' must be a sink name or a list of them ({', '.join(VALID_KINDS)}), got {value!r}"
        ]
    out = []
    for kind in dict.fromkeys(tracking_kinds(value)):
        if kind not in VALID_KINDS:
            near = difflib.get_close_matches(kind, VALID_KINDS, n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            out.append(
                f"config key 'tracking' names the unknown sink {kind!r}{hint}; valid sinks: {', '.join(VALID_KINDS)}"
            )
        elif kind in _PACKAGE_FOR_KIND and importlib.util.find_spec(_PACKAGE_FOR_KIND[kind]) is None:
            out.append(
                f"config key 'tracking' asks for {kind!r}, whose package {_PACKAGE_FOR_KIND[kind]!r} is not "
                f"installed: pip install {_PACKAGE_FOR_KIND[kind]} (or drop {kind} from tracking)"
            )
    return out


def _require_package(kind: str) -> None:
    package = _PACKAGE_FOR_KIND[kind]
    if importlib.util.find_spec(package) is None:
        raise ImportError(
            f"tracking {kind!r} was requested but the package {package!r} is not installed: pip install {package}"
        )


class JsonlSink:
    """Appends ``{"step": step, **metrics}`` per call to ``path``, flushed after every line.

    Flushing hands each line to the OS immediately, so killing the process loses nothing already
    logged (no fsync: surviving a power cut is not worth a disk sync per step).

    A fresh run (``resume_from_step=None``) starts the file anew: a run directory belongs to one run.
    Resuming at step ``s`` first rewrites the file atomically keeping only lines with step <= s,
    dropping whatever the interrupted run logged after its last checkpoint.
    """

    def __init__(self, path: Path, resume_from_step: int | None = None):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if resume_from_step is None:
            self._fh = open(self.path, "w", encoding="utf-8")
        else:
            truncate_after_step(self.path, resume_from_step)
            self._fh = open(self.path, "a", encoding="utf-8")

    def log(self, metrics: dict[str, Any], step: int) -> None:
        if "step" in metrics:
            raise ValueError("metrics must not contain the key 'step'; pass the step as the step argument")
        line = json.dumps({"step": step, **metrics})
        self._fh.write(line + "\n")
        self._fh.flush()

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.close()


def truncate_after_step(path: Path, step: int) -> int:
    """Rewrite ``path`` keeping only records with ``step <= step``; returns how many were kept.

    The rewrite goes to a temp file in the same directory and is moved over the original with
    ``os.replace`` (atomic on one filesystem), so a crash during resume never leaves a half file.
    Kept lines are copied verbatim, not re-serialised, so their bytes match the straight run's.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"cannot resume metrics at step {step}: {path} does not exist")
    text = path.read_text(encoding="utf-8")
    # Everything after the last newline is dropped unparsed: a kill in the middle of a write can
    # leave a final line without its newline, and that was never a complete record.
    complete = text.split("\n")[:-1]
    kept = []
    for lineno, line in enumerate(complete, start=1):
        if not line.strip():
            continue
        record = _parse_line(line, path, lineno)
        if record["step"] <= step:
            kept.append(line)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as tmp:
            tmp.write("".join(line + "\n" for line in kept))
            tmp.flush()
            os.fsync(tmp.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        # Remove our own temp file, then let the original error propagate unchanged.
        if os.path.exists(tmp_name):
            os.unlink(tmp_name)
        raise
    return len(kept)


def _parse_line(line: str, path: Path, lineno: int) -> dict[str, Any]:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}:{lineno}: not a JSON object: {exc}") from exc
    if not isinstance(record, dict) or "step" not in record:
        raise ValueError(f"{path}:{lineno}: expected a JSON object with a 'step' key, got {line[:80]!r}")
    return record


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """All records of a ``metrics.jsonl`` in file order (blank lines skipped, anything else must parse)."""
    path = Path(path)
    records = []
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if line.strip():
                records.append(_parse_line(line, path, lineno))
    return records


class CompletionsSink:
    """``completions.jsonl``: a few of each step's rollouts as records (prompt, completion, rewards,
    advantage; :func:`reasonrl.loop.stepdata.completion_rows`), TRL's ``log_completions`` as a file.

    The same life as ``metrics.jsonl``: a fresh run starts it anew, a run resumed at step ``s`` keeps
    the records of steps <= ``s`` and appends, so a resumed run's file equals a straight run's (a run
    started before reasonrl wrote the file has no records to keep: it starts one)."""

    def __init__(self, path: Path, resume_from_step: int | None = None):
        self._jsonl = JsonlSink(path, resume_from_step if Path(path).exists() else None)

    def log_rows(self, rows: list[dict[str, Any]], step: int) -> None:
        for row in rows:
            self._jsonl.log({k: v for k, v in row.items() if k != "step"}, step)

    def close(self) -> None:
        self._jsonl.close()


def read_completions(path: Path) -> list[dict[str, Any]]:
    """The records of a ``completions.jsonl`` in file order (as :func:`read_metrics` reads)."""
    return read_metrics(path)


class TensorBoardSink:
    """One ``add_scalar`` per numeric metric under ``run_dir/tensorboard``."""

    def __init__(self, log_dir: Path, resume_from_step: int | None = None):
        _require_package("tensorboard")
        from torch.utils.tensorboard import SummaryWriter

        # purge_step makes TensorBoard discard events the interrupted run wrote after the checkpoint,
        # mirroring the JSONL truncation so the dashboards do not show two overlapping curves.
        purge = None if resume_from_step is None else resume_from_step + 1
        self._writer = SummaryWriter(log_dir=str(log_dir), purge_step=purge)

    def log(self, metrics: dict[str, Any], step: int) -> None:
        for key, value in numeric_only(metrics).items():
            self._writer.add_scalar(key, value, global_step=step)
        # Flush per step: the default flushes every 2 minutes, which loses the tail of a killed run.
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


WANDB_ID_FILE = "wandb_run_id"  # the wandb run's id, kept in the run folder so that --resume continues that run


class WandbSink:
    """A wandb run in project ``reasonrl``. Its id is written to ``run_dir/wandb_run_id``; a resumed training
    run (``resume_from_step`` set) reads it and continues that wandb run (``resume="allow"``: a run whose
    earlier process never logged to wandb starts one and keeps its id). Offline (``WANDB_MODE=offline``) the
    runs are local folders carrying the same id, which ``wandb sync`` joins into one run."""

    def __init__(self, run_dir: Path, config: dict[str, Any], run_name: str, resume_from_step: int | None = None):
        _require_package("wandb")
        wandb = importlib.import_module("wandb")
        id_path = Path(run_dir) / WANDB_ID_FILE
        if resume_from_step is not None and id_path.exists():
            run_id = id_path.read_text(encoding="utf-8").strip()
        else:
            run_id = secrets.token_hex(4)  # 8 characters of [0-9a-f], as wandb's own ids
            id_path.write_text(run_id + "\n", encoding="utf-8")
        self.run_id = run_id
        self._run = wandb.init(
            project=PROJECT,
            name=run_name,
            config=config,
            dir=str(run_dir),
            id=run_id,
            resume="allow" if resume_from_step is not None else None,
        )

    def log(self, metrics: dict[str, Any], step: int) -> None:
        self._run.log(numeric_only(metrics), step=step)

    def close(self) -> None:
        self._run.finish()


class TrackioSink:
    """A trackio run in project ``reasonrl`` (trackio keeps its own local store)."""

    def __init__(self, config: dict[str, Any], run_name: str, resume_from_step: int | None = None):
        _require_package("trackio")
        self._trackio = importlib.import_module("trackio")
        # trackio names its runs: a resumed training run continues the run of its folder's name
        self._trackio.init(
            project=PROJECT, name=run_name, config=config, resume="allow" if resume_from_step is not None else "never"
        )

    def log(self, metrics: dict[str, Any], step: int) -> None:
        self._trackio.log(numeric_only(metrics), step=step)

    def close(self) -> None:
        self._trackio.finish()


class Tracker:
    """Fans each ``log`` out to every sink; the JSONL sink is first so it is written even if a
    remote sink then raises."""

    def __init__(self, sinks: list[Sink], metrics_path: Path, completions: CompletionsSink | None = None):
        self.sinks = sinks
        self.metrics_path = metrics_path
        self.completions = completions  # None: log_completions=0
        self._closed = False

    def log(self, metrics: dict[str, Any], step: int) -> None:
        if self._closed:
            raise RuntimeError("Tracker.log called after close()")
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ValueError(f"step must be a non-negative int, got {step!r}")
        for sink in self.sinks:
            sink.log(metrics, step)

    def log_completions(self, rows: list[dict[str, Any]], step: int) -> None:
        """Records of a step's rollouts (``completions.jsonl``); nothing when the run logs none."""
        if self._closed:
            raise RuntimeError("Tracker.log_completions called after close()")
        if self.completions is not None:
            self.completions.log_rows(rows, step)

    def close(self) -> None:
        """Close every sink even if one fails, then raise the first failure."""
        if self._closed:
            return
        self._closed = True
        first_error: BaseException | None = None
        for sink in self.sinks + ([self.completions] if self.completions is not None else []):
            try:
                sink.close()
            except Exception as exc:  # noqa: BLE001 - not swallowed: the first is re-raised once every sink is closed
                if first_error is None:
                    first_error = exc
        if first_error is not None:
            raise first_error

    def __enter__(self) -> "Tracker":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def make_tracker(
    kinds: str | list[str],
    run_dir: Path,
    config: dict[str, Any],
    run_name: str,
    *,
    resume_from_step: int | None = None,
    completions: bool = False,
) -> Tracker:
    """Build a Tracker writing to ``run_dir``; ``"jsonl"`` is always included, and with
    ``completions`` the ``completions.jsonl`` sink (:class:`CompletionsSink`).

    All kinds are validated (and optional packages checked) before any sink is opened, so a typo or
    a missing package fails before a fresh run truncates an existing ``metrics.jsonl``.
    """
    kinds = tracking_kinds(kinds)
    unknown = [k for k in kinds if k not in VALID_KINDS]
    if unknown:
        raise ValueError(f"unknown tracking kind(s) {unknown}; valid kinds are {list(VALID_KINDS)}")
    wanted = ["jsonl"] + [k for k in dict.fromkeys(kinds) if k != "jsonl"]
    for kind in wanted[1:]:
        _require_package(kind)
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    metrics_path = run_dir / METRICS_FILE
    sinks: list[Sink] = []
    try:
        for kind in wanted:
            sinks.append(_open_sink(kind, run_dir, config, run_name, resume_from_step))
        done = CompletionsSink(run_dir / COMPLETIONS_FILE, resume_from_step) if completions else None
    except BaseException:
        # Do not leak the sinks already opened; the original error propagates.
        for sink in sinks:
            sink.close()
        raise
    return Tracker(sinks, metrics_path, done)


def _open_sink(kind: str, run_dir: Path, config: dict[str, Any], run_name: str, resume_from_step: int | None) -> Sink:
    if kind == "jsonl":
        return JsonlSink(run_dir / METRICS_FILE, resume_from_step)
    if kind == "tensorboard":
        return TensorBoardSink(run_dir / "tensorboard", resume_from_step)
    if kind == "wandb":
        return WandbSink(run_dir, config, run_name, resume_from_step)
    if kind == "trackio":
        return TrackioSink(config, run_name, resume_from_step)
    raise ValueError(f"unknown tracking kind {kind!r}; valid kinds are {list(VALID_KINDS)}")
