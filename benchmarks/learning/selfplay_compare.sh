#!/usr/bin/env bash
# Self-play against GRPO on the same task (issue #29: AZR and EvoEnv), the tiny reasoner, CPU only.
#
#   bash benchmarks/learning/selfplay_compare.sh [azr|evoenv|all] [STEPS] [OUT]   (defaults: all, 30, runs/selfplay)
#
# Each task first gets its own warm-started base (`reasonrl pretrain --task T`: the task's demonstrations
# of every prompt, solver and proposer/generator/reviewer alike, until held-out greedy pass@1 reaches
# the learning zone or the step cap). Then `reasonrl compare` trains, from that base, 3 seeds each:
#   grpo   on the task's fixed solver problems (task_options.roles=solve: AZR's grammar programs;
#          EvoEnv's starting environments: the paper's hand-written-environment baseline);
#   the self-play recipe, whose solver problems come from its own buffers / pool instead.
# Both are evaluated on the same held-out solver problems (AZR: the three types; EvoEnv: held-out
# instance seeds of the starting environments). The task diagnostics (per-type accuracy; seed vs
# catalogue accuracy) go to diagnostics.json and the self-play metrics to selfplay.json.
set -euo pipefail
cd "$(dirname "$0")/../.."
WHICH=${1:-all}
STEPS=${2:-30}
OUT=${3:-runs/selfplay}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH}
COMMON="eval_every=0 eval_problems=100 final_eval_problems=200 final_eval_k=0 save_every=10"

run() {  # task, pretrain until-pass, pretrain max steps
  local task=$1 until=$2 psteps=$3
  [ -d "$OUT/bases/$task" ] || python -m reasonrl.cli pretrain --task "$task" --steps "$psteps" --eval-every 20 \
    --eval-problems 100 --until-pass "$until" --out "$OUT/bases/$task"
  python -m reasonrl.cli compare --recipes "grpo,$task" --task "$task" --seeds 3 --steps "$STEPS" \
    --out "$OUT/$task" model="$OUT/bases/$task" task_options.roles=solve $COMMON --resume
  python benchmarks/learning/task_diagnostics.py "$OUT/$task"
  python benchmarks/learning/selfplay_summary.py "$OUT/$task" --prefix "$task/"
  mkdir -p "benchmarks/results/selfplay/$task"
  cp "$OUT/$task"/compare.json "$OUT/$task"/diagnostics.json "$OUT/$task"/selfplay.json \
    "benchmarks/results/selfplay/$task/"
}

if [ "$WHICH" = azr ] || [ "$WHICH" = all ]; then run azr 0.5 600; fi
if [ "$WHICH" = evoenv ] || [ "$WHICH" = all ]; then run evoenv 0.5 600; fi
