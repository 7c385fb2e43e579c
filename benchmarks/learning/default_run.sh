#!/usr/bin/env bash
# The README's default-run table: `reasonrl train` with no arguments, its summary, config and metrics
# stored under benchmarks/results/default_run/. Run on an otherwise idle machine for the wall-clock figure.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=$(mktemp -d)/run
start=$(date +%s)
reasonrl train --out "$out"
end=$(date +%s)
dest=benchmarks/results/default_run
mkdir -p "$dest"
cp "$out"/summary.json "$out"/config.yaml "$out"/metrics.jsonl "$out"/curves.png "$dest"/
python3 - "$dest" "$((end - start))" <<'PY'
import json, os, sys
dest, wall = sys.argv[1], int(sys.argv[2])
s = json.load(open(f"{dest}/summary.json"))
s["wall_seconds"], s["cpu_count"] = wall, os.cpu_count()
json.dump(s, open(f"{dest}/summary.json", "w"), indent=2)
print(f"| held-out, {s['before']['n_problems']} problems | before | after | change |\n|---|---|---|---|")
for key in ("pass@1", "pass@8", "avg@8", "maj@8"):
    b, a = s["before"][key], s["after"][key]
    print(f"| {key} | {b:.3f} | {a:.3f} | {a - b:+.3f} |")
print(f"wall clock {wall} s, training {s['train_seconds']:.0f} s")
PY
