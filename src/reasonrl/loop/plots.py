"""Training curves from ``metrics.jsonl`` records, drawn to a PNG.

Figures are built with ``matplotlib.figure.Figure`` rather than ``pyplot`` so nothing touches the
global backend or opens a window: saving goes through the Agg canvas, which works headless and
leaves the caller's matplotlib state (e.g. a notebook backend) alone.
"""

from __future__ import annotations

import math
import numbers
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

NOT_LOGGED = "not logged"


def _series(records: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of the records that carry a numeric ``key``, in step order."""
    points = []
    for i, rec in enumerate(records):
        if key not in rec or not isinstance(rec[key], numbers.Real):
            continue
        if "step" not in rec:
            raise ValueError(f"record {i} has {key!r} but no 'step': {rec}")
        points.append((rec["step"], float(rec[key])))
    points.sort(key=lambda p: p[0])
    return [p[0] for p in points], [p[1] for p in points]


def _not_logged(ax, title: str, keys: list[str]) -> None:
    ax.set_title(title)
    ax.text(
        0.5, 0.5, f"{NOT_LOGGED}\n({', '.join(keys)})", ha="center", va="center", transform=ax.transAxes, color="gray"
    )
    ax.set_xticks([])
    ax.set_yticks([])


def _line_panel(ax, title: str, records: list[dict[str, Any]], keys: list[str]) -> None:
    """One line per key that is present; the panel says "not logged" when none is."""
    drawn = 0
    for key in keys:
        steps, values = _series(records, key)
        if steps:
            ax.plot(steps, values, label=key, marker="." if len(steps) < 30 else None)
            drawn += 1
    if not drawn:
        _not_logged(ax, title, keys)
        return
    ax.set_title(title)
    ax.set_xlabel("step")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)


def _reward_panel(ax, records: list[dict[str, Any]]) -> None:
    steps, means = _series(records, "reward/mean")
    if not steps:
        _not_logged(ax, "reward", ["reward/mean"])
        return
    ax.plot(steps, means, label="reward/mean", marker="." if len(steps) < 30 else None)
    # The band only covers records that logged both mean and std, so the two lists stay aligned.
    band = [
        (r["step"], float(r["reward/mean"]), float(r["reward/std"]))
        for r in records
        if isinstance(r.get("reward/mean"), numbers.Real) and isinstance(r.get("reward/std"), numbers.Real)
    ]
    band.sort(key=lambda b: b[0])
    if band:
        xs = [b[0] for b in band]
        ax.fill_between(xs, [b[1] - b[2] for b in band], [b[1] + b[2] for b in band], alpha=0.2, label="± reward/std")
    ax.set_title("reward")
    ax.set_xlabel("step")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)


def _accuracy_panel(ax, records: list[dict[str, Any]], eval_records: list[dict[str, Any]]) -> None:
    """Training accuracy as a line, held-out eval/pass@1 as markers (from either record list)."""
    steps, acc = _series(records, "accuracy")
    ev_steps, ev = _series(list(records) + list(eval_records), "eval/pass@1")
    if not steps and not ev_steps:
        _not_logged(ax, "accuracy", ["accuracy", "eval/pass@1"])
        return
    if steps:
        ax.plot(steps, acc, label="accuracy (train)", marker="." if len(steps) < 30 else None)
    if ev_steps:
        ax.plot(ev_steps, ev, "o--", label="eval/pass@1 (held-out)")
    ax.set_title("accuracy")
    ax.set_xlabel("step")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)


def _has_numeric(records: list[dict[str, Any]], key: str) -> bool:
    return any(isinstance(r.get(key), numbers.Real) and not math.isnan(float(r[key])) for r in records)


def plot_curves(records: list[dict[str, Any]], out_png: Path, eval_records: list[dict[str, Any]] | None = None) -> Path:
    """Write a 5-panel PNG (reward, accuracy, completion length, KL, entropy) against step.

    A panel whose keys were never logged shows "not logged" instead of failing, so the same call
    works for any algorithm (e.g. one without a KL term). Returns ``out_png``.
    """
    out_png = Path(out_png)
    out_png.parent.mkdir(parents=True, exist_ok=True)
    fig = Figure(figsize=(15, 8), constrained_layout=True)
    FigureCanvasAgg(fig)
    axes = fig.subplots(2, 3).ravel()
    _reward_panel(axes[0], records)
    _accuracy_panel(axes[1], records, eval_records or [])
    _line_panel(axes[2], "completion length", records, ["length/mean", "length/max"])
    # Algorithms either log an exact KL or only the approximate one; prefer the exact when present.
    kl_keys = [k for k in ("loss/kl", "loss/approx_kl") if _has_numeric(records, k)][:1]
    if kl_keys:
        _line_panel(axes[3], "KL", records, kl_keys)
    else:
        _not_logged(axes[3], "KL", ["loss/kl", "loss/approx_kl"])
    _line_panel(axes[4], "entropy", records, ["entropy/mean"])
    axes[5].set_visible(False)
    fig.savefig(out_png, dpi=100)
    return out_png
