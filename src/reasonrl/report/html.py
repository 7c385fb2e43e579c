"""HTML building blocks for ``reasonrl report``, from the standard library alone.

Everything that comes from a run folder is text from outside this program (completions are model
output; a config value or a task prompt may hold ``<``), so every value goes through
:func:`esc`; only fragments built here are marked :class:`Raw` and passed through. The page carries
a Content-Security-Policy that allows inline style and ``data:`` images and nothing else: a
reference to the network, were one to slip in, is blocked by the browser rather than fetched.
"""

from __future__ import annotations

import base64
import html
import math
from pathlib import Path
from typing import Any, Iterable, Sequence

CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"

STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;max-width:1180px;
 padding:0 24px 48px;color:#1d2329;background:#fff;line-height:1.45}
header{border-bottom:2px solid #2b6cb0;margin-bottom:8px;padding:16px 0 8px}
h1{font-size:1.6em;margin:0 0 4px}h2{font-size:1.25em;margin:28px 0 8px;color:#2b6cb0}
h3{font-size:1.05em;margin:16px 0 6px}
nav a{margin-right:14px;font-size:.92em}
table{border-collapse:collapse;margin:6px 0 10px;font-size:.9em}
th,td{border:1px solid #d5dbe1;padding:4px 8px;text-align:right;vertical-align:top}
th{background:#eef3f8}td{white-space:nowrap}td.l,th.l{text-align:left;white-space:normal}
tr:nth-child(even) td{background:#f8fafc}
img{max-width:100%;border:1px solid #e2e8f0}
pre{background:#f6f8fa;border:1px solid #e2e8f0;padding:8px;overflow-x:auto;font-size:.85em;
 white-space:pre-wrap;word-break:break-word;margin:4px 0}
.note{color:#5a6570;font-size:.9em}.ok{color:#22743a;font-weight:600}.bad{color:#b42318;font-weight:600}
.sample{border:1px solid #d5dbe1;border-radius:4px;padding:6px 10px;margin:8px 0}
.pc{display:grid;grid-template-columns:1fr 2fr;gap:10px}
.meta{font-size:.85em;color:#5a6570}
details>summary{cursor:pointer;font-weight:600;margin:6px 0}
"""


class Raw(str):
    """A fragment built by this package: already escaped, inserted as is."""


def esc(value: Any) -> str:
    """``value`` as text safe inside an element or a quoted attribute."""
    return value if isinstance(value, Raw) else html.escape(str(value), quote=True)


def fmt(value: Any, digits: int = 4) -> str:
    """A number as a table shows it (``digits`` significant figures); None as a dash."""
    if value is None:
        return "-"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return str(value)
    if not math.isfinite(value):
        return str(value)
    return f"{value:.{digits}g}" if abs(value) < 10**digits else f"{value:.0f}"


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], left: int = 1) -> Raw:
    """A table; the first ``left`` columns are left-aligned (names), the rest right-aligned (numbers)."""

    def cells(values: Sequence[Any], tag: str) -> str:
        return "".join(f"<{tag}{' class=l' if i < left else ''}>{esc(v)}</{tag}>" for i, v in enumerate(values))

    body = "".join(f"<tr>{cells(r, 'td')}</tr>" for r in rows)
    return Raw(f"<table><thead><tr>{cells(headers, 'th')}</tr></thead><tbody>{body}</tbody></table>")


def section(anchor: str, title: str, *parts: str) -> Raw:
    return Raw(f'<section id="{esc(anchor)}"><h2>{esc(title)}</h2>{"".join(esc(p) for p in parts)}</section>')


def tag(name: str, content: Any, cls: str | None = None) -> Raw:
    """``<name class=cls>content</name>``; content escaped unless it is :class:`Raw`."""
    attr = f' class="{esc(cls)}"' if cls else ""
    return Raw(f"<{name}{attr}>{esc(content)}</{name}>")


def note(text: Any) -> Raw:
    return tag("p", text, "note")


def pre(text: Any) -> Raw:
    return tag("pre", text)


def details(summary: str, *parts: str, open_: bool = False) -> Raw:
    return Raw(
        f"<details{' open' if open_ else ''}><summary>{esc(summary)}</summary>"
        f"{''.join(esc(p) for p in parts)}</details>"
    )


def png(path: Path, alt: str) -> Raw:
    """A PNG file embedded as a ``data:`` URI: the page needs no file beside it."""
    data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
    return Raw(f'<img alt="{esc(alt)}" src="data:image/png;base64,{data}">')


def page(title: str, subtitle: str, sections: Sequence[tuple[str, str, str]]) -> str:
    """The whole document; ``sections`` are (anchor, nav label, section HTML)."""
    nav = "".join(f'<a href="#{esc(a)}">{esc(label)}</a>' for a, label, _ in sections)
    body = "".join(esc(s) for _, _, s in sections)
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{STYLE}</style></head><body>"
        f"<header><h1>{esc(title)}</h1><div class=meta>{esc(subtitle)}</div><nav>{nav}</nav></header>"
        f"{body}</body></html>\n"
    )
