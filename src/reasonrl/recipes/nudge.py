"""NudgeRL: strategy nudging with hinted sub-groups and distillation to the bare prompt (arXiv 2605.15726).

From the authors' trainer (``tally0818/NudgeRL``: ``NudgeRLTrainer.py``, ``configs/train_config.yaml``):
M = 2 hints (the first two) x K = 4 rollouts, each rollout dropped to the bare prompt with p = 0.5,
advantages ``(r - mu_c) + 1.1 (mu_c - mu)`` (dropout rows ``r - mu``) standardised over the prompt,
PPO clip 0.2 / 0.2 on the hinted prompt, no KL, the per-sequence token mean, plus
``0.1 * L_d`` re-scoring every completion under the bare prompt. The whole method is one part,
:class:`~reasonrl.parts.HintSampling`; sampling and optimiser are grpo's tiny-reasoner settings.
"""

from ..parts import KL, Advantage, HintSampling, PolicyLoss, Recipe, Smoke
from .grpo import TINY_CPU_OPTIM, TINY_CPU_SAMPLING

NUDGERL = Recipe(
    name="nudgerl",
    summary="hinted sub-groups, between-hint advantages, distillation to the bare prompt",
    details=(
        "a group is 2 hints x 4 rollouts, each rollout dropped to the bare prompt with probability 0.5 "
        "(`hints`); within-hint + 1.1 x between-hint advantage; a distillation term re-scores every "
        "completion under the bare prompt"
    ),
    doc="selfteach.md",
    smoke=Smoke(metrics=("nudge/hinted_frac", "nudge/distill_term"), changes=(("hints.per_hint", 2),)),
    paper="NudgeRL: strategy nudging, arXiv 2605.15726 (authors' code)",
    inferred=(
        "hints.template: the spec's hint block placed before the problem so the hinted prompt ends as the bare one "
        "(the tiny reasoner answers what follows '=?\\n'); the paper appends it after the problem",
        "hints come from the task (tasks.guidance.hints; arithmetic derives them from the problem), not gpt-4o-mini",
        "hints.sampler=sequential (authors'); 'random' draws M hints per item keyed by its task position",
        "dropout counts and each row's sample are keyed by (the item's task position, the row), not a global RNG",
        "sub-group layout: bare rows first, then hint 1's, hint 2's (advantages do not depend on it)",
        "NudgeRL advantages and L_d apply to first-round groups; L_d is normalised by the minibatch's sequence count",
        "advantage.estimator=grpo is computed then replaced by NudgeRL's for every first-round group",
        "optim: lr 5e-5 and sampling.temperature=0.8 (paper: 2e-5 LoRA, T=1.0): the tiny-reasoner settings of grpo",
    ),
    advantage=Advantage("grpo", scale="group"),
    loss=PolicyLoss(ratio="token", clip_low=0.2, clip_high=0.2, agg="seq-mean-token-mean"),
    kl=KL(coef=0.0, estimator="k3"),
    group_size=8,  # = hints.n_hints 2 x hints.per_hint 4
    sampling=TINY_CPU_SAMPLING,
    optim=TINY_CPU_OPTIM,
    hints=HintSampling(n_hints=2, per_hint=4, p_drop=0.5, sampler="sequential", adv_lambda=1.1, distill_coef=0.1),
)
