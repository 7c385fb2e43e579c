"""EvoEnv: the model writes the environments that train it (arXiv abstract in shared/seeds; spec
shared/specs/envs-selfplay-eval.md section 2). Most of the mechanics are [inferred] (the spec's
reading of L1-L5, thresholds and generator reward). The part is :class:`~reasonrl.parts.EvoEnv`; the
environments, prompts and grading are the ``evoenv`` task.
"""

from ..parts import KL, Advantage, EvoEnv, PolicyLoss, Recipe, Smoke
from .grpo import TINY_CPU_OPTIM, TINY_CPU_SAMPLING

EVOENV_RECIPE = Recipe(
    name="evoenv",
    summary=(
        "one policy writes Python environments, admitted by staged checks, review, calibration and novelty, "
        "and solves their instances"
    ),
    doc="selfplay.md",
    smoke=Smoke(
        "evoenv",
        metrics=("evoenv/generated", "evoenv/generator_reward", "evoenv/pool_size", "evoenv/retired_total"),
        changes=(
            ("evoenv.proposals", 1),
            ("evoenv.estimate_instances", 2),
            ("evoenv.estimate_samples", 1),
            ("evoenv.review_samples", 1),
        ),
    ),
    paper="EvoEnv: the model builds the environments that train it (shared/seeds; 10 seed environments, "
    "four admission checks, pool rotation)",
    inferred=(
        "environment interface Env.sample/prompt/reference/score with a difficulty knob; every call in the sandbox "
        "(a trusted runner, a time limit per call, JSON values), never in the trainer",
        "L1 static (parse, size, AZR's banned list less random plus os/sys/socket/open/eval/exec/__import__, one Env "
        "subclass), L2 execution on 8 seeds x 2 difficulties run twice in separate processes (determinism) and 50% "
        "distinct instances, L3 score(reference)=1, degenerate answers (empty, 0, prompt copy, another instance's "
        "reference) <= 0.5 on average, no fixed prompt token is the answer in 80% of instances",
        "L4: the policy reviews the code and two rendered instances, yes/no, majority of 3 (evoenv.review=off skips)",
        "L5: 4 instances x 2 solver answers, admitted for p_hat in [0.1, 0.8]; generator reward -1 (L1/L2), -0.5 "
        "(L3/L4/novelty), 0 when L5 rejects it; if admitted 1 - p_hat for 0 < p_hat < 1 (AZR's learnability; "
        "evoenv.reward=band: 1 in the band; evoenv.paid=calibrated pays 1 - p_hat outside the band too, "
        "as before issue 41)",
        "novelty: word 5-gram Jaccard on normalised code against the pool and the batch; tau 0.8 here (spec 0.5): "
        "the tiny model's short modules share their boilerplate, two different expressions already score 0.3-0.7",
        "pool: the ten seeds plus a catalogue of 12 short grammar environments the tiny model can read (the seeds "
        "are too long for its 512 positions as generator references); EMA p_hat (0.2) from the solver's rollouts, "
        "retired after 3 checks above 0.8 or at 0.05 and below, capacity 64, oldest written one out; seeds stay",
        "per-role TRR++ (REINFORCE++ within the solve and the generate rows); no KL; group_size=4, two generator "
        "prompts of one reference each per step; grpo's tiny-CPU sampling and AdamW",
    ),
    advantage=Advantage("reinforce_pp"),
    loss=PolicyLoss(ratio="token", clip_low=0.2, clip_high=0.2, agg="token-mean"),
    kl=KL(coef=0.0),
    group_size=4,
    sampling=TINY_CPU_SAMPLING,
    optim=TINY_CPU_OPTIM,
    evoenv=EvoEnv(novelty_tau=0.8),
    run_defaults=(("task", "evoenv"),),
)
