#!/usr/bin/env bash
# fest against grpo from the shipped tiny reasoner on arithmetic (issue 13, FEST), CPU only.
#
#   bash benchmarks/learning/fest_compare.sh [STEPS] [OUT]     (defaults: 12 steps, runs/compare_fest)
#
# `reasonrl compare`: both recipes, 3 seeds each, the same base and the same 200 held-out problems;
# the table gives final greedy pass@1 mean ± std (ddof 1), Welch over seeds, and the paired tests on
# items pooled over seeds, fest against grpo. fest is grpo plus the decaying DPO term on 32 of the
# task's own demonstrations (4 a step, G fresh rollouts of each demo prompt for the rejected side).
# compare.json and compare.png are copied to $DEST (default benchmarks/results/fest/).
set -euo pipefail
cd "$(dirname "$0")/../.."
STEPS=${1:-12}
OUT=${2:-runs/compare_fest}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH}
start=$(date +%s)
python -m reasonrl.cli compare --recipes grpo,fest --seeds 3 --steps "$STEPS" --out "$OUT" \
  eval_every=0 final_eval_problems=200 final_eval_k=0 save_every=0 --resume
end=$(date +%s)
dest=${DEST:-benchmarks/results/fest}
mkdir -p "$dest"
cp "$OUT"/compare.json "$OUT"/compare.png "$dest"/
echo "wall seconds: $((end - start))" | tee "$dest/wall_seconds.txt"
