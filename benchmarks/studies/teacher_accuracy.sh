#!/usr/bin/env bash
# Greedy held-out pass@1 of the shipped base (the student) and the built-in teacher on the arithmetic
# task, 500 problems (eval seed 0), as docs/teacher.md reports. JSON under benchmarks/results/teacher/.
# The teacher itself was made with (600 steps instead of the base's stop at pass 0.40):
#   reasonrl pretrain --steps 600 --eval-every 100 --half --out src/reasonrl/models/teacher
set -euo pipefail
out=benchmarks/results/teacher
mkdir -p "$out"
for m in base teacher; do
  python -m reasonrl.cli eval --model "src/reasonrl/models/$m" --problems 500 --samples-per-problem 0 --json "$out/eval_$m.json"
done
python - "$out" <<'PY'
import json, sys
out = sys.argv[1]
print(f"{'model':<10}{'greedy pass@1 (500 held-out)':>32}")
for m in ("base", "teacher"):
    print(f"{m:<10}{json.load(open(f'{out}/eval_{m}.json'))['pass@1']:>32.3f}")
PY
