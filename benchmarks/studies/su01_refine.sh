#!/usr/bin/env bash
# SU-01's test-time loop on the shipped base: `reasonrl eval --refine N` with each verifier on the same
# held-out problems (greedy), then one table of gold-scored pass@1 per round. The oracle verifier reads the
# gold answers: its row is an upper bound, not a test-time result.
#   bash benchmarks/studies/su01_refine.sh [PROBLEMS] [ROUNDS]
set -euo pipefail
P=${1:-100}; N=${2:-2}; OUT=benchmarks/results/su01
mkdir -p "$OUT"
for v in self format oracle; do
  PYTHONPATH=src python -m reasonrl.cli eval --problems "$P" --samples-per-problem 0 --refine "$N" \
    --refine-verifier "$v" --json "$OUT/refine_$v.json" > /dev/null
done
PYTHONPATH=src python - "$OUT" "$N" <<'PY'
import json, sys
out, n = sys.argv[1], int(sys.argv[2])
print(f"{'verifier':28} " + " ".join(f"{'round ' + str(k):>8}" for k in range(n + 1)) + f" {'accepted':>9} {'refines':>8}")
for v in ("self", "format", "oracle"):
    s = json.load(open(f"{out}/refine_{v}.json"))
    p = "refine_oracle_upper_bound" if v == "oracle" else "refine"
    name = "oracle (upper bound, gold)" if v == "oracle" else v
    print(f"{name:28} " + " ".join(f"{s[f'{p}/pass@1_round{k}']:>8.3f}" for k in range(n + 1))
          + f" {s[f'{p}/accept_rate']:>9.3f} {s[f'{p}/mean_refines']:>8.2f}")
PY
