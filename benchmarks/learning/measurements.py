"""The one result format the recipe health table reads (benchmarks/README.md, "One result format"), and the
conversion into it of every result file the table cites.

Each benchmark writes its own JSON (``reasonrl compare``'s table, distmatch.py's rows, grlo_transfer.py's
per-seed rows, ...); the health table needs the same dozen numbers from each. ``X.json`` is converted once
into ``X.measurement.json`` beside it: the entries measured, each with FIELDS (None where the file has nothing:
nothing is filled in), the steps, and the entry its own tests are against. health_table.py reads only those
files, with :func:`read_measurement`.

    python benchmarks/learning/measurements.py           # (re)writes the measurement of every health_table.SOURCES
    python benchmarks/learning/measurements.py --check   # exits 1 naming each one missing or out of date

A source declares how its file is read: ``kind`` (one of CONVERTERS), and where the file lacks them,
``steps`` (its documented command's), ``table`` (the key of its rows), ``diagnostics`` (task_diagnostics.py's
JSON: per-seed evaluation rates, averaged) and ``seconds`` (a separate timing: step_seconds.py or
ppo_vs_grpo.py --speed).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FORMAT = "reasonrl-measurement/1"
# the entry's field in the file -> its name in health_table's rows of numbers
FIELDS = {
    "pass1_mean": "mean",
    "pass1_std": "std",
    "seeds": "seeds",
    "per_seed": "per_seed",
    "welch_p_vs_first": "p",
    "paired_vs_first": "paired",
    "eval_truncation": "trunc",
    "eval_format": "fmt",
    "eval_mean_length": "length",
    "s_per_step": "s_step",
    "s_per_step_vs_first": "s_x",
}
PAIRED = ("diff", "low", "high", "mcnemar_p")


def measurement_path(source: str) -> str:
    """Where the measurement of the result file ``source`` is: beside it, ``X.json`` -> ``X.measurement.json``."""
    if not source.endswith(".json"):
        raise ValueError(f"a measured source must be a .json file: {source}")
    return source[: -len(".json")] + ".measurement.json"


def read_measurement(path: Path, source: str) -> tuple[dict, str | None, int | None]:
    """The entries (each FIELDS, by health_table's names), the reference entry and the steps of a measurement file;
    a file of another format or source, or an entry with a missing or unknown field, is an error."""
    m = json.loads(path.read_text())
    if m.get("format") != FORMAT or m.get("source") != source:
        raise ValueError(
            f"{path}: not the {FORMAT} measurement of {source} (format {m.get('format')!r}, "
            f"source {m.get('source')!r}); run python benchmarks/learning/measurements.py"
        )
    entries = {}
    for name, e in m["entries"].items():
        if set(e) != set(FIELDS):
            raise ValueError(f"{path}: entry {name!r} has fields {sorted(e)}, the format's are {sorted(FIELDS)}")
        if e["paired_vs_first"] is not None and set(e["paired_vs_first"]) != set(PAIRED):
            raise ValueError(f"{path}: entry {name!r}'s paired_vs_first needs exactly {PAIRED}")
        entries[name] = {short: e[long] for long, short in FIELDS.items()}
    return entries, m["first"], m["steps"]


def _paired(p: dict | None) -> dict | None:
    """A paired_vs_first block as (diff, low, high, McNemar p), or None."""
    if not p or p.get("diff") is None:
        return None
    return {"diff": p["diff"], "low": p.get("ci_low"), "high": p.get("ci_high"), "mcnemar_p": p.get("mcnemar_p")}


def _steps(d: dict, src: dict) -> int | None:
    """Steps from the JSON (top level or settings), else the source's declaration (its documented command)."""
    v = d.get("steps", (d.get("settings") or {}).get("steps", src.get("steps")))
    return int(v) if v is not None else None


def from_compare(d: dict, src: dict) -> tuple[dict, str | None, int | None]:
    """`reasonrl compare`, compare_merge.py and recipe_health.py JSON: a table of rows, one per entry."""
    table = d[src.get("table", "table")]
    first = d.get("first") or (d.get("recipes") or d.get("entries") or [table[0]["recipe"]])[0]
    out = {}
    for r in table:
        out[r["recipe"]] = {
            "mean": r.get("final_mean"),
            "std": r.get("final_std"),
            "seeds": r.get("runs_ok"),
            "per_seed": r.get("per_seed"),
            "p": r.get("p_vs_first"),
            "paired": _paired(r.get("paired_vs_first")),
            "trunc": r.get("eval_truncation"),
            "fmt": r.get("eval_format"),
            "length": r.get("eval_mean_length"),
            "s_step": r.get("median_s_per_step", r.get("s_per_step")),
            "s_x": r.get("s_per_step_vs_first"),
        }
    return out, first, _steps(d, src)


def from_distmatch(d: dict, src: dict) -> tuple[dict, str | None, int | None]:
    """benchmarks/learning/distmatch.py: greedy pass@1 and its paired test; the Welch p it holds is on sampled
    pass@1."""
    out = {
        r["recipe"]: {
            "mean": r.get("greedy_pass@1"),
            "std": r.get("greedy_pass@1_std"),
            "seeds": r.get("runs_ok"),
            "per_seed": r.get("per_seed"),
            "paired": _paired(r.get("greedy_paired_vs_first")),
            "s_step": r.get("s_per_step"),
        }
        for r in d["rows"]
    }
    return out, d["rows"][0]["recipe"], _steps(d, src)


def from_grlo(d: dict, src: dict) -> tuple[dict, str | None, int | None]:
    """benchmarks/learning/grlo_transfer.py: per-seed arithmetic accuracy of grlo and grpo, summary [mean, std]."""
    out = {}
    for name in ("grlo", "grpo"):
        seeds = sorted(k for k in d["rows"] if k.startswith(name + "-seed"))
        mean, std = d["summary"][name + "/arithmetic"]
        out[name] = {
            "mean": mean,
            "std": std,
            "seeds": len(seeds),
            "per_seed": [d["rows"][k]["arithmetic"] for k in seeds],
        }
    return out, None, _steps(d, src)


def from_codeact(d: dict, src: dict) -> tuple[dict, str | None, int | None]:
    """benchmarks/learning/codeact_fhir.py: held-out correctness after RL per seed; grpo only as seconds per step. Files
    written before its --recipe option hold codeact's under codeact_s_per_step."""
    s = d["summary"]
    per_seed = [d["seeds"][k]["after"] for k in sorted(d["seeds"], key=int)]
    s_step = s.get("agent_s_per_step", s.get("codeact_s_per_step"))
    out = {
        s.get("recipe", "codeact"): {
            "mean": s.get("after_mean"),
            "std": s.get("after_std"),
            "seeds": len(per_seed),
            "per_seed": per_seed,
            "s_step": s_step,
        },
        "grpo": {"s_step": s.get("grpo_arithmetic_s_per_step")},
    }
    return out, None, _steps(d, src)


def from_prompt_policy(d: dict, src: dict) -> tuple[dict, str | None, int | None]:
    """prompt_policy_bench.py --merge: the frozen worker's held-out accuracy with the prompter's final one-shot
    prompt (the recipe's row) and with no prompt at all (its reference: ``none``), per seed."""
    out = {
        name: {
            "mean": d[key]["mean"],
            "std": d[key]["std"],
            "seeds": len(d[key]["per_seed"]),
            "per_seed": d[key]["per_seed"],
        }
        for name, key in (("prompt_policy", "one_shot_final"), ("none", "none"))
    }
    return out, None, d.get("steps")


def from_populora(d: dict, src: dict) -> tuple[dict, str | None, int | None]:
    """populora_compare.py: the population's mean student (the recipe's row; best and worst stay in its doc) against
    the compute-matched single AZR agent, per seed; s/step from each side's wall-clock seconds over its steps."""
    m, steps = d["summary"], int(d["args"]["steps"])
    out = {}
    for name, key, side in (("populora", "pop_mean", "populora"), ("azr", "azr", "azr")):
        secs = [r[side]["seconds"] / steps for r in d["rows"]]
        out[name] = {
            "mean": m[key]["mean"],
            "std": m[key]["std"],
            "seeds": len(m[key]["per_seed"]),
            "per_seed": m[key]["per_seed"],
            "s_step": statistics.fmean(secs),
        }
    p = m.get("paired_pop_mean_vs_azr")
    out["populora"].update(
        p=m.get("welch_p_pop_mean_vs_azr"),
        s_x=m["wall_ratio"]["mean"],
        paired=p and {"diff": p["diff"], "low": p["ci_low"], "high": p["ci_high"], "mcnemar_p": None},
    )
    return out, "azr", steps


def from_real_model(d: dict, src: dict) -> tuple[dict, str | None, int | None]:
    """benchmarks/learning/real_model_recipes.py: one short health run per recipe on SmolLM2-135M-Instruct (one
    seed): held-out greedy pass@1 after it, its truncation, format and length, median s/step; a recipe that did
    not run has no row values (seeds 0)."""
    out = {}
    for r in d["rows"]:
        ran = bool(r.get("ran"))
        out[r["recipe"]] = {
            "mean": r.get("after_pass@1"),
            "seeds": int(ran),
            "per_seed": [r["after_pass@1"]] if ran else None,
            "trunc": r.get("after_truncation_rate"),
            "fmt": r.get("after_format_rate"),
            "length": r.get("after_mean_length"),
            "s_step": r.get("s_per_step"),
        }
    return out, None, d["steps"]  # (its "settings" is the list of run keys, not _steps' dict)


CONVERTERS = {
    "compare": from_compare,
    "real_model": from_real_model,
    "distmatch": from_distmatch,
    "grlo": from_grlo,
    "codeact": from_codeact,
    "prompt_policy": from_prompt_policy,
    "populora": from_populora,
}


def add_diagnostics(entries: dict, path: Path) -> None:
    """Mean over an entry's seeds of its final evaluation's truncation, format and length (task_diagnostics.py,
    keyed by the runs' folder names)."""
    from reasonrl.compare import run_dir_name

    diag = json.loads(path.read_text())
    for entry, row in entries.items():
        runs = [v["after"] for k, v in diag.items() if k.rsplit("-seed", 1)[0] == run_dir_name(entry) and "after" in v]
        for field, key in (("trunc", "truncation_rate"), ("fmt", "format_rate"), ("length", "mean_length")):
            vals = [r[key] for r in runs if r.get(key) is not None]
            if vals and row.get(field) is None:
                row[field] = statistics.fmean(vals)


def add_seconds(entries: dict, path: Path) -> None:
    """Seconds per step from a separate timing: step_seconds.py's list or ppo_vs_grpo.py --speed's medians."""
    d = json.loads(path.read_text())
    secs = {r["recipe"]: r["median_s_per_step"] for r in d} if isinstance(d, list) else d["median"]
    for entry, row in entries.items():
        if entry in secs:
            row["s_step"], row["s_x"] = secs[entry], None


def convert(src: dict, root: Path = ROOT) -> dict | None:
    """The measurement of one source (a health_table.SOURCES entry), or None if its result file is missing."""
    path = root / src["path"]
    if not path.exists():
        return None
    if src["kind"] not in CONVERTERS:
        raise ValueError(f"{src['path']}: unknown kind {src['kind']!r} (one of {', '.join(CONVERTERS)})")
    entries, first, steps = CONVERTERS[src["kind"]](json.loads(path.read_text()), src)
    for extra, add in (("diagnostics", add_diagnostics), ("seconds", add_seconds)):
        if src.get(extra) and (root / src[extra]).exists():
            add(entries, root / src[extra])
    return {
        "format": FORMAT,
        "source": src["path"],
        "kind": src["kind"],
        "steps": steps,
        "first": first,
        "entries": {name: {long: row.get(short) for long, short in FIELDS.items()} for name, row in entries.items()},
    }


def write_all(sources: list[dict], root: Path = ROOT, check: bool = False) -> list[str]:
    """Write (or, with ``check``, compare) the measurement of every source whose result file exists; returns the
    measurement files that were missing or differed."""
    stale = []
    for src in sources:
        m = convert(src, root)
        if m is None:
            continue
        out = root / measurement_path(src["path"])
        text = json.dumps(m, indent=2) + "\n"
        if not out.exists() or out.read_text() != text:
            stale.append(str(out.relative_to(root)))
            if not check:
                out.write_text(text)
    return stale


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if a measurement is missing or stale")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT / "src"))
    from health_table import SOURCES

    stale = write_all(SOURCES, check=args.check)
    verb = "out of date" if args.check else "written"
    print(f"{len(stale)} measurement(s) {verb}" + "".join(f"\n  {p}" for p in stale))
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
