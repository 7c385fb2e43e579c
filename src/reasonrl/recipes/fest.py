"""FEST: FEw-ShoT demonstration-guided RLVR (arXiv 2605.15012): GRPO plus a decaying DPO term on a few demos.

Each step draws a few demonstrations from a small fixed set (its own cycled loader), samples G
rollouts of each demo prompt, and adds ``alpha_e * DPO(demo as chosen, an incorrect rollout as
rejected)`` to GRPO's loss, ``alpha_e`` halving with every completed pass over the demos. Only the
abstract and a summary were available (shared/specs/distill-and-data.md section 5): the DPO form
is from the summary, the decay form and every constant [inferred], each a ``fest.*`` option.
"""

import dataclasses

from ..parts import Smoke
from ..parts.fest import FEST
from .grpo import GRPO

FEST_RECIPE = dataclasses.replace(
    GRPO,
    name="fest",
    summary="a decaying DPO term on a few demonstrations",
    details=(
        "GRPO + a decaying sigmoid-DPO term on a few demonstrations (demo = chosen, an incorrect own rollout "
        "= rejected, reference = the initial model; weight halves per pass over the demos; "
        "`fest.sup_loss=sft` for an SFT term); equals TRL's DPO loss within 1e-6"
    ),
    doc="fest.md",
    smoke=Smoke(
        metrics=("fest/demos", "fest/pairs", "fest/alpha", "fest/sup_term"),
        changes=(("fest.n_demos", 2), ("fest.demos_per_step", 2)),
    ),
    paper="FEST: FEw-ShoT demonstration-guided RLVR, arXiv 2605.15012",
    inferred=(
        "L = L_GRPO + alpha_e * L_sup; L_sup = sigmoid DPO, beta=0.1 (fest.beta), l(y) = sum of token log-probs "
        "(fest.length_norm=true: token mean)",
        "alpha_e = fest.coef * fest.gamma^e = 1 * 0.5^e, e = completed passes over the demos (fest.decay=linear|cosine "
        "reach 0 after fest.decay_passes=8 passes)",
        "reference = the frozen initial model (fest.reference=behaviour: the policy that sampled the step)",
        "demos: fest.n_demos=32 of the task's own demonstrations (paper: 128 from an SFT set; fest.demos=FILE.jsonl "
        "for your own), fest.demos_per_step=4, reshuffled every pass; drawn apart from the RL prompt stream",
        "rejected: the first incorrect of G=group_size fresh rollouts of the demo prompt (fest.negatives=all: every "
        "incorrect one); a demo whose rollouts are all correct gives no pair (fest.all_correct=lowest_likelihood: "
        "its least likely rollout); the demo rollouts do not enter the GRPO term",
        "the term is the mean over the step's pairs, log-probs untempered (fest.temperature=1); "
        "fest.sup_loss=sft replaces DPO by the demos' token-mean NLL (no rollouts, no reference)",
        "GRPO part unchanged: group_size=8, sampling (T=0.8) and optimiser (AdamW lr 5e-5, cosine) as grpo",
    ),
    fest=FEST(),
)
