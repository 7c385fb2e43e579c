#!/usr/bin/env bash
# Learning runs of the task-bound recipes against GRPO on their own tasks (issue 5) and of VSPO
# against its reward-shaping baseline (issue 4), on the tiny reasoner, CPU only (about 3 h on 2 cores).
#
#   bash benchmarks/learning/task_methods.sh [OUT]   (OUT defaults to runs/task_methods)
#
# Each task first gets its own warm-started base (supervised on the task's demonstrations until
# held-out greedy pass@1 reaches the learning zone), then `reasonrl compare` trains GRPO and the
# method (and, where a run showed a failure mode, the method with one documented option changed)
# from that base, 3-4 seeds each, and evaluates all runs on the same 200 held-out problems; the
# task's own diagnostics (leak rate, trace consistency, set Jaccard, ...) of every final model go
# to diagnostics.json. Results: OUT/<name>/compare.json, compare.png, diagnostics.json.
set -euo pipefail
OUT=${1:-runs/task_methods}
COMMON="eval_problems=100 final_eval_problems=200 final_eval_k=0 save_every=0"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}

base() {  # task, until-pass, max steps, extra pretrain args...
  local task=$1 until=$2 steps=$3; shift 3
  [ -d "$OUT/bases/$task" ] || reasonrl pretrain --task "$task" --steps "$steps" --eval-every 10 \
    --eval-problems 100 --until-pass "$until" --out "$OUT/bases/$task" "$@"
}

compare() {  # name, task, steps, seeds, recipes, extra key=value...
  local name=$1 task=$2 steps=$3 seeds=$4 recipes=$5; shift 5
  reasonrl compare --recipes "$recipes" --task "$task" --seeds "$seeds" --steps "$steps" --out "$OUT/$name" \
    model="$OUT/bases/$task" $COMMON "$@"
  python benchmarks/learning/task_diagnostics.py "$OUT/$name"
}

base temporal 0.65 400   # stops at 400 steps with pass@1 0.50, leak rate 0.19, grounded 0.22
base diagnosis 0.35 250
base recommend 0.30 250
base code 0.30 300
reasonrl pretrain --steps 400 --eval-every 5 --until-pass 0.40 --task-opt spaced_rate=0.05 --out "$OUT/bases/spaced"

compare tempo temporal 30 5 "grpo,tempo" eval_every=10
compare sspo diagnosis 60 4 "grpo,sspo" eval_every=20
compare sapo recommend 60 3 "grpo,sapo" eval_every=20 loss.clip_high=0.28
compare sapo_lr2e-4 recommend 60 5 "grpo,sapo" eval_every=20 optim.lr=2e-4
# SAPO from a softer recommend base: the warm start stopped at pass 0.15 (65 steps)
[ -d "$OUT/bases/recommend_soft" ] || reasonrl pretrain --task recommend --steps 120 --eval-every 5 \
  --eval-problems 100 --until-pass 0.15 --out "$OUT/bases/recommend_soft"
reasonrl compare --recipes "grpo,sapo" --task recommend --seeds 3 --steps 60 --out "$OUT/sapo_soft_base" \
  model="$OUT/bases/recommend_soft" eval_every=20 $COMMON
python benchmarks/learning/task_diagnostics.py "$OUT/sapo_soft_base"
compare codethinker code 30 3 "grpo,codethinker,codethinker:rewards.consistency.process=f1" eval_every=10
# VSPO against the paper's baseline: the same reward (task + 0.5 x spaced style), no steering
reasonrl compare --recipes "vspo:steering=null,vspo" --seeds 3 --steps 30 --out "$OUT/vspo" \
  model="$OUT/bases/spaced" task_options.spaced_rate=0.05 eval_every=10 $COMMON
python benchmarks/learning/vspo_behaviour.py "$OUT/vspo" --base "$OUT/bases/spaced"
