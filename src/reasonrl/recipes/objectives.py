"""Recipes that change GRPO's objective: DAPO, GSPO, RLOO, REINFORCE++, CISPO, EDAS.

Each is a few lines over the parts in :mod:`reasonrl.parts`; the optimiser and sampling settings
are the tiny-reasoner CPU ones of ``grpo`` so that recipes compare on equal terms.
"""

from ..parts import EDAS, KL, CorrBonus, Advantage, GroupFilter, Optim, PolicyLoss, Recipe, Stages, Veto, Smoke
from ..rewards import OverlongPenalty
from .grpo import TINY_CPU_OPTIM, TINY_CPU_SAMPLING

_SAME_AS_GRPO = "sampling (T=0.8) and optimiser (AdamW lr 5e-5, cosine) as grpo, for equal-terms comparisons"

# DAPO: clip-higher (0.2 / 0.28), token-level mean, dynamic sampling on raw accuracy, soft overlong
# punishment over the last 20% of the generation budget.
DAPO = Recipe(
    name="dapo",
    summary="clip-higher, token mean, dynamic sampling on raw accuracy, soft overlong penalty",
    details=(
        "clip-higher 0.2/0.28, token mean, dynamic sampling (`group_filter`: drop groups whose *raw accuracy* "
        "is constant, refill up to 3 rounds), soft overlong punishment over the last 20% of the budget"
    ),
    smoke=Smoke(metrics=("dynamic/groups_kept", "dynamic/rounds", "reward/overlong/soft_frac")),
    paper="DAPO, arXiv 2503.14476",
    inferred=(
        "correctness reward is 0/1 (paper: +1/-1); the overlong penalty is weighted 0.5 so that it keeps "
        "the paper's ratio to the correctness gap (group standardisation removes the rest)",
        "overlong cache = 20% of the generation budget (paper: 4096 of 20480)",
        "group_filter.max_rounds=3 generation rounds per step, after which a batch may be short (counted in "
        "dynamic/short_batches_total; verl: max_num_gen_batches); the paper's refill-until-full is "
        "group_filter.max_rounds=null, which stops with an error after group_filter.max_rounds_cap=100 rounds",
        "group_size=8 (paper: 16); " + _SAME_AS_GRPO,
    ),
    advantage=Advantage("grpo"),
    loss=PolicyLoss(ratio="token", clip_low=0.2, clip_high=0.28, agg="token-mean"),
    kl=KL(coef=0.0),
    group_filter=GroupFilter(metric="accuracy", max_rounds=3),
    extra_rewards=((OverlongPenalty(cache_frac=0.2), 0.5),),
    sampling=TINY_CPU_SAMPLING,
    optim=TINY_CPU_OPTIM,
)

# GSPO: one length-normalised (geometric-mean) ratio per response, clipped per response.
GSPO = Recipe(
    name="gspo",
    summary="one sequence-level ratio per response",
    details=(
        'one geometric-mean ratio per response, clipped per response (`ratio="sequence"`; '
        '`"sequence-token"` is GSPO-token)'
    ),
    paper="GSPO, arXiv 2507.18071",
    inferred=(
        "optim.minibatches=2: the sequence clip only acts off-policy; the paper splits each rollout batch "
        "into several minibatches (4 there)",
        "clip 3e-4 / 4e-4 as the paper's section 5.1",
        _SAME_AS_GRPO,
    ),
    advantage=Advantage("grpo"),
    loss=PolicyLoss(ratio="sequence", clip_low=3e-4, clip_high=4e-4, agg="seq-mean-token-mean"),
    kl=KL(coef=0.0),
    sampling=TINY_CPU_SAMPLING,
    optim=Optim(lr=TINY_CPU_OPTIM.lr, minibatches=2),
)

# RLOO: REINFORCE with the leave-one-out mean as the baseline; the sequence log-likelihood (token sum)
# carries the advantage, inside the PPO clip as TRL's RLOO trainer does.
RLOO = Recipe(
    name="rloo",
    summary="leave-one-out baseline; batch-normalised advantages",
    details="leave-one-out baseline, sequence log-likelihood",
    paper="Back to Basics: REINFORCE Style Optimization (Ahmadian et al.), arXiv 2402.14740",
    inferred=(
        "PPO clip 0.2 around the REINFORCE term (TRL's RLOO)",
        "agg=seq-mean-token-sum (the sequence log-likelihood)",
        _SAME_AS_GRPO,
    ),
    advantage=Advantage("rloo"),
    loss=PolicyLoss(ratio="token", clip_low=0.2, clip_high=0.2, agg="seq-mean-token-sum"),
    sampling=TINY_CPU_SAMPLING,
    optim=TINY_CPU_OPTIM,
)

# REINFORCE++: no critic, no group baseline; advantages normalised over the whole batch.
REINFORCE_PP = Recipe(
    name="reinforce_pp",
    summary="leave-one-out baseline; batch-normalised advantages",
    details="advantages normalised over the whole batch",
    paper="REINFORCE++, arXiv 2501.03262",
    inferred=(
        "the paper folds a token-level KL into the reward; here the KL is off (kl.coef=0) like grpo's default",
        "agg=token-mean",
        _SAME_AS_GRPO,
    ),
    advantage=Advantage("reinforce_pp"),
    loss=PolicyLoss(ratio="token", clip_low=0.2, clip_high=0.2, agg="token-mean"),
    sampling=TINY_CPU_SAMPLING,
    optim=TINY_CPU_OPTIM,
)

# CISPO: clip the (detached) importance weight instead of the update, so no token's gradient is dropped.
CISPO = Recipe(
    name="cispo",
    summary="a clipped, detached importance weight",
    details=('clipped, detached importance weight on log-pi (`trust_region="cispo"`): no token\'s gradient is dropped'),
    paper="MiniMax-M1 (CISPO), arXiv 2506.13585",
    inferred=(
        "weight clip band [1-0.2, 1+0.28] as DAPO's (the paper effectively drops the lower bound and tunes "
        "the upper one)",
        "agg=token-mean",
        _SAME_AS_GRPO,
    ),
    advantage=Advantage("grpo"),
    loss=PolicyLoss(ratio="token", clip_low=0.2, clip_high=0.28, trust_region="cispo", agg="token-mean"),
    sampling=TINY_CPU_SAMPLING,
    optim=TINY_CPU_OPTIM,
)

# EDAS on top of DAPO, as in the paper: frequent wrong answers are penalised more, rare ones less.
EDAS_DAPO = Recipe(
    name="edas",
    summary="DAPO + rescaling wrong answers' negative advantages by how often the wrong answer recurs",
    details="DAPO + a shaper rescaling wrong answers' negative advantages by how often the wrong answer recurs",
    doc="compare.md",
    smoke=Smoke(metrics=("dynamic/groups_kept", "reward/overlong/soft_frac")),
    paper="EDAS: Leveraging Error Diversity in Group Rollouts, arXiv 2605.17333",
    inferred=DAPO.inferred
    + (
        "lambda_i = n(a_i)^gamma / mean over wrong rollouts, gamma=1, unparsed answers "
        "form one cluster: the functional form is inferred from the abstract",
    ),
    advantage=DAPO.advantage,
    shapers=(EDAS(gamma=1.0),),
    loss=DAPO.loss,
    kl=DAPO.kl,
    group_filter=DAPO.group_filter,
    extra_rewards=DAPO.extra_rewards,
    sampling=DAPO.sampling,
    optim=DAPO.optim,
)

# Mu-GRPO: a few generate-then-train-many stages with a frozen behaviour policy, a relaxed trust region
# for the stale rollouts, and the negative-advantage veto of post-trigger suffixes.
MU_GRPO = Recipe(
    name="mu_grpo",
    summary="generate once per stage, train many steps on the stored behaviour log-probs, negative-advantage veto",
    details=(
        "`stages`: generate once per stage with a frozen policy, train many steps on the stored behaviour "
        "log-probs; relaxed clip [0.5, 2]; negative-advantage veto of the post-trigger suffix"
    ),
    doc="compare.md",
    smoke=Smoke(metrics=("veto/frac_rows", "veto/frac_tokens", "stage/staleness", "stage/fresh")),
    paper="How off-policy can GRPO be? (Mu-GRPO), arXiv 2605.17570",
    inferred=(
        "stages.count=4 as the abstract's 'e.g. four'; each stage generates all its steps' prompts at once, then "
        "runs optim.mu epochs over them (mu=1 here), mu x minibatches optimiser steps per logged step",
        "relaxed clip band [0.5, 2.0] (clip_low=0.5, clip_high=1.0): a guess, the paper's bounds are not public",
        "veto trigger 'out_of_band' (ratio leaves the relaxed band: the loss's clip band unless "
        "loss.veto.clip_low/clip_high are set), trigger token included: inferred",
        "agg=token-mean over the remaining tokens; kl off",
        _SAME_AS_GRPO,
    ),
    advantage=Advantage("grpo"),
    loss=PolicyLoss(ratio="token", clip_low=0.5, clip_high=1.0, agg="token-mean", veto=Veto()),
    kl=KL(coef=0.0),
    stages=Stages(count=4),
    sampling=TINY_CPU_SAMPLING,
    optim=TINY_CPU_OPTIM,
)

# SAGE: keep the reverse KL but anchor it at q * pi_ref, q raised at high-entropy (branching) tokens.
SAGE = Recipe(
    name="sage",
    summary="k3 KL to an entropy-shaped anchor `q * pi_ref`",
    details="k3 KL (beta 0.05) to an entropy-shaped anchor `q * pi_ref` (branch guide)",
    smoke=Smoke(metrics=("loss/kl", "loss/kl_term", "sage/q_mean", "sage/frac_shaped")),
    paper="SAGE: Shaping Anchors for Guided Exploration, arXiv 2605.18864 (official code tally0818/SAGE)",
    inferred=(
        "branch guide with the official defaults (ratio 0.3, threshold 1.2 nats, q in [0.6, 1.4]); the tiny "
        "reasoner's token entropies are mostly far below 1.2, so lower kl.threshold to see shaping on it",
        "beta = kl.coef = 0.05 (official config), GRPO advantage and seq-mean-token-mean as TRL's loss_type=grpo",
        "kl.guide=token|random (the official variants): their cyclic schedule counts optimiser steps over the run's "
        "optimiser steps (official: one step per loss call, which its gradient_accumulation_steps=1 makes the same); "
        "the noise is drawn once per optimiser step from the trainer's checkpointed loss_rng",
        "sampling.min_p=0 (official config: 0.01) for equal terms with grpo; set sampling.min_p=0.01 to match it",
        _SAME_AS_GRPO,
    ),
    advantage=Advantage("grpo"),
    loss=PolicyLoss(ratio="token", clip_low=0.2, clip_high=0.2, agg="seq-mean-token-mean"),
    kl=KL(coef=0.05, estimator="k3", guide="branch"),
    sampling=TINY_CPU_SAMPLING,
    optim=TINY_CPU_OPTIM,
)

# CorR-PO: a reward bonus for a negative correlation, within a response, between token entropy and the
# logit-gradient norm ("entropy-gradient inversion"); GRPO advantage on the regularised reward.
CORR_PO = Recipe(
    name="corr_po",
    summary="a bonus from the correlation of token entropy and logit-gradient norm",
    details="reward bonus from the per-response correlation of token entropy and logit-gradient norm",
    smoke=Smoke(metrics=("corr/mean", "corr/frac_defined", "reward/corr_po/mean")),
    paper="CorR-PO / Entropy-Gradient Inversion, arXiv 2605.17770",
    inferred=(
        "every formula is inferred from the abstract: logit-gradient norm sqrt(1 - 2 p_y + sum p^2) of the "
        "sampling distribution, per-response Pearson correlation, bonus -0.1 * c added to the 0/1 reward",
        "the sign is uncertain (for sampled tokens H and this norm usually move together): the correlation is "
        "logged as corr/mean; flip with a recipe using CorrBonus(sign='alignment')",
        "grad_norm='logit' (the spec's default); rewards.corr_po.grad_norm=hidden uses ||W_U^T (e_y - p)||, recorded "
        "by the rollout engine at sampling; correct_only=False (spec option: bonus for verifier-correct rollouts only)",
        _SAME_AS_GRPO,
    ),
    advantage=Advantage("grpo"),
    loss=PolicyLoss(ratio="token", clip_low=0.2, clip_high=0.2, agg="seq-mean-token-mean"),
    extra_rewards=((CorrBonus(coef=0.1), 1.0),),
    sampling=TINY_CPU_SAMPLING,
    optim=TINY_CPU_OPTIM,
)
