"""The cosine heatmap of the unlearnability diagnostic: prompts ordered by block (easy, learnable,
unlearnable), lines between blocks, a diverging colour map centred on 0 (as the paper's figure).

Built on ``matplotlib.figure.Figure`` and the Agg canvas (as :mod:`reasonrl.loop.plots`): headless, and
the caller's pyplot state is left alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure


def draw_heatmap(
    sim: torch.Tensor, blocks: Sequence[str], order: Sequence[str], path: str | Path, title: str = ""
) -> Path:
    """``sim`` (N, N) with rows in block order; ``blocks[i]`` is row i's block. Empty blocks are
    named on the axis with their size 0."""
    sizes = [sum(b == name for b in blocks) for name in order]
    fig = Figure(figsize=(5.2, 4.4))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    top = max(1e-6, float(sim.clone().fill_diagonal_(0).abs().max())) if len(blocks) > 1 else 1.0
    im = ax.imshow(sim.numpy(), cmap="RdBu_r", vmin=-top, vmax=top, interpolation="nearest")
    fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04).set_label("cosine similarity (diagonal = 1, off scale)")
    edges, centres, start = [], [], 0
    for size in sizes:
        centres.append(start + (size - 1) / 2)
        start += size
        edges.append(start)
    for e in edges[:-1]:
        ax.axhline(e - 0.5, color="black", linewidth=0.8)
        ax.axvline(e - 0.5, color="black", linewidth=0.8)
    labels = [f"{name} ({size})" for name, size in zip(order, sizes)]
    ax.set_xticks(centres, labels, fontsize=8)
    ax.set_yticks(centres, labels, rotation=90, va="center", fontsize=8)
    ax.tick_params(length=0)
    n = len(blocks)
    ax.set_xlim(-0.5, max(n, 1) - 0.5)
    ax.set_ylim(max(n, 1) - 0.5, -0.5)
    if title:
        ax.set_title(title, fontsize=9)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path
