"""CIPO: Correction-Oriented Policy Optimization (arXiv 2605.14539).

GRPO plus a second round each step: prompts the model sometimes (or always) fails are picked by
their group accuracy, one failed attempt of each becomes a correction prompt ("here is your
attempt; fix it"), G on-policy corrections are sampled, rewarded by the same verifier (a wrong one
repeating the failed answer gets -kappa) and trained with GRPO next to the ordinary groups, under
one token mean over the joint batch. The paper publishes no code: every threshold and constant of
:class:`~reasonrl.parts.Correction` is [inferred] (spec: /shared/specs/distill-and-data.md, section 6).
"""

import dataclasses

from ..parts import Correction, Smoke
from .grpo import GRPO

CIPO = dataclasses.replace(
    GRPO,
    name="cipo",
    summary="a round of corrections of the model's own failed attempts",
    details=(
        "a second round: prompts with accuracy in (0, 0.75] get their failed attempt shown back with a "
        "request to correct it; correction groups join the batch, a correction repeating the failed answer "
        "earns -0.5; adaptive replay ratio (`correction`)"
    ),
    doc="selfteach.md",
    smoke=Smoke(metrics=("cipo/selected", "cipo/groups", "cipo/rho")),
    paper="CIPO: Correction-Oriented Policy Optimization, arXiv 2605.14539",
    inferred=(
        "failure selection: group accuracy in (0, correction.p_max=0.75], all-wrong prompts with probability "
        "correction.q0=0.5, one failed rollout per prompt (m=1) drawn at random",
        "correction prompt (correction.template): prompt + 'Previous attempt:' + the attempt + the spec's instruction "
        "without its \\boxed{} clause, then the prompt again, so it ends as the task's prompt does",
        "G corrections per correction prompt (G_c = group_size); GRPO advantages within each correction group",
        "risk-averse shaping: a wrong correction repeating the failed attempt's final answer gets "
        "-correction.kappa=-0.5 (added to the verifier's reward), other wrong ones 0",
        "loss weight lambda_c = correction.weight = 1 on correction rows; loss.agg=token-mean over the joint batch",
        "adaptive replay: at most floor(rho * first-round groups) correction groups, correction.rho=0.5; a step "
        "whose correction accuracy is below correction.acc_floor=0.1 divides rho by correction.factor=2 (not below "
        "correction.rho_min=0.125), otherwise multiplies it back up to rho; when more prompts qualify than the cap, "
        "a uniform random subset is kept",
        "advantage, PPO clip 0.2, no KL, group_size=8, sampling (T=0.8) and optimiser as grpo",
    ),
    loss=dataclasses.replace(GRPO.loss, agg="token-mean"),  # PPO clip 0.2 as grpo
    correction=Correction(),
)
