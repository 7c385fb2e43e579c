"""The page of a compare folder: the table with Welch's and the paired tests, the held-out curves,
every run, the config keys in which the recipes differ, completions per recipe, the audit."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from ..compare import RunResult, differing, plot_compare
from .folders import CompareFolder, find_audit, load_audit, run_folder_of
from .html import Raw, details, fmt, note, page, png, section, table, tag
from .sections import audit_section, config_yaml, samples_parts

PER_RUN_KEYS = ("out", "seed")  # differ between any two runs by construction: not a recipe difference


def _paired_cells(row: dict[str, Any], first: str) -> list[str]:
    """Δ [95% CI], McNemar p (b/c), one-sided sign p, pairs; the reference recipe says so."""
    pt = row.get("paired_vs_first")
    if pt is None:
        return ["reference", "", "", ""] if row["recipe"] == first else ["", row.get("paired_skipped", ""), "", ""]
    return [
        f"{pt['diff']:+.3f} [{pt['ci_low']:+.3f}, {pt['ci_high']:+.3f}]",
        f"{fmt(pt['mcnemar_p'], 3)} ({pt['b']}/{pt['c']})",
        fmt(pt["sign_p_greater"], 3),
        f"{pt['n_items']} (seeds {', '.join(str(s) for s in pt.get('seeds', []))})",
    ]


def compare_table(report: dict[str, Any]) -> Raw:
    heads = (
        "recipe",
        "final pass@1 (mean ± std)",
        "best",
        "AUC",
        "train s",
        "tokens",
        "Welch p",
        "paired Δ [95% CI]",
        "McNemar p (b/c)",
        "sign p (one-sided)",
        "paired items",
        "runs",
    )
    rows = []
    for row in report["table"]:
        runs = f"{row.get('runs_ok', 0)} ok / {row.get('runs_failed', 0)} failed"
        if "final_mean" not in row:
            rows.append([row["recipe"], *["-"] * 10, runs])
            continue
        rows.append(
            [
                row["recipe"],
                f"{fmt(row['final_mean'], 3)} ± {fmt(row['final_std'], 3)}",
                fmt(row["best"], 3),
                fmt(row["auc"], 3),
                fmt(row["seconds"], 3),
                fmt(row["tokens"]),
                fmt(row.get("p_vs_first"), 3),
                *_paired_cells(row, report["recipes"][0]),
                runs,
            ]
        )
    return table(heads, rows)


def table_section(report: dict[str, Any]) -> Raw:
    first = report["recipes"][0]
    b_used = next((r["paired_vs_first"].get("bootstrap_B") for r in report["table"] if r.get("paired_vs_first")), None)
    return section(
        "table",
        "Recipes compared",
        compare_table(report),
        note(
            f"final pass@1: held-out greedy pass@1 after training, mean ± sample std (ddof=1) over seeds; AUC: mean "
            f"held-out accuracy over training. Every test is against the first recipe ({first}). Welch p: Welch's "
            "t-test on the per-seed finals. Paired tests on the same held-out items (after_items.jsonl), pooled over "
            "the seeds both recipes ran: each (seed, item) is one pair. b: items this recipe got right and "
            f"{first} wrong, c: the reverse; McNemar: exact, two-sided; sign p: one-sided, this recipe better; "
            f"Δ: difference in accuracy with a paired bootstrap 95% CI (B={fmt(b_used)}, seed 0). Values as "
            "compare.json holds them."
        ),
    )


def run_results(report: dict[str, Any]) -> list[RunResult]:
    """compare.json's runs as :class:`reasonrl.compare.RunResult` (for its own plot)."""
    nan = float("nan")
    return [
        RunResult(
            r["recipe"],
            r["seed"],
            Path(r["run_dir"]),
            bool(r.get("ok")),
            r.get("error", ""),
            *(nan if r.get(k) is None else r[k] for k in ("final", "auc", "seconds", "tokens")),
            curve=[tuple(p) for p in r.get("curve") or []],
        )
        for r in report["runs"]
    ]


def curves_section(report: dict[str, Any]) -> Raw:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "compare.png"
        plot_compare(run_results(report), report["recipes"], out)
        img = png(out, "held-out pass@1 against steps and seconds")
    return section(
        "curves",
        "Held-out curves",
        img,
        note("Mean over seeds, band from the lowest to the highest seed; step 0 is the starting model."),
    )


def runs_section(cmp: CompareFolder) -> Raw:
    rows = [
        [
            r["recipe"],
            r["seed"],
            "ok" if r.get("ok") else f"failed: {r.get('error', '')}",
            fmt(r.get("final"), 3),
            fmt(r.get("auc"), 3),
            fmt(r.get("seconds"), 3),
            fmt(r.get("tokens")),
            run_folder_of(cmp.path, r).name,
        ]
        for r in cmp.report["runs"]
    ]
    return section(
        "runs",
        "Every run",
        table(("recipe", "seed", "status", "final pass@1", "AUC", "train s", "tokens", "folder"), rows, left=3),
    )


def _lookup(config: dict[str, Any], dotted: str) -> Any:
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _show(value: Any) -> str:
    return (
        value
        if isinstance(value, str)
        else fmt(value)
        if isinstance(value, (int, float))
        else json.dumps(value, default=str)
    )


def differing_keys(configs: dict[str, dict[str, Any]]) -> list[str]:
    """Dotted config keys whose value is not the same for every recipe, found by
    :func:`reasonrl.compare.differing` (each recipe against the first), per-run keys left out."""
    names = list(configs)
    keys: list[str] = []
    for name in names[1:]:
        for key, _, _ in differing(configs[names[0]], configs[name]):
            if key not in keys and key.split(".")[0] not in PER_RUN_KEYS:
                keys.append(key)
    return sorted(keys)


def config_section(cmp: CompareFolder) -> Raw:
    configs = {r: cmp.configs[r] for r in cmp.report["recipes"] if r in cmp.configs}
    missing = [r for r in cmp.report["recipes"] if r not in cmp.configs]
    parts: list[str] = []
    if missing:
        parts.append(note(f"No config.yaml found for {', '.join(missing)} (run folder moved or never started)."))
    if len(configs) >= 2:
        keys = differing_keys(configs)
        rows = [[k, *(_show(_lookup(c, k)) for c in configs.values())] for k in keys]
        parts += [
            table(("key", *configs), rows, left=len(configs) + 1)
            if rows
            else note("The recipes' configurations are the same apart from out and seed."),
            note("Each recipe's first run folder; out and seed differ between every two runs and are left out."),
        ]
    if configs:
        first = next(iter(configs))
        parts.append(details(f"full config.yaml of {first}", config_yaml(configs[first])))
    return section("config", "Configuration: what differs between recipes", *parts)


def samples_section(cmp: CompareFolder) -> Raw:
    parts = []
    for recipe in cmp.report["recipes"]:
        samples = cmp.samples.get(recipe)
        if recipe not in cmp.samples:
            parts.append(tag("h3", recipe))
            parts.append(note("No successful run: no completions."))
            continue
        right = sum(1 for s in samples or [] if s.get("correct"))
        label = f"{recipe}: {right} correct, {len(samples) - right} wrong" if samples else f"{recipe}: no samples"
        parts.append(details(label, *samples_parts(samples, f"the first successful run of {recipe}")))
    return section("samples", "Completions (first successful seed of each recipe)", *parts)


def compare_page(cmp: CompareFolder) -> str:
    rep = cmp.report
    audit_path = find_audit(cmp.path)
    audit = load_audit(audit_path) if audit_path is not None else None
    ok = sum(1 for r in rep["runs"] if r.get("ok"))
    sections = [
        ("table", "Table", table_section(rep)),
        ("curves", "Curves", curves_section(rep)),
        ("runs", "Runs", runs_section(cmp)),
        ("config", "Config", config_section(cmp)),
        ("samples", "Completions", samples_section(cmp)),
        ("audit", "Audit", audit_section(audit_path, audit)),
    ]
    title = f"reasonrl compare: {', '.join(rep['recipes'])} on {rep.get('task', '?')}"
    subtitle = (
        f"{cmp.path} · {rep.get('steps', '?')} steps · {rep.get('seeds', '?')} seeds · {ok} of "
        f"{len(rep['runs'])} runs ok · reasonrl report"
    )
    return page(title, subtitle, sections)
