"""``reasonrl report DIR``: one self-contained HTML page for a run folder or a compare folder.

The page needs nothing beside it and reaches for nothing: plots are PNGs inside the file
(``data:`` URIs), the style is inline, there is no script, and a Content-Security-Policy blocks any
other source. Every value read from the folder is escaped (completions are model output).
"""

from __future__ import annotations

from pathlib import Path

from ..loop.checkpoint import atomic_write_text
from ..errors import ExistingPathError
from .compare_page import compare_page
from .folders import folder_kind, load_compare, load_run
from .run_page import run_page

__all__ = ["build_report", "write_report"]


def build_report(folder: str | Path) -> str:
    """The HTML of a run folder's or a compare folder's page (UserError for anything else)."""
    folder = Path(folder)
    if folder_kind(folder) == "compare":
        return compare_page(load_compare(folder))
    return run_page(load_run(folder))


def write_report(folder: str | Path, out: str | Path | None = None) -> Path:
    """Write the page to ``out`` (default ``folder/report.html``) atomically; returns its path."""
    path = Path(out) if out is not None else Path(folder) / "report.html"
    if path.is_dir():
        raise ExistingPathError(f"--out {path} is a folder; give the HTML file to write, e.g. {path / 'report.html'}")
    text = build_report(folder)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, text)
    return path
