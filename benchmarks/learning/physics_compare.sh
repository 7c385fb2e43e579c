#!/usr/bin/env bash
# physics_r1 against gspo on the built-in multipart task (issue 15, item 4), tiny reasoner, CPU only.
#
#   bash benchmarks/learning/physics_compare.sh [STEPS] [OUT]     (defaults: 10 steps, runs/compare_physics)
#
# 1. A warm-started base: the shipped arithmetic reasoner, supervised on the multipart task's
#    demonstrations until held-out greedy pass@1 reaches 0.45 (the learning zone; at most 300 steps).
# 2. `reasonrl compare`: both recipes, 3 seeds each, from that base, the same 200 held-out problems;
#    the table gives final pass@1 mean ± std (ddof 1), Welch over seeds, and McNemar / sign test /
#    paired bootstrap on the items pooled over seeds, each recipe against the first (physics_r1).
# gspo differs from physics_r1 by what Physics-R1 adds: dynamic sampling and overlong shaping (on
# this task the verifier gspo trains on is physics_match itself).
# compare.json and compare.png are copied to $DEST (default benchmarks/results/compare_physics/).
set -euo pipefail
cd "$(dirname "$0")/../.."
STEPS=${1:-10}
OUT=${2:-runs/compare_physics}
BASE=${BASE:-runs/bases/multipart}
EVAL_EVERY=${EVAL_EVERY:-0}  # held-out curve points during training (100 problems each); 0: before and after only
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH}
[ -d "$BASE" ] || python -m reasonrl.cli pretrain --task multipart --model src/reasonrl/models/base --steps 300 \
  --eval-every 10 --eval-problems 100 --until-pass 0.45 --out "$BASE"
start=$(date +%s)
python -m reasonrl.cli compare --recipes physics_r1,gspo --task multipart --seeds 3 --steps "$STEPS" --out "$OUT" \
  model="$BASE" eval_every=$EVAL_EVERY eval_problems=100 final_eval_problems=200 final_eval_k=0 save_every=0 --resume
end=$(date +%s)
dest=${DEST:-benchmarks/results/compare_physics}
mkdir -p "$dest"
cp "$OUT"/compare.json "$OUT"/compare.png "$dest"/
python3 - "$dest" "$((end - start))" <<'PY'
import json, sys
dest, wall = sys.argv[1], int(sys.argv[2])
d = json.load(open(f"{dest}/compare.json"))
d["wall_seconds"] = wall
json.dump(d, open(f"{dest}/compare.json", "w"), indent=1)
print(f"| recipe | final pass@1 (mean ± std, 3 seeds) | per seed | Welch p | McNemar b/c, p | paired diff [95% CI] |")
print("|---|---|---|---|---|---|")
for r in d["table"]:
    p = r.get("paired_vs_first") or {}
    welch = "-" if r["p_vs_first"] is None else f"{r['p_vs_first']:.3f}"
    mc = f"{p['b']}/{p['c']}, {p['mcnemar_p']:.3g}" if p else "-"
    ci = f"{p['diff']:+.3f} [{p['ci_low']:+.3f}, {p['ci_high']:+.3f}]" if p else "-"
    print(f"| {r['recipe']} | {r['final_mean']:.3f} ± {r['final_std']:.3f} | {', '.join(f'{x:.3f}' for x in r['per_seed'])} | {welch} | {mc} | {ci} |")
print(f"wall clock {wall} s")
PY
