#!/usr/bin/env bash
# Learning runs of the task-bound recipes against GRPO on their own tasks (issue 5) and of VSPO
# against its reward-shaping baseline (issue 4), on the tiny reasoner, CPU only.
#
#   bash benchmarks/task_methods.sh [OUT]   (OUT defaults to runs/task_methods)
#
# Each task first gets its own warm-started base (supervised on the task's demonstrations until
# held-out greedy pass@1 reaches the learning zone), then `reasonrl compare` trains GRPO and the
# method from that base for 30 steps of 8 prompts x 8 samples, 3 seeds each, and evaluates all
# runs on the same 200 held-out problems. Results: OUT/<name>/compare.json, compare.png.
set -euo pipefail
OUT=${1:-runs/task_methods}
COMMON="eval_every=10 eval_problems=100 final_eval_problems=200 final_eval_k=0 save_every=0"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}

base() {  # task, until-pass, max steps, extra pretrain args...
  local task=$1 until=$2 steps=$3; shift 3
  [ -d "$OUT/bases/$task" ] || reasonrl pretrain --task "$task" --steps "$steps" --eval-every 10 \
    --eval-problems 100 --until-pass "$until" --out "$OUT/bases/$task" "$@"
}

base temporal 0.40 300
base diagnosis 0.35 250
base recommend 0.30 250
base code 0.30 300
reasonrl pretrain --steps 400 --eval-every 5 --until-pass 0.40 --task-opt spaced_rate=0.05 --out "$OUT/bases/spaced"

reasonrl compare --recipes grpo,tempo --task temporal --seeds 3 --steps 30 --out "$OUT/tempo" model="$OUT/bases/temporal" $COMMON
reasonrl compare --recipes grpo,sspo --task diagnosis --seeds 3 --steps 30 --out "$OUT/sspo" model="$OUT/bases/diagnosis" $COMMON
reasonrl compare --recipes grpo,sapo --task recommend --seeds 3 --steps 30 --out "$OUT/sapo" model="$OUT/bases/recommend" $COMMON
reasonrl compare --recipes grpo,codethinker --task code --seeds 3 --steps 30 --out "$OUT/codethinker" model="$OUT/bases/code" $COMMON
# VSPO against the paper's baseline: the same reward (task + 0.5 x spaced style), no steering
reasonrl compare --recipes "vspo:steering=null,vspo" --seeds 3 --steps 30 --out "$OUT/vspo" \
  model="$OUT/bases/spaced" task_options.spaced_rate=0.05 $COMMON
