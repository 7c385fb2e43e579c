"""DISA's frozen log-partition table (arXiv 2605.17295; shared/specs/objectives.md section 7).

Before RL, N proposals per training prompt are sampled from a proposal model ``mu`` (the reference
by default: the "proposal strength" knob), scored under the reference and the verifier, and
``log Z_hat(x)`` is estimated by importance sampling (:func:`reasonrl.losses.balance.log_partition_is`).
The table is written once and only read afterwards: the RL loop looks a prompt up and never sends
a gradient to it. Each row keeps the prompt's effective sample sizes, the diagnostics DISA reports.

The file is JSON lines: a header ``{"disa_table": 1, "beta": ..., "length_norm": ..., "proposals": N,
"temperature": ..., "proposal": ..., "reference": ..., "task": ...}`` and one row per prompt
``{"key", "prompt_hash", "log_z", "ess", "ess_tilted", "reward_mean", "n"}``.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

import torch

from ..errors import UserError
from ..losses.balance import log_partition_is
from .selector import prompt_hash

HEADER_KEYS = ("beta", "length_norm", "proposals", "temperature", "proposal", "reference", "task")
ESS_BINS = (1, 2, 4, 8, 16, 32, 64, 128)  # lower edges of the ESS histogram's bins


@dataclass(frozen=True)
class ZRow:
    key: str
    prompt_hash: str
    log_z: float
    ess: float
    ess_tilted: float
    reward_mean: float
    n: int


def sequence_scores(logp: torch.Tensor, mask: torch.Tensor, length_norm: bool) -> torch.Tensor:
    """(R, T) token log-probs and mask -> (R,) the residual's convention: the mean, or the sum."""
    m = mask.to(logp.dtype)
    total = (logp * m).sum(-1)
    return total / m.sum(-1).clamp(min=1) if length_norm else total


def estimate_rows(
    items: Sequence[Any], lbar_ref: torch.Tensor, lbar_mu: torch.Tensor, rewards: torch.Tensor, beta: float
) -> list[ZRow]:
    """One row per item from its N proposals: (B, N) reference and proposal log-likelihoods (the
    residual's convention) and (B, N) raw rewards."""
    out = []
    for i, it in enumerate(items):
        log_z, diag = log_partition_is(lbar_ref[i], lbar_mu[i], rewards[i], beta)
        out.append(
            ZRow(
                it.key,
                prompt_hash(it.prompt),
                log_z,
                diag["ess"],
                diag["ess_tilted"],
                diag["reward_mean"],
                int(diag["n"]),
            )
        )
    return out


class ZTable:
    """A loaded table: ``header`` (its settings) and ``rows`` by prompt key."""

    def __init__(self, header: dict[str, Any], rows: dict[str, ZRow], source: str = "the run's table"):
        self.header, self.rows, self.source = header, rows, source

    @classmethod
    def of(cls, header: dict[str, Any], rows: Sequence[ZRow], source: str = "the run's table") -> "ZTable":
        return cls(header, {r.key: r for r in rows}, source)

    def check(self, beta: float, length_norm: bool, temperature: float) -> None:
        """The table must have been estimated with the residual's beta, log-likelihood convention and
        sampling temperature (the log-probs inside log Z_hat are tempered as the residual's)."""
        bad = mismatches(self.header, beta, length_norm, temperature)
        if bad:
            raise UserError(
                f"DISA table {self.source}: {'; '.join(bad)}; log Z depends on them: re-estimate the table "
                "(`reasonrl disa estimate`) or set the recipe's balance options and sampling.temperature "
                "to the table's"
            )

    def lookup(self, items: Sequence[Any]) -> tuple[torch.Tensor, list[int]]:
        """(B,) log Z_hat of ``items`` (NaN where missing) and the indices of the missing ones. A key
        whose prompt text differs from the one the table was estimated on is an error naming it."""
        values, missing = [], []
        for i, it in enumerate(items):
            row = self.rows.get(it.key)
            if row is None:
                missing.append(i)
                values.append(float("nan"))
                continue
            if row.prompt_hash != prompt_hash(it.prompt):
                raise UserError(
                    f"DISA table {self.source}: prompt key {it.key!r} was estimated on another prompt text; "
                    "re-estimate the table for this task"
                )
            values.append(row.log_z)
        return torch.tensor(values, dtype=torch.float32), missing

    def state(self) -> dict[str, Any]:
        """Plain data (a part's checkpointed state)."""
        return {"header": dict(self.header), "rows": [asdict(r) for r in self.rows.values()], "source": self.source}

    @classmethod
    def from_state(cls, st: dict[str, Any]) -> "ZTable":
        return cls.of(st["header"], [ZRow(**r) for r in st["rows"]], st.get("source", "the run's table"))


def mismatches(header: dict[str, Any], beta: float, length_norm: bool, temperature: float) -> list[str]:
    """What differs between a table's header and the run's residual: beta, the convention, and the temperature
    of the log-probs (spec objectives.md 7 (b): ``L_.`` in log Z_hat must use the same log-prob convention as the
    training residual; issue 41: the temperature was not compared, so a T = 0.8 table passed at T = 1.0)."""
    out = [
        f"{k}={header.get(k)!r} in the table, {v!r} here"
        for k, v in (("beta", beta), ("length_norm", length_norm))
        if header.get(k) != v
    ]
    table_t = header.get("temperature")
    if not isinstance(table_t, (int, float)) or not math.isclose(table_t, temperature, rel_tol=1e-9):
        out.append(f"temperature={table_t!r} in the table, {temperature!r} here")
    return out


def read_header(path: str | Path) -> dict[str, Any] | None:
    """A table file's header (its first line), or None when the file is not a readable DISA table."""
    try:
        with open(path, encoding="utf-8") as fh:
            header = json.loads(fh.readline())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return None
    return header if isinstance(header, dict) and header.get("disa_table") == 1 else None


def missing_error(items: Sequence[Any], missing: list[int], source: str) -> UserError:
    """The error for prompts the table lacks: up to five named, the rest counted."""
    names = ", ".join(repr(items[i].key) for i in missing[:5])
    more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
    return UserError(
        f"{len(missing)} prompt(s) of this batch are missing from the DISA table {source}: {names}{more}; "
        "estimate them (`reasonrl disa estimate` over the run's prompts: the same task, seed and "
        "data.pool) or set balance.missing=skip to leave their rows out of the loss"
    )


def write_table(path: str | Path, header: dict[str, Any], rows: Sequence[ZRow]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"disa_table": 1, **{k: header.get(k) for k in HEADER_KEYS}})]
    lines += [json.dumps(asdict(r)) for r in rows]
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(path)
    return path


def read_table(path: str | Path) -> ZTable:
    """A table file; a missing file, a bad line or a row without its fields is an error naming the line."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"no DISA table at {path}: write one with `reasonrl disa estimate --out {path}`")
    lines = [ln for ln in path.read_text().splitlines() if ln.strip()]
    try:
        header = json.loads(lines[0]) if lines else {}
    except json.JSONDecodeError as err:
        raise UserError(f"{path}:1: not a JSON header ({err.msg})") from err
    if header.get("disa_table") != 1:
        raise UserError(f"{path}: not a DISA table (its first line must be the header `reasonrl disa estimate` writes)")
    rows = []
    for n, line in enumerate(lines[1:], 2):
        try:
            rows.append(ZRow(**json.loads(line)))
        except (json.JSONDecodeError, TypeError) as err:
            raise UserError(
                f"{path}:{n}: not a table row with fields {list(ZRow.__dataclass_fields__)} ({err})"
            ) from err
    return ZTable.of(header, rows, str(path))


def ess_histogram(rows: Sequence[ZRow], field: str = "ess") -> list[tuple[str, int]]:
    """(bin label, count) of the rows' ESS over :data:`ESS_BINS` (the last bin open-ended)."""
    edges = list(ESS_BINS)
    counts = [0] * len(edges)
    for r in rows:
        value = getattr(r, field)
        counts[max(i for i, e in enumerate(edges) if value >= e or i == 0)] += 1
    labels = [f"[{a}, {b})" for a, b in zip(edges, edges[1:])] + [f">= {edges[-1]}"]
    return list(zip(labels, counts))


def summary(rows: Sequence[ZRow]) -> dict[str, float]:
    """Means and extremes of a table's log Z and ESS (what `reasonrl disa estimate` prints)."""
    t = {
        f: torch.tensor([getattr(r, f) for r in rows], dtype=torch.float64)
        for f in ("log_z", "ess", "ess_tilted", "reward_mean")
    }
    return {
        "prompts": float(len(rows)),
        "log_z_mean": float(t["log_z"].mean()),
        "log_z_std": float(t["log_z"].std()),
        "ess_mean": float(t["ess"].mean()),
        "ess_min": float(t["ess"].min()),
        "ess_tilted_mean": float(t["ess_tilted"].mean()),
        "ess_tilted_min": float(t["ess_tilted"].min()),
        "reward_mean": float(t["reward_mean"].mean()),
    }
