"""Readings of a compare by problem stratum: does a method help where it says it does?

The self-teacher methods (issue #12) each target a kind of prompt: STRIDE and NudgeRL the prompts
the starting model never solves (zero-pass groups, no GRPO signal), SSOPD the prompts with mixed
groups (it needs a correct and a wrong rollout), EGRSD shorter completions at equal accuracy. This
script splits the held-out problems by how the starting model does on them, from its sampled
records (``reasonrl eval --model BASE --samples FILE`` with several samples per problem):

- zero-pass: no sampled completion correct; mixed: some; all-pass: every one;

and gives, per recipe and stratum, the final greedy accuracy pooled over seeds and the paired tests
against the first recipe on the same (seed, problem) pairs (McNemar, paired bootstrap CI; as
``reasonrl compare`` pools them), plus each recipe's mean greedy completion length after training.

Inputs are ``compare_items.jsonl`` (written by ``reasonrl compare``) and the base samples file
(or the ``NAME.items.jsonl`` that ``reasonrl eval --json NAME.json`` writes beside it).

    python benchmarks/studies/selfteach_strata.py --compare runs/compare_selfteach \
        --base-samples runs/readings/base_k16.jsonl --out benchmarks/results/compare_selfteach/strata.json
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

from reasonrl.eval.paired import paired_tests

STRATA = ("zero-pass", "mixed", "all-pass")


def base_strata(samples_path: Path) -> dict[str, str]:
    """``{problem key: stratum}`` from the base model's sampled records (``--samples``, mode "sampled")
    or its per-problem rows (``NAME.items.jsonl``: ``n`` samples, ``c`` correct)."""
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])  # key -> [correct, samples]
    for line_no, line in enumerate(samples_path.read_text().splitlines(), 1):
        rec = json.loads(line)
        if "key" not in rec:
            raise SystemExit(f"{samples_path}:{line_no}: a record without 'key'")
        if "c" in rec and "n" in rec:
            counts[rec["key"]] = [rec["c"], rec["n"]]
        elif rec.get("mode") == "sampled":
            counts[rec["key"]][0] += bool(rec["correct"])
            counts[rec["key"]][1] += 1
    if not counts:
        raise SystemExit(f"{samples_path}: no sampled records; run `reasonrl eval` with several samples per problem")
    return {k: "zero-pass" if c == 0 else "all-pass" if c == n else "mixed" for k, (c, n) in counts.items()}


def load_runs(compare_dir: Path) -> list[dict]:
    path = compare_dir / "compare_items.jsonl"
    if not path.is_file():
        raise SystemExit(
            f"no {path}; re-collect the compare with `reasonrl compare ... --resume` (this version writes it)"
        )
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def pooled(runs: list[dict], recipe: str, keys: set[str], seeds: list[int]) -> list[bool]:
    """Correctness of ``recipe`` on ``keys`` for each seed in ``seeds``, in (seed, key) order."""
    by_seed = {r["seed"]: r["items"] for r in runs if r["recipe"] == recipe and r["ok"]}
    return [by_seed[s][k] for s in seeds for k in sorted(keys)]


def readings(runs: list[dict], strata: dict[str, str]) -> dict:
    recipes = list(dict.fromkeys(r["recipe"] for r in runs))
    first = recipes[0]
    ok_seeds = {rec: {r["seed"] for r in runs if r["recipe"] == rec and r["ok"]} for rec in recipes}
    out: dict = {
        "first": first,
        "strata_sizes": {s: sum(v == s for v in strata.values()) for s in STRATA},
        "recipes": {},
    }
    for rec in recipes:
        seeds = sorted(ok_seeds[rec] & ok_seeds[first])
        lengths = [r["after"].get("mean_length") for r in runs if r["recipe"] == rec and r["ok"]]
        row: dict = {"seeds": seeds, "mean_length": sum(lengths) / len(lengths) if None not in lengths else None}
        for s in STRATA:
            keys = {k for k, v in strata.items() if v == s}
            x = pooled(runs, rec, keys, seeds)
            row[s] = {"acc": sum(x) / len(x) if x else None}
            if rec != first and x:
                row[s].update(paired_tests(x, pooled(runs, first, keys, seeds)))
        out["recipes"][rec] = row
    return out


def table(res: dict) -> str:
    sizes = res["strata_sizes"]
    head = "recipe       " + "".join(f"{s} (n={sizes[s]})".ljust(30) for s in STRATA) + "mean length"
    lines = [head, "-" * len(head)]
    for rec, row in res["recipes"].items():
        cells = []
        for s in STRATA:
            c = row[s]
            d = f" {c['diff']:+.3f} p={c['mcnemar_p']:.2g}" if "diff" in c else ""
            cells.append((f"{c['acc']:.3f}{d}" if c["acc"] is not None else "-").ljust(30))
        length = f"{row['mean_length']:.1f}" if row["mean_length"] is not None else "-"
        lines.append(rec.ljust(13) + "".join(cells) + length)
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--compare", type=Path, required=True, help="a `reasonrl compare --out` folder")
    ap.add_argument("--base-samples", type=Path, required=True, help="the starting model's `reasonrl eval --samples`")
    ap.add_argument("--out", type=Path, help="write the readings as JSON here")
    args = ap.parse_args()
    res = readings(load_runs(args.compare), base_strata(args.base_samples))
    print(table(res))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
