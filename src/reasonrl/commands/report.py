"""``reasonrl report``: a self-contained HTML page of a run folder or a compare folder."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .common import console


def report_cmd(
    folder: Path = typer.Argument(
        ..., help="A run folder (reasonrl train --out) or a compare folder (reasonrl compare --out)."
    ),
    out: Optional[Path] = typer.Option(None, help="The HTML file to write (default: FOLDER/report.html)."),
) -> None:
    """One HTML page, no network needed: config, before/after, curves, metrics, paired tests, completions, audit."""
    from ..report import write_report

    path = write_report(folder, out)
    console.print(str(path), soft_wrap=True)
