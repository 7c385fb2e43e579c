"""Self-teacher recipes: GRPO plus the policy teaching itself under privileged context.

``ssopd`` (arXiv 2605.17497) adds a distillation term along the longest wrong completion of each
mixed group, the teacher shown the shortest correct one; ``egrsd`` / ``cl_egrsd`` (arXiv 2605.13255)
replace the sequence advantage by entropy-gated token advantages from a teacher shown the reference
solution. Both papers were available as abstract and introduction only: every functional form is
[inferred] (shared/specs/distill-and-data.md sections 1-2) and a config field with the spec's default.
Sampling and optimiser are grpo's tiny-reasoner CPU settings, so the recipes compare with grpo.
"""

import dataclasses

from ..parts import PolicyLoss, Smoke
from ..parts.selfteach import EGRSD, SSOPD
from .grpo import GRPO

_SAME_AS_GRPO = (
    "group_size=8, sampling (T=0.8) and optimiser (AdamW lr 5e-5, cosine) as grpo, for equal-terms comparisons"
)

SSOPD_RECIPE = dataclasses.replace(
    GRPO,
    name="ssopd",
    summary="the model, shown its shortest correct answer, distils into its longest wrong one",
    details=(
        "GRPO + on-policy self-distillation: in each mixed group the model, shown its own shortest correct "
        "answer, teaches itself at every prefix of its longest wrong one (forward KL, frontier weight "
        "4p(1-p); `ssopd`)"
    ),
    doc="selfteach.md",
    smoke=Smoke(metrics=("distill/pairs", "distill/frontier_weight", "distill/ssopd_term")),
    paper="SSOPD: Self-Supervised On-Policy Distillation, arXiv 2605.17497",
    inferred=(
        "ssopd.coef=1.0 (lambda; not given in the abstract)",
        "ssopd.template: prompt + 'A correct solution: ' c* ' Now solve it yourself:' + newline + the prompt again "
        "(OPSD convention; the repeated prompt puts w*'s tokens after the problem as under the plain prompt)",
        "ssopd.divergence=forward_kl on the full vocabulary (options reverse_kl, jsd with ssopd.beta, ssopd.top_k, "
        "ssopd.clip); teacher = current weights without grad",
        "ssopd.frontier=4p(1-p) (option mixed = 1[0<p<1]); N_x = first-round prompts of the batch",
        "ssopd.max_prefix_tokens=null: every token of w* the loss sees is distilled",
        "the distribution is the policy tempered at sampling.temperature, as the policy loss's log-probs",
        "GRPO part unchanged: " + _SAME_AS_GRPO,
    ),
    ssopd=SSOPD(),
)

_EGRSD_INFERRED = (
    "egrsd.template: prompt + 'Reference solution: ' + the task's reference solution + ' Now solve it yourself:' "
    "+ newline + the prompt again (arithmetic: the demonstration)",
    "direction = the GRPO advantage A_i (egrsd.direction=sign for sign(A_i)); magnitude clip(exp(q - s), 1/5, 5) "
    "(egrsd.magnitude=abs for min(|q - s|, 5), the default before issue #26's measurement: 0.536 vs ratio's 0.651, "
    "grpo 0.633, 3 seeds; egrsd.cap); gate g_min + (1 - g_min) exp(-H / tau), g_min 0.1, tau 1 nat",
    "student log-prob s_t = the rollout's behaviour log-probs (detached; equal to the policy's before the update)",
    "loss: PPO-clip 0.2 with the token advantages, token-mean over the batch (1 / sum |y_i|)",
    "egrsd.alpha=0: no additive plain GRPO advantage",
    _SAME_AS_GRPO,
)

EGRSD_RECIPE = dataclasses.replace(
    GRPO,
    name="egrsd",
    summary="token advantages from a teacher shown the reference solution, gated by entropy",
    details=(
        "token advantages A x teacher-student disagreement x an entropy gate with a floor, the teacher being "
        "the model shown the reference solution (`egrsd`); `cl_egrsd` lets a high-entropy token whose next "
        "tokens are confident keep its weight (`egrsd.lookahead=8`)"
    ),
    doc="selfteach.md",
    smoke=Smoke(metrics=("egrsd/rows",)),
    paper="EGRSD: Respecting Self-Uncertainty in On-Policy Self-Distillation, arXiv 2605.13255",
    inferred=_EGRSD_INFERRED,
    loss=PolicyLoss(ratio="token", clip_low=0.2, clip_high=0.2, agg="token-mean"),
    egrsd=EGRSD(),
)

CL_EGRSD_RECIPE = dataclasses.replace(
    EGRSD_RECIPE,
    name="cl_egrsd",
    smoke=Smoke(metrics=("egrsd/rows",)),
    paper="CL-EGRSD (causal lookahead), arXiv 2605.13255",
    inferred=_EGRSD_INFERRED + ("egrsd.lookahead=8: the gate reads min(H_t, mean of the next 8 tokens' H)",),
    egrsd=EGRSD(lookahead=8),
)

SELFTEACH_RECIPES = (SSOPD_RECIPE, EGRSD_RECIPE, CL_EGRSD_RECIPE)
