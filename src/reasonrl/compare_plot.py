"""The comparison's figure (``compare.png``): held-out pass@1 of each recipe against steps and wall-clock.

Apart from :mod:`reasonrl.compare` (which re-exports :func:`plot_compare`) to keep that module under 400 lines;
matplotlib is imported only when a figure is drawn."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def plot_compare(results: list[Any], recipes: list[str], out_png: Path) -> None:
    """Held-out pass@1 against steps and against wall-clock: mean line and min-max band over seeds.
    ``results``: :class:`reasonrl.compare.RunResult` (not imported: that module imports this one)."""
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4.2))
    FigureCanvasAgg(fig)
    by_steps, by_time = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    for recipe in recipes:
        curves = [r.curve for r in results if r.recipe == recipe and r.ok and r.curve]
        if not curves:
            continue
        n = min(len(c) for c in curves)  # seeds share the eval schedule; a shorter one trims all
        acc = np.array([[p[2] for p in c[:n]] for c in curves])  # (seeds, points)
        steps = [p[0] for p in curves[0][:n]]
        secs = np.array([[p[1] for p in c[:n]] for c in curves]).mean(0)
        for ax, x in ((by_steps, steps), (by_time, secs)):
            line = ax.plot(x, acc.mean(0), marker=".", label=f"{recipe} ({len(curves)} seeds)")[0]
            ax.fill_between(x, acc.min(0), acc.max(0), alpha=0.2, color=line.get_color())
    for ax, xlabel in ((by_steps, "step"), (by_time, "training seconds")):
        ax.set_xlabel(xlabel)
        ax.set_ylabel("held-out greedy pass@1")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:  # no successful run: nothing to label
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_png, dpi=110)
