"""What the unlearnability diagnostic reads from run folders (spec distill-and-data.md section 12).

Each run folder (``reasonrl train --out``) gives: ``before.items.jsonl`` and ``after.items.jsonl``
(one row per held-out problem with ``c`` correct of ``n`` samples: the initial and final pass@1),
``prompt_rewards.jsonl`` (per step, per training prompt key, its group's mean reward) and
``config.yaml`` (the task, to rebuild the problems). A run without one of them, or whose problems
differ from the first run's, is a UserError naming the run and the file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import yaml

from ..errors import MissingPathError, UserError
from ..tasks import Item, get_task, take_items

NEEDS = ("config.yaml", "before.items.jsonl", "after.items.jsonl", "prompt_rewards.jsonl")
HOW = "train with final_eval_k > 0 (the paper: final_eval_k=32 final_eval_temperature=0.7)"


@dataclass
class RunResults:
    name: str  # the run folder as given
    config: dict[str, Any]
    before: dict[str, tuple[int, int]]  # key -> (correct samples c, samples n) of the initial model
    after: dict[str, tuple[int, int]]  # key -> (c, n) after training
    max_reward: dict[str, float]  # training prompt key -> max over steps of its group's mean reward


def _jsonl(run: Path, name: str) -> list[dict[str, Any]]:
    path = run / name
    rows = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as err:
            raise UserError(f"run {run}: {name} line {lineno} is not valid JSON ({err.msg})") from err
    return rows


def _counts(run: Path, name: str) -> dict[str, tuple[int, int]]:
    """key -> (c, n) of an items file; rows without sampled results are refused."""
    out = {}
    for lineno, row in enumerate(_jsonl(run, name), 1):
        if "key" not in row or not row.get("n"):
            raise UserError(f"run {run}: {name} line {lineno} has no sampled results (key, c, n); {HOW}")
        out[str(row["key"])] = (int(row["c"]), int(row["n"]))
    if not out:
        raise UserError(f"run {run}: {name} is empty; {HOW}")
    return out


def max_rewards(rows: Sequence[dict[str, Any]]) -> dict[str, float]:
    """key -> max over its lines (steps) of ``reward``: the source's max mean_reward per prompt."""
    out: dict[str, float] = {}
    for row in rows:
        k, r = str(row["key"]), float(row["reward"])
        out[k] = max(out.get(k, r), r)
    return out


def load_run(run_dir: str | Path) -> RunResults:
    run = Path(run_dir)
    if not run.is_dir():
        raise MissingPathError(f"run {run}: no such run folder")
    for name in NEEDS:
        if not (run / name).is_file():
            raise MissingPathError(
                f"run {run}: {name} is missing (written by reasonrl train since the unlearnability diagnostic; {HOW})"
            )
    config = yaml.safe_load((run / "config.yaml").read_text(encoding="utf-8")) or {}
    rewards = _jsonl(run, "prompt_rewards.jsonl")
    bad = next((i for i, r in enumerate(rewards, 1) if "key" not in r or "reward" not in r), None)
    if bad is not None:
        raise UserError(f"run {run}: prompt_rewards.jsonl line {bad} lacks 'key' or 'reward'")
    return RunResults(
        str(run), config, _counts(run, "before.items.jsonl"), _counts(run, "after.items.jsonl"), max_rewards(rewards)
    )


def check_same_problems(runs: Sequence[RunResults]) -> list[str]:
    """The problem keys every run evaluated (the first run's, sorted); a run that lacks one, or
    has one more, is refused by name."""
    if not runs:
        raise UserError("--runs: give at least one run folder")
    keys = set(runs[0].before)
    for run in runs:
        for name, got in (("before.items.jsonl", run.before), ("after.items.jsonl", run.after)):
            missing, extra = sorted(keys - set(got)), sorted(set(got) - keys)
            if missing or extra:
                which = f"lacks problem {missing[0]!r}" if missing else f"has problem {extra[0]!r}"
                raise UserError(
                    f"run {run.name}: {name} {which}, unlike {runs[0].name}/before.items.jsonl "
                    f"({len(missing)} missing, {len(extra)} extra): the runs must share the held-out "
                    "problems (same task, eval_seed, final_eval_problems)"
                )
    return sorted(keys)


def pass_rates(runs: Sequence[RunResults]) -> tuple[dict[str, float], list[dict[str, float]], list[dict[str, float]]]:
    """initial pass@1 (the runs' before-evaluations pooled: c / n summed over runs, all of the same
    starting model), per-run final pass@1, per-run max training reward: :func:`classify`'s inputs."""
    keys = check_same_problems(runs)
    initial = {k: sum(r.before[k][0] for r in runs) / sum(r.before[k][1] for r in runs) for k in keys}
    finals = [{k: r.after[k][0] / r.after[k][1] for k in keys} for r in runs]
    return initial, finals, [r.max_reward for r in runs]


def problem_items(run: RunResults, keys: Sequence[str]) -> list[Item]:
    """The held-out items of ``keys``, rebuilt from the run's task as its evaluation drew them."""
    c = run.config
    task = get_task(c.get("task"), **(c.get("task_options") or {}))
    items = {
        it.key: it
        for it in take_items(task, "test", int(c.get("final_eval_problems", 500)), seed=int(c.get("eval_seed", 0)))
    }
    missing = [k for k in keys if k not in items]
    if missing:
        raise UserError(
            f"run {run.name}: config.yaml's task does not give problem {missing[0]!r} of its "
            "before.items.jsonl (task, task_options, eval_seed or final_eval_problems changed?)"
        )
    return [items[k] for k in keys]
