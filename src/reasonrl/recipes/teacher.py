"""External-teacher recipes: TGPO (reg, adv) and the baselines RKL-OPD and KDRL from its code.

TGPO (Teacher-Guided Policy Optimization, arXiv 2605.13230; shared/specs/distill-and-data.md section 3)
asks a frozen, stronger teacher for its greedy token at every prefix of the student's rollout and
pulls the student toward it, on top of GRPO's outcome objective. The released code (helldog-star/TGPO,
``tipo``) fixes the maths; what it leaves to the tiny reasoner is stated in ``inferred``. The
teacher is ``teacher.model`` (default ``builtin:teacher``: a longer warm start of the shipped base,
docs/teacher.md). Sampling and optimiser are grpo's tiny-reasoner CPU settings, so the recipes
compare with grpo from the same student.
"""

import dataclasses

from ..parts import KDRL, RKLOPD, TGPO, PolicyLoss, Teacher, Smoke
from .grpo import GRPO

_SOURCE = "TGPO, arXiv 2605.13230 (code: helldog-star/TGPO, mix_core_alg.py)"
_COMMON = (
    "teacher.model=builtin:teacher (a 600-step warm start of the base's architecture; any local HF directory "
    "with the student's vocabulary); teacher.offload=false; the teacher scores at sampling.temperature",
    "loss: PPO-clip 0.2, token-mean over the minibatch (verl's masked_mean), as the released scripts",
    "entropy_coef=0.001 (released scripts); no KL to the reference",
    "group_size=8, sampling T=0.8 and AdamW lr 5e-5 as grpo (released 7B: T=1.0, lr 1e-6, 300 steps), "
    "so the recipes compare with grpo from the same student",
)
_TEACHER_LOSS = PolicyLoss(ratio="token", clip_low=0.2, clip_high=0.2, agg="token-mean")
_STEP = "lambda_k = max(lambda_0 - (k - 1) delta, lambda_min) at the 1-based training step k (verl's global_steps)"

TGPO_RECIPE = dataclasses.replace(
    GRPO,
    name="tgpo",
    summary="a frozen external teacher's greedy tokens as a regulariser, an advantage, a reverse KL, a KL term",
    details=(
        "an external frozen teacher (`teacher.model`, same vocabulary, checked) gives its greedy token at "
        "each of the student's prefixes; `tgpo` adds a decaying regulariser raising the student's log-prob of "
        "that token (lambda_0 0.002, delta 1e-5), `tgpo_adv` turns it into a token advantage (0.02, 1e-4); "
        "student log-probs at both label sets from one forward"
    ),
    doc="teacher.md",
    smoke=Smoke(metrics=("teacher/agree", "teacher/tgpo_coef")),
    paper=_SOURCE + ", reg variant",
    inferred=_COMMON
    + (
        "tgpo.variant=reg (the spec's default; which variant the paper's headline uses is not certain)",
        "reg term lambda_k * token-mean(-log pi_theta(teacher argmax)), from the policy's own forward; "
        "tgpo.coef=0.002, tgpo.decay=1e-5, tgpo.min_coef=0; " + _STEP,
    ),
    loss=_TEACHER_LOSS,
    entropy_coef=0.001,
    teacher=Teacher(),
    tgpo=TGPO(),
)

TGPO_ADV_RECIPE = dataclasses.replace(
    TGPO_RECIPE,
    name="tgpo_adv",
    smoke=Smoke(metrics=("teacher/agree", "teacher/tgpo_coef", "teacher/tgpo_prob")),
    paper=_SOURCE + ", adv variant",
    inferred=_COMMON
    + (
        "token advantage A_i + lambda_k exp(log pi_old(teacher argmax)), pi_old from a no-grad pass of the policy "
        "before the update; tgpo.coef=0.02, tgpo.decay=1e-4, tgpo.min_coef=0; " + _STEP,
    ),
    tgpo=TGPO(variant="adv"),
)

RKL_OPD_RECIPE = dataclasses.replace(
    TGPO_RECIPE,
    name="rkl_opd",
    details=(
        "the same teacher as baselines: reverse-KL on-policy distillation as a token advantage log pi_T - log "
        "pi_old; KDRL's GRPO + beta KL(student \\|\\| teacher) (k2, beta 0.002)"
    ),
    smoke=Smoke(metrics=("teacher/agree", "teacher/rkl")),
    paper=_SOURCE + ", reverse-KL on-policy distillation baseline",
    inferred=_COMMON
    + (
        "token advantage log pi_T(y_t) - log pi_old(y_t) alone (the released compute_rkl_advantage), "
        "pi_old = the rollout's behaviour log-probs; rkl_opd.grpo_weight=1, rkl_opd.coef=0.002 is the "
        "grpo_merge_rkl variant",
    ),
    tgpo=None,
    rkl_opd=RKLOPD(),
)

KDRL_RECIPE = dataclasses.replace(
    TGPO_RECIPE,
    name="kdrl",
    details=(
        "the same teacher as baselines: reverse-KL on-policy distillation as a token advantage log pi_T - log "
        "pi_old; KDRL's GRPO + beta KL(student \\|\\| teacher) (k2, beta 0.002)"
    ),
    smoke=Smoke(metrics=("teacher/agree", "teacher/kdrl_kl")),
    paper=_SOURCE + ", KDRL baseline",
    inferred=_COMMON
    + (
        "loss = L_GRPO + beta * token-mean(0.5 (log pi_T - log pi_theta)^2) on the sampled tokens, beta 0.002 "
        "(the docstring's J_GRPO - beta KL; the released code subtracts the term, which would push away from "
        "the teacher); kdrl.estimator=k2 as the code (the spec's text reads k1)",
    ),
    tgpo=None,
    kdrl=KDRL(),
)

TEACHER_RECIPES = (TGPO_RECIPE, TGPO_ADV_RECIPE, RKL_OPD_RECIPE, KDRL_RECIPE)
