"""D2Evo: Dual Difficulty-aware self-Evolution (arXiv 2605.17037, ICML 2026; spec distill-and-data.md section 11).

Each iteration (``d2evo.iteration_steps`` steps) the Solver's pass rate on the real pool (``data.pool=N``)
is estimated without gradient, the medium-difficulty real problems become anchors, the same model in
a Questioner role prompt writes G new problems per anchor, rewarded by R_Q (target difficulty 0.5,
minus novelty-penalised similarity; invalid -1), and the Solver trains with GRPO on the anchors plus
the accepted generated problems (majority pseudo-labels). The paper publishes no code: every
formula and constant of :class:`~reasonrl.parts.D2Evo` is [inferred].
"""

import dataclasses

from ..parts import D2Evo, Smoke
from .grpo import GRPO

D2EVO = dataclasses.replace(
    GRPO,
    name="d2evo",
    summary="medium-difficulty anchors and a Questioner writing new problems",
    details=(
        "a selector that keeps medium-difficulty real prompts (pass rate in [0.2, 0.8]) as anchors, plus a "
        "Questioner round on the same weights writing new problems rewarded for landing at p* = 0.5 and for "
        "novelty; accepted problems (majority pseudo-label, share >= 0.3) join the pool"
    ),
    doc="d2evo.md",
    smoke=Smoke(
        metrics=("d2evo/anchors", "d2evo/pool_size", "d2evo/iteration"),
        changes=(("d2evo.estimate_samples", 2), ("d2evo.solver_samples", 2), ("d2evo.anchors_per_step", 1)),
    ),
    paper="D2Evo: Dual Difficulty-aware self-Evolution, arXiv 2605.17037",
    inferred=(
        "needs a finite real pool: data.pool=N (the paper: < 2K real problems); the command line uses data.pool=128 "
        "unless given (the pool of the measured 3-seed compares)",
        "pass-rate estimation: d2evo.estimate_samples=8 Solver samples per real problem against gold, once per "
        "iteration of d2evo.iteration_steps=10 steps, at the iteration's first step, before its rollouts",
        "anchors: p_hat in [d2evo.p_lo, d2evo.p_hi] = [0.2, 0.8]; only anchors get first-round Solver rollouts "
        "(every pool item while no anchor exists)",
        "Questioner = the same weights with a role prompt (d2evo.template: an instruction, then the anchor's prompt); "
        "d2evo.anchors_per_step=4 anchors per step, G_Q = group_size = 4 questions each",
        "R_Q = 1[valid] (1 - 2|p_hat - 0.5|) - 0.5 * sim(q', anchor), invalid -1; sim = character 3-gram Jaccard "
        "(d2evo.ngram)",
        "a question is read by the task (arithmetic: the longest leading 'a+b' of the text, d2evo.parse=prefix; "
        "operands within the task's digit limits); its Solver answers it d2evo.solver_samples=8 times",
        "labels: majority vote, p_hat = the majority's share of all samples, valid at share >= d2evo.floor=0.3 "
        "(d2evo.use_gold=true: the computed answer and the true pass rate instead)",
        "accepted: valid, p_hat in the band, not a real pool problem, not in the task's held-out split; they join "
        "the next iteration's pool only (older generated problems leave)",
        "Solver groups on generated problems: round(first-round groups * generated / anchors) per step",
        "joint training: the Questioner's and the Solver's groups in one update, GRPO within each group, "
        "Questioner rows weighted d2evo.weight=1",
        "group_size=4 for both roles (the spec's G_Q; one batch holds both), other settings as grpo",
    ),
    group_size=4,
    d2evo=D2Evo(),
    run_defaults=(("data.pool", 128),),
)
