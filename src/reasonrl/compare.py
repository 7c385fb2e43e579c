"""``reasonrl compare``: several recipes x several seeds, one table, one plot, one JSON.

Each (recipe, seed) trains in its own process (``python -m reasonrl.cli train``), so a crash is
reported and the others go on. All runs share the task, steps and held-out set; the table gives
final held-out greedy pass@1 (mean ± std over seeds, ddof=1), the best seed, the area under the
held-out accuracy curve (mean accuracy over training, from step 0), wall-clock training time,
tokens generated, and Welch's t-test p-value of each recipe's final pass@1 against the first's.

Beside Welch over seed means, each recipe is compared with the first on the same held-out items
(``after_items.jsonl`` of every run folder: the final greedy correctness per problem key):
exact McNemar (discordant counts b = items this recipe got right and the first got wrong, c = the
reverse), the one-sided sign test, and a paired bootstrap 95% CI of the accuracy difference
(10,000 resamples, seed 0; fractions, like pass@1). Pooling over seeds: item i of seed s of this
recipe is paired with item i of seed s of the first, only for seeds where both runs succeeded, and
the (seed, item) pairs of all those seeds form one sample, treated as independent pairs (the
bootstrap resamples pairs, not problems; a problem thus counts once per seed).

With ``resume`` (``reasonrl compare --resume``), a run folder that already holds a finished run
(``summary.json``) is collected instead of retrained, after checking that its ``config.yaml`` is the
configuration this compare would give it (a difference is a UserError naming the keys); a folder
with a config but no summary (a killed run) continues from its latest checkpoint (``train --resume``).
So a compare can be extended to more seeds, or continued after a crash, without redoing what is done.

A recipe entry may carry overrides after colons, ``vspo:steering=null`` or
``dapo:loss.clip_high=0.35:group_size=16``: a variant compared as its own row (an ablation).
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import yaml

from .loop.checkpoint import atomic_write_text
from .errors import UserError
from .eval.metrics import mean_std, pass_at_k, welch_t_test
from .eval.paired import load_item_results, pair_by_key, paired_bootstrap_values_ci, paired_tests
from .loop.tracking import read_metrics
from .compare_plot import plot_compare  # reasonrl.report and benchmarks import it from here


@dataclass
class RunResult:
    recipe: str
    seed: int
    run_dir: Path
    ok: bool
    error: str = ""
    final: float = float("nan")
    auc: float = float("nan")
    seconds: float = float("nan")
    tokens: float = float("nan")
    curve: list[tuple[int, float, float]] = field(default_factory=list)  # (step, seconds, held-out pass@1)
    items: dict[str, bool] = field(default_factory=dict)  # problem key -> final greedy correct (after_items.jsonl)
    after: dict[str, Any] = field(default_factory=dict)  # the run's final evaluation summary (summary.json "after")
    samples: dict[str, dict[str, int]] = field(
        default_factory=dict
    )  # key -> n, c, distinct correct (after.items.jsonl)


def parse_variant(entry: str) -> tuple[str, list[str]]:
    """``name[:key=value[:key=value...]]`` -> (recipe name, its own overrides)."""
    name, *overrides = entry.split(":")
    bad = [o for o in overrides if "=" not in o]
    if not name or bad:
        raise UserError(f"recipe entry {entry!r}: expected name[:key=value...], bad part(s) {bad or [name]}")
    return name, overrides


def run_dir_name(entry: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", entry.replace(":", "__"))


def run_one(
    recipe: str,
    seed: int,
    out: Path,
    steps: int,
    task: str | None,
    extra: list[str],
    expected: Callable[[str, int, Path], dict] | None = None,
) -> RunResult:
    """Train one (recipe, seed) in its own process; with ``expected`` (resume), reuse or continue its folder."""
    run_dir = out / f"{run_dir_name(recipe)}-seed{seed}"
    name, own = parse_variant(recipe)
    cont = []
    if expected is not None and (run_dir / "config.yaml").exists():
        check_same_config(run_dir, expected(recipe, seed, run_dir))
        if (run_dir / "summary.json").exists():
            return collect(recipe, seed, run_dir)
        cont = ["--resume"]
    cmd = [
        sys.executable,
        "-m",
        "reasonrl.cli",
        "train",
        "--recipe",
        name,
        "--steps",
        str(steps),
        "--out",
        str(run_dir),
        f"seed={seed}",
        *(["--task", task] if task else []),
        *extra,
        *own,
        *cont,
    ]
    env = {**os.environ, "_TYPER_STANDARD_TRACEBACK": "1"}  # a plain traceback: its last line names the error
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        lines = [ln for ln in (proc.stderr or proc.stdout).splitlines() if ln.strip()]
        return RunResult(
            recipe, seed, run_dir, ok=False, error=lines[-1].strip() if lines else f"exit {proc.returncode}"
        )
    return collect(recipe, seed, run_dir)


def differing(have: Any, want: Any, prefix: str = "") -> list[tuple[str, Any, Any]]:
    """``(dotted key, have, want)`` for every leaf whose value differs between two config mappings."""
    if isinstance(have, dict) and isinstance(want, dict):
        return [
            d
            for k in sorted(set(have) | set(want), key=str)
            for d in differing(have.get(k), want.get(k), f"{prefix}{k}.")
        ]
    return [] if have == want else [(prefix.rstrip("."), have, want)]


def config_diff(have: Any, want: Any) -> list[str]:
    """:func:`differing` as sentences for an error message (``a.b: 1 in the folder, 2 now``)."""
    return [f"{key}: {h!r} in the folder, {w!r} now" for key, h, w in differing(have, want)]


def check_same_config(run_dir: Path, want: dict) -> None:
    """A folder reused by ``--resume`` must hold the run this compare asks for."""
    have = yaml.safe_load((run_dir / "config.yaml").read_text())
    want = yaml.safe_load(yaml.safe_dump(want, sort_keys=False))  # tuples as lists, as config.yaml holds them
    diff = config_diff(have, want)
    if diff:
        raise UserError(
            f"--resume: {run_dir} holds a run with another configuration ({'; '.join(diff[:5])}"
            f"{'; ...' if len(diff) > 5 else ''}); give another --out, or drop --resume"
        )


def collect(recipe: str, seed: int, run_dir: Path) -> RunResult:
    """Read a finished run folder: its summary and its held-out curve (step 0 = the 'before' eval)."""
    summary = json.loads((run_dir / "summary.json").read_text())
    rows = read_metrics(run_dir / "metrics.jsonl")
    before, after = summary.get("before") or {}, summary.get("after") or {}
    curve, elapsed = ([(0, 0.0, before["pass@1"])] if "pass@1" in before else []), 0.0
    for r in rows:
        elapsed += sum(v for k, v in r.items() if k.startswith("time/"))
        if "eval/pass@1" in r:
            curve.append((r["step"], elapsed, r["eval/pass@1"]))
    final = after.get("pass@1", curve[-1][2] if curve else float("nan"))
    items_path = run_dir / "after_items.jsonl"  # absent when final_eval_problems=0: no paired tests then
    items = load_item_results(items_path) if items_path.exists() else {}
    return RunResult(
        recipe,
        seed,
        run_dir,
        ok=True,
        final=final,
        auc=area_under(curve),
        seconds=summary["train_seconds"],
        tokens=sum(r.get("tokens/generated", 0.0) for r in rows),
        curve=curve,
        items=items,
        after=after,
        samples=load_samples(run_dir / "after.items.jsonl"),
    )


def load_samples(path: Path) -> dict[str, dict[str, int]]:
    """The final eval's sampled counts per problem key (``n``, ``c``, ``correct_chains``, ``correct_answers``);
    empty when the run sampled none (final_eval_k=0) or wrote no per-problem rows."""
    if not path.exists():
        return {}
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    keep = ("n", "c", "correct_chains", "correct_answers")
    return {r["key"]: {k: int(r[k]) for k in keep if k in r} for r in rows if "n" in r}


def seed_passk(samples: dict[str, dict[str, int]], ks: list[int]) -> dict[str, Any]:
    """One run's pass@k for each k (the unbiased estimator from its n samples, meaned over problems) and
    its distinct correct chains / answers per problem."""
    rows = list(samples.values())
    return {
        "pass": [float(np.mean([pass_at_k(r["n"], r["c"], k) for r in rows])) for k in ks],
        "chains": float(np.mean([r.get("correct_chains", 0) for r in rows])),
        "answers": float(np.mean([r.get("correct_answers", 0) for r in rows])),
    }


def passk_report(results: list[RunResult], recipes: list[str]) -> dict[str, Any] | None:
    """pass@k for k = 1 .. n (n the runs' samples per problem) per recipe (mean over seeds), distinct correct
    chains and answers per problem, and against the first recipe at k = 1 and k = n: Welch over seed means and a
    paired bootstrap CI over (seed, problem) pairs of per-problem pass@k, as :func:`paired_vs_first` pairs items."""
    runs = {(r.recipe, r.seed): r for r in results if r.ok and r.samples}
    if not runs:
        return None
    n = min(row["n"] for r in runs.values() for row in r.samples.values())
    ks = list(range(1, n + 1))
    out: dict[str, Any] = {"n": n, "ks": ks, "recipes": {}}
    for name in recipes:
        per_seed = [seed_passk(r.samples, ks) for (rn, _), r in sorted(runs.items()) if rn == name]
        if not per_seed:
            continue
        row = {
            "seeds": len(per_seed),
            "pass_at_k": [float(np.mean([p["pass"][i] for p in per_seed])) for i in range(n)],
            "correct_chains": float(np.mean([p["chains"] for p in per_seed])),
            "correct_answers": float(np.mean([p["answers"] for p in per_seed])),
        }
        if name != recipes[0]:
            row["vs_first"] = {f"pass@{k}": _paired_passk(runs, name, recipes[0], n, k) for k in sorted({1, n})}
        out["recipes"][name] = row
    return out


def _paired_passk(runs: dict, name: str, first: str, n: int, k: int) -> dict[str, Any] | None:
    seeds = sorted(s for (rn, s) in runs if rn == name and (first, s) in runs)
    x, y = [], []
    for s in seeds:
        mine, other = runs[(name, s)].samples, runs[(first, s)].samples
        for key in sorted(set(mine) & set(other)):
            x.append(pass_at_k(mine[key]["n"], mine[key]["c"], k))
            y.append(pass_at_k(other[key]["n"], other[key]["c"], k))
    if not x:
        return None
    ci = paired_bootstrap_values_ci(x, y)
    means = {r: [seed_passk(runs[(r, s)].samples, [k])["pass"][0] for s in seeds] for r in (name, first)}
    welch = welch_t_test(means[name], means[first])[1] if len(seeds) >= 2 else None
    return {"diff": ci.diff, "ci_low": ci.low, "ci_high": ci.high, "pairs": len(x), "seeds": seeds, "welch_p": welch}


def paired_vs_first(
    results: list[RunResult], recipe: str, first: str, B: int = 10_000, seed: int = 0
) -> tuple[dict[str, Any] | None, str]:
    """Paired tests of ``recipe`` (x) against ``first`` (y) on items pooled over the seeds both ran
    successfully (see the module docstring); ``(None, why)`` when there is nothing to pair."""
    runs = {(r.recipe, r.seed): r for r in results if r.ok and r.items}
    seeds = sorted(s for (name, s) in runs if name == recipe and (first, s) in runs)
    if not seeds:
        return None, "no seed where both runs succeeded with per-item results (after_items.jsonl)"
    x: list[bool] = []
    y: list[bool] = []
    for s in seeds:
        try:
            xs, ys = pair_by_key(runs[(recipe, s)].items, runs[(first, s)].items)
        except UserError as err:
            return None, f"seed {s}: {err}"
        x.extend(xs)
        y.extend(ys)
    return {**paired_tests(x, y, B=B, seed=seed), "seeds": seeds}, ""


def area_under(curve: list[tuple[int, float, float]]) -> float:
    """Trapezoid area under (step, accuracy) divided by the step span: the mean accuracy over training."""
    if len(curve) < 2:
        return curve[0][2] if curve else float("nan")
    area = sum((s1 - s0) * (a0 + a1) / 2 for (s0, _, a0), (s1, _, a1) in zip(curve, curve[1:]))
    return area / (curve[-1][0] - curve[0][0])


def table_rows(results: list[RunResult], recipes: list[str]) -> list[dict[str, Any]]:
    """One summary row per recipe; p-values against the first recipe (None when undefined)."""
    finals = {r: [x.final for x in results if x.recipe == r and x.ok] for r in recipes}
    rows = []
    for r in recipes:
        ok = [x for x in results if x.recipe == r and x.ok]
        row: dict[str, Any] = {
            "recipe": r,
            "runs_ok": len(ok),
            "runs_failed": sum(1 for x in results if x.recipe == r and not x.ok),
        }
        if ok:
            mean, std = mean_std(finals[r])
            row.update(
                final_mean=mean,
                final_std=std,
                best=max(finals[r]),
                auc=mean_std([x.auc for x in ok])[0],
                seconds=mean_std([x.seconds for x in ok])[0],
                tokens=mean_std([x.tokens for x in ok])[0],
                per_seed=finals[r],
            )
        base = finals[recipes[0]]
        row["p_vs_first"] = (
            welch_t_test(finals[r], base)[1] if r != recipes[0] and len(finals[r]) >= 2 and len(base) >= 2 else None
        )
        paired, why = paired_vs_first(results, r, recipes[0]) if r != recipes[0] else (None, "")
        row.update(paired_vs_first=paired, **({"paired_skipped": why} if why else {}))
        rows.append(row)
    return rows


def _json_safe(value: Any) -> Any:
    """NaN/inf (a failed run's final, the p-value of two zero-variance samples) as null: valid JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def compare(
    recipes: list[str],
    seeds: int,
    steps: int,
    out: Path,
    task: str | None = None,
    extra: list[str] | None = None,
    on_run: Callable[[RunResult], None] = lambda r: None,
    expected: Callable[[str, int, Path], dict] | None = None,
) -> dict[str, Any]:
    """Every (recipe, seed); ``expected(recipe, seed, run_dir)`` (the config.yaml a run would write)
    turns on resume: finished folders are checked against it and collected, killed ones continued."""
    out.mkdir(parents=True, exist_ok=True)
    results = []
    for recipe in recipes:
        for seed in range(seeds):
            res = run_one(recipe, seed, out, steps, task, list(extra or []), expected)
            on_run(res)
            results.append(res)
    rows = table_rows(results, recipes)
    report = {
        "recipes": recipes,
        "seeds": seeds,
        "steps": steps,
        "task": task or "arithmetic",
        "table": rows,
        "passk": passk_report(results, recipes),
        "runs": [
            {
                **{k: v for k, v in vars(r).items() if k not in ("run_dir", "items", "after", "samples")},
                "run_dir": str(r.run_dir),
            }
            for r in results
        ],
    }
    (out / "compare.json").write_text(json.dumps(_json_safe(report), indent=2, default=str, allow_nan=False))
    atomic_write_text(out / "compare_items.jsonl", items_lines(results))
    plot_compare(results, recipes, out / "compare.png")
    return report


def items_lines(results: list[RunResult]) -> str:
    """``compare_items.jsonl``: per run, its final evaluation summary and per-item greedy correctness.
    Readings by problem stratum (e.g. ``benchmarks/studies/selfteach_strata.py``) then need only this file,
    not the run folders (which hold checkpoints and are not kept in the repository)."""
    return "".join(
        json.dumps(
            _json_safe({"recipe": r.recipe, "seed": r.seed, "ok": r.ok, "after": r.after, "items": r.items}),
            allow_nan=False,
        )
        + "\n"
        for r in results
    )
