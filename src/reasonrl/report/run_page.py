"""The page of one run folder: what ran, before/after, curves, per-step metrics, training rollouts,
evaluation completions, audit."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from ..loop.plots import plot_curves
from .folders import RunFolder, find_audit, load_audit
from .html import Raw, fmt, note, page, png, section, table, tag
from .sections import audit_section, before_after_table, config_yaml, samples_parts, training_parts

MAX_METRIC_ROWS = 20
# The per-step table's columns, in this order, where logged; the rest stay in metrics.jsonl.
METRIC_COLUMNS = (
    "reward/mean",
    "accuracy",
    "eval/pass@1",
    "length/mean",
    "loss/kl",
    "loss/approx_kl",
    "entropy/mean",
    "grad_norm",
    "lr",
    "tokens/generated",
)
HEADLINE = ("recipe", "task", "model", "steps", "seed")


def downsample(n: int, most: int) -> list[int]:
    """At most ``most`` indices of ``range(n)``, evenly spread, the first and the last included."""
    if n <= most:
        return list(range(n))
    return sorted({round(i * (n - 1) / (most - 1)) for i in range(most)})


def step_seconds(record: dict[str, Any]) -> float:
    """A step's wall-clock: the sum of its ``time/*`` phases (as ``reasonrl compare`` counts it)."""
    return sum(v for k, v in record.items() if k.startswith("time/") and isinstance(v, (int, float)))


def metrics_section(metrics: list[dict[str, Any]]) -> Raw:
    if not metrics:
        return section("metrics", "Per-step metrics", note("metrics.jsonl holds no step yet."))
    cols = [c for c in METRIC_COLUMNS if any(c in r for r in metrics)]
    picked = [metrics[i] for i in downsample(len(metrics), MAX_METRIC_ROWS)]
    rows = [[r["step"], *(fmt(r.get(c)) for c in cols), fmt(step_seconds(r), 3)] for r in picked]
    keys = sorted({k for r in metrics for k in r} - {"step"})
    return section(
        "metrics",
        "Per-step metrics",
        note(
            f"{len(picked)} of {len(metrics)} logged steps (evenly spaced, first and last included); "
            "a dash where the step did not log the key. seconds: the sum of the step's time/* phases."
        ),
        table(("step", *cols, "seconds"), rows),
        note(f"Every key in metrics.jsonl ({len(keys)}): {', '.join(keys)}"),
    )


def curves_section(metrics: list[dict[str, Any]]) -> Raw:
    """The five training panels of :func:`reasonrl.loop.plots.plot_curves`, drawn afresh from metrics.jsonl."""
    if not metrics:
        return section("curves", "Curves", note("metrics.jsonl holds no step yet: nothing to draw."))
    with tempfile.TemporaryDirectory() as tmp:
        img = png(plot_curves(metrics, Path(tmp) / "curves.png"), "training curves")
    return section("curves", "Curves", img)


def header_section(run: RunFolder) -> Raw:
    cfg, summary = run.config, run.summary
    defaults = {"task": (summary or {}).get("task", "arithmetic"), "model": "the shipped base"}  # what null means
    facts = [
        (k, fmt(cfg[k]) if cfg[k] is not None else f"{defaults.get(k, 'null')} (default)") for k in HEADLINE if k in cfg
    ]
    if summary is not None:
        facts += [
            ("steps trained", fmt(summary.get("steps"))),
            ("training seconds", fmt(summary.get("train_seconds"))),
            ("non-finite steps", fmt(summary.get("nonfinite_total"))),
            ("processes", fmt(summary.get("world"))),
        ]
    status = (
        tag("p", "Finished (summary.json).")
        if summary is not None
        else tag("p", f"Not finished: no summary.json; {len(run.metrics)} steps logged so far.", "bad")
    )
    events = [
        (e.get("event", "-"), e.get("message", ""), fmt(e.get("first_step", e.get("last_step")))) for e in run.events
    ]
    parts = [status, table(("", "value"), facts)]
    if events:
        parts += [tag("h3", "processes (events.jsonl)"), table(("event", "message", "step"), events, left=2)]
    return section("run", "Run", *parts)


def config_section(config: dict[str, Any]) -> Raw:
    return section(
        "config", "Configuration", note("config.yaml as resolved at the start of the run."), config_yaml(config)
    )


def before_after_section(summary: dict[str, Any] | None) -> Raw:
    if summary is None:
        return section("before-after", "Before / after", note("The run has not finished: no after evaluation."))
    if not summary.get("before") and not summary.get("after"):
        return section("before-after", "Before / after", note("No before/after evaluation (final_eval_problems=0)."))
    return section(
        "before-after",
        "Before / after",
        note("Held-out evaluation of the starting and the trained model (as `reasonrl eval`)."),
        before_after_table(summary.get("before"), summary.get("after")),
    )


def run_page(run: RunFolder) -> str:
    audit_path = find_audit(run.path)
    audit = load_audit(audit_path) if audit_path is not None else None
    cfg = run.config
    sections = [
        ("run", "Run", header_section(run)),
        ("before-after", "Before/after", before_after_section(run.summary)),
        ("curves", "Curves", curves_section(run.metrics)),
        ("metrics", "Metrics", metrics_section(run.metrics)),
        (
            "training",
            "Training rollouts",
            section("training", "Training rollouts", *training_parts(run.completions, str(run.path))),
        ),
        ("samples", "Completions", section("samples", "Completions", *samples_parts(run.samples, str(run.path)))),
        ("audit", "Audit", audit_section(audit_path, audit)),
        ("config", "Config", config_section(cfg)),
    ]
    task = cfg.get("task") or (run.summary or {}).get("task") or "arithmetic"  # null: the default task
    title = f"reasonrl run: {cfg.get('recipe', '?')} on {task}"
    return page(title, f"{run.path} · reasonrl report", sections)
