"""PopuLoRA: population-based asymmetric self-play with LoRA adapters (teachers propose AZR program tasks,
matched students solve them; ratings, PFSP matchmaking and same-rank PBT).

Spec: shared/specs/envs-selfplay-eval.md section 4 (the abstract and summaries fix the roles, the AZR base,
TrueSkill-based PFSP, 4 + 4 adapters and weight-space operators; the formulas are the spec's). The part is
:class:`~reasonrl.parts.PopuLoRA`; the program world, prompts and grading are the ``azr`` task. Needs
``lora.r > 0``: the command line uses ``lora.r=8`` unless given.
"""

import dataclasses

from ..parts import PopuLoRA, Smoke
from .azr import AZR_RECIPE

POPULORA_RECIPE = dataclasses.replace(
    AZR_RECIPE,
    name="populora",
    summary="LoRA teachers propose AZR tasks for PFSP-matched LoRA students on one backbone; ratings; same-rank PBT",
    doc="selfplay.md",
    smoke=Smoke(
        "azr",
        metrics=(
            "populora/games",
            "populora/teacher_reward",
            "populora/buckets",
            "populora/pbt_replaced",
            "populora/skill_t0",
        ),
        changes=(
            ("populora.teachers", 2),
            ("populora.students", 2),
            ("populora.estimate_samples", 2),
            ("populora.types", "deduction"),
            ("populora.pbt_every", 1),
            ("populora.pbt_frac", 0.5),
        ),
    ),  # two of each, PBT every step
    paper="PopuLoRA: population-based asymmetric self-play with LoRA adapters (teachers and students on one "
    "frozen base; the spec's section 4)",
    inferred=(
        "4 teachers + 4 students (the paper's best setup) as LoRA adapters on the run's model (lora.* settings, each "
        "its own init seed); student s0 is peft's 'default' adapter, the one the trainer's evaluation reads",
        "the game is AZR's program world with AZR's validation, sandbox, format shaping and s_hat estimate "
        "(populora.estimate_samples=4 attempts of the matched student); teacher reward 1 - s_hat, 0 when s_hat = 0 "
        "(populora.zero_when_unsolved; the pure zero-sum reading gives 1), -0.5 invalid, -1 bad format",
        "each step: populora.proposals=1 proposal prompt per teacher per type (G=4 proposals each), conditioned on "
        "the teacher's own valid tasks; the students' items go round-robin by task position, each student picking "
        "a teacher by PFSP and one of its tasks",
        "ratings: openskill's Thurstone-Mosteller full model set to TrueSkill's 2-player update (epsilon 0, gamma 1), "
        "mu0 25, sigma0 25/3, beta 25/6, tau 25/300; every student attempt at a teacher's task is a game, a task's "
        "estimate attempts played wins first",
        "PFSP weight p(1 - p) on the predicted win probability, from both sides",
        "PBT every populora.pbt_every=10 steps per sub-population: the bottom floor(0.25 N) by mu - 3 sigma replaced "
        "by an offspring of the top max(2, n) survivors, the operator drawn uniformly from Gaussian mutation "
        "(sigma_m 0.1, absolute 1e-3 for a zero factor), spectral mutation (sigma_m 0.1), module-wise crossover, "
        "interpolation crossover (a 0.5) via QR + SVD to rank r; the offspring keeps its first parent's mu with "
        "sigma raised to >= 25/6 and a fresh AdamW state; a replaced teacher takes a copy of that parent's task "
        "buffers, relabelled as its own (populora.pbt_buffers=parent; fresh: AZR's seed; keep: the loser's)",
        "advantages: REINFORCE++ within each (member, role, type) bucket (TRR++ per adapter); one AdamW over every "
        "adapter (an adapter without rows in a step gets no update), a joint gradient-norm clip",
        "group_size=4, no KL, sampling and optimiser as the azr recipe",
    ),
    azr=None,
    populora=PopuLoRA(),
    run_defaults=(("task", "azr"), ("lora.r", 8)),
)
