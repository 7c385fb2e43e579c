"""LZE: Learning-Zone Energy data selection (arXiv 2605.17003; spec distill-and-data.md section 10)."""

import dataclasses

from ..data.lze import LZE as LZESelector
from ..parts import Advantage, Smoke
from .grpo import GRPO

# GRPO's loss and tiny-CPU settings; the selector as the paper's example scripts run it
LZE = dataclasses.replace(
    GRPO,
    name="lze",
    summary="learning-zone energy data selection with prune and replay",
    details=(
        "a selector (`selector`): learning-zone energy d_init x 4p(1-p) x (1 + 0.3 m) per prompt, the top 40% "
        "of groups (Gumbel jitter) go to the update after epoch 0, solved prompts pruned and 10% replayed; "
        "needs a finite pool `data.pool=N`"
    ),
    doc="selector.md",
    smoke=Smoke(metrics=("select/kept", "select/groups", "select/k")),
    paper="Learning-Zone Energy data selection, arXiv 2605.17003",
    inferred=(
        "selector.selection_ratio=0.4 and warmup_transition_epochs=0 as the example scripts (class defaults 0.7, 3)",
        "advantage.scale=none: the scripts' norm_adv_by_std_in_grpo=False",
        "needs a finite pool: data.pool=N (the first N distinct train problems, cycled in seeded epochs); the "
        "command line uses data.pool=128 unless given (the pool of the measured 3-seed compares)",
        "pass rate p = the group's mean raw task correctness (the verifier's, never a shaped reward)",
        "kept groups rounded down to a multiple of optim.minibatches (verl: of ppo_mini_batch prompts)",
        "an item's epoch is its stream position // pool size; a batch that spans two epochs selects in the later one",
        "ratio warm-up: 1 + (target - 1) * min(1, epoch / warmup_transition_epochs), from epoch 1 on",
        "group size, sampling and optimiser as grpo (tiny reasoner on CPU; paper: n=8, lr 2e-6, T=1.0)",
    ),
    advantage=Advantage("grpo", scale="none"),
    selector=LZESelector(selection_ratio=0.4, warmup_transition_epochs=0),
    run_defaults=(("data.pool", 128),),
)
