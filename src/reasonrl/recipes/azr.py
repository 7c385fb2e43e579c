"""AZR: Absolute Zero Reasoner (Zhao et al., arXiv 2505.03335): one model proposes program tasks and
solves them, rewarded for proposing tasks of intermediate difficulty, with no external data.

Spec: shared/specs/envs-selfplay-eval.md section 1 (the released code fixes most values). The part is
:class:`~reasonrl.parts.AZR`; the program world, prompts and grading are the ``azr`` task.
"""

from ..parts import AZR, KL, Advantage, PolicyLoss, Recipe, Smoke
from ..tasks.azr import AZRShaping
from .grpo import TINY_CPU_OPTIM, TINY_CPU_SAMPLING

AZR_RECIPE = Recipe(
    name="azr",
    summary="one policy proposes program tasks (deduction, abduction, induction) and solves them; TRR++",
    doc="selfplay.md",
    smoke=Smoke(
        "azr",
        metrics=("azr/proposer_reward", "azr/buffer_deduction", "azr/buckets", "reward/azr_format/format_rate"),
        changes=(("azr.proposals", 1), ("azr.estimate_samples", 2)),
    ),
    paper="Absolute Zero: Reinforced Self-play Reasoning with Zero Data, arXiv 2505.03335 (code: "
    "LeapLabTHU/Absolute-Zero-Reasoner)",
    inferred=(
        "programs: short stdin scripts of the code task's grammar (a=int(input()) first, print last) instead of "
        "AZR's Python functions, so a 512-position character model can read and write them; compact prompts "
        "(#O/#I/#F to solve, #PO/#PI/#PF to propose) for AZR's six role/task prompts",
        "validation as the released code: parse, banned modules/words (AZR's list plus os, sys, socket, open, eval, "
        "exec, ...), a run, a second run whose output must agree; every run in the sandbox, never exec in the trainer",
        "buffers seeded with the identity program (AZR's seed); every valid triplet joins its type's buffer, "
        "at most azr.capacity=512 per type, oldest dropped",
        "proposal prompts: K=2 reference triplets (AZR io_n 6; the 512 positions), azr.proposals=2 prompts per type, "
        "group_size=4 proposals each; induction: one program from the buffers, the proposer writes its inputs "
        "(AZR's message dropped), 3 shown and 3 held out, all held-out pairs must pass (AZR's 'binary')",
        "proposer reward 1 - p_hat if p_hat > 0 else 0 from azr.estimate_samples=4 solver samples (AZR: 8); "
        "-0.5 invalid, -1 bad format; solver: 1 / -0.5 / -1 (AZR's format shaping, task reward + AZRShaping)",
        "TRR++: REINFORCE++ normalised within each of the 6 (role, type) buckets (advantage.estimator is overridden); "
        "no KL (AZR: kl_coef 0); PPO clip 0.2, token-mean loss",
        "group_size=4 (AZR 7B: n = 1 rollout per prompt, 64 per task type), sampling T=0.8 and AdamW lr 5e-5 as "
        "grpo's tiny-CPU settings (AZR: lr 1e-6)",
    ),
    advantage=Advantage("reinforce_pp"),
    loss=PolicyLoss(ratio="token", clip_low=0.2, clip_high=0.2, agg="token-mean"),
    kl=KL(coef=0.0),
    group_size=4,
    sampling=TINY_CPU_SAMPLING,
    optim=TINY_CPU_OPTIM,
    extra_rewards=((AZRShaping(), 1.0),),
    azr=AZR(),
    run_defaults=(("task", "azr"),),
)
