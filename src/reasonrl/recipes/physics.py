"""Physics-R1 (spec envs-selfplay-eval section 7; the authors' code shanyang-me/physics-r1-neurips2026).

verl's ``adv_estimator=grpo`` with ``policy_loss.loss_mode=gspo`` and ``reward_manager=dapo``: GRPO's
group-normalised advantages, GSPO's one length-normalised ratio per response clipped per response,
DAPO's dynamic sampling and soft overlong shaping, and the rule-based ``physics_match`` reward (last
box by brace counting, MCQ letters, multipart AND, numbers within rtol 1e-2 / atol 1e-6 after LaTeX
to text) in place of the task's verifier. The dense reward is an option of that reward
(``rewards.physics_match.dense=true``).
"""

from ..parts import KL, Advantage, GroupFilter, Optim, PolicyLoss, Recipe, Smoke
from ..rewards import OverlongPenalty, PhysicsMatch
from .grpo import TINY_CPU_OPTIM, TINY_CPU_SAMPLING

PHYSICS_R1 = Recipe(
    name="physics_r1",
    summary="GSPO ratio, asymmetric clip, dynamic sampling, multipart `physics_match` reward",
    details=(
        "Physics-R1: GRPO advantage, GSPO's sequence ratio with its own asymmetric clip band (3e-4 / 4e-4), "
        "DAPO's dynamic sampling and overlong shaping, reward `physics_match` (last `\\boxed{}` by brace "
        "counting, MCQ letters, multipart AND, rtol 1e-2 / atol 1e-6 after LaTeX to text; "
        "`rewards.physics_match.dense=true` for the spec's dense reward; `--task multipart`)"
    ),
    doc="physics.md",
    smoke=Smoke("multipart", metrics=("reward/physics_match/mean", "reward/physics_match/part_acc", "dynamic/rounds")),
    paper="Physics-R1 contamination audit and GSPO+DAPO recipe (spec envs-selfplay-eval section 7)",
    inferred=(
        "reward: physics_match, binary (the authors' DENSE_REWARD=0); the dense sum r_ans + 0.10 r_fmt + 0.15 r_dim "
        "+ 0.20 r_sym - 0.25 r_cons clipped to [-1, 1] is rewards.physics_match.dense=true, what r_dim / r_sym / "
        "r_cons measure is inferred (rewards/physics_dense.py); it replaces the task's verifier (task_reward_weight=0)",
        "clip-higher on the sequence ratio: GSPO's own asymmetric band eps_l=3e-4 / eps_h=4e-4 (GSPO paper "
        "defaults; DAPO's 0.2 / 0.28 is for token ratios and would never bind on a sequence ratio)",
        "loss.agg=seq-mean-token-mean, GSPO's -(1/G) sum_i form as the spec writes it (DAPO's token-level mean is "
        "loss.agg=token-mean)",
        "dynamic sampling on raw correctness (verl's filter_groups metric acc), group_filter.max_rounds=3 as dapo",
        "overlong shaping: cache = 20% of the generation budget, weight 1.0 (verl's DAPO reward manager adds the "
        "penalty unscaled, overlong_buffer.penalty_factor 1.0)",
        "optim.minibatches=2 as gspo (the sequence clip only acts off-policy); kl.coef=0",
        "group_size=8 (paper: verl rollout n unknown), sampling T=0.8 and AdamW lr 5e-5: the tiny-reasoner CPU "
        "settings of grpo, for equal-terms comparisons with gspo",
    ),
    advantage=Advantage("grpo"),
    loss=PolicyLoss(ratio="sequence", clip_low=3e-4, clip_high=4e-4, agg="seq-mean-token-mean"),
    kl=KL(coef=0.0),
    group_filter=GroupFilter(metric="accuracy", max_rounds=3),
    task_reward_weight=0.0,
    extra_rewards=((PhysicsMatch(), 1.0), (OverlongPenalty(cache_frac=0.2), 1.0)),
    sampling=TINY_CPU_SAMPLING,
    optim=Optim(lr=TINY_CPU_OPTIM.lr, minibatches=2),
)
