"""VPD: Variational Policy Distillation (arXiv 2605.15113).

Learning from language feedback as variational EM on one backbone with two LoRA adapters: the
teacher q_phi(y | x, f), shown a student attempt and the verifier's feedback on it, is refined by
GRPO on outcomes inside an adaptive trust region around the student (E-step); the student
pi_theta(y | x) is distilled toward the teacher by reverse KL on its own rollouts, beside its own
GRPO term (M-step). The paper was available as abstract and introduction only: every loss and
default is [inferred] (shared/specs/distill-and-data.md section 4) and a ``vpd.*`` option.
Needs ``lora.r > 0``: the command line uses ``lora.r=8`` unless given. With the built-in arithmetic task the default
feedback is the task's critique, computed against the gold working (see docs/vpd.md).
"""

import dataclasses

from ..parts import VPD, Smoke
from .grpo import GRPO

VPD_RECIPE = dataclasses.replace(
    GRPO,
    name="vpd",
    summary="a feedback-reading teacher adapter and the student adapter trained by variational EM",
    details=(
        "two LoRA adapters on one backbone: a teacher adapter samples under prompt + an attempt + feedback "
        "(E-step: GRPO + beta KL to the student, beta by an adaptive trust-region controller), the student is "
        "distilled toward it by reverse KL on its own rollouts (M-step); needs `lora.r > 0`"
    ),
    doc="vpd.md",
    smoke=Smoke(metrics=("vpd/beta", "vpd/teacher_accuracy", "vpd/e_loss_term", "vpd/m_loss_term")),
    paper="VPD: Variational Policy Distillation, arXiv 2605.15113",
    inferred=(
        "teacher and student: two LoRA adapters (lora.* settings, the teacher's own init seed) on one frozen "
        "backbone; lora.r > 0 required (the command line uses lora.r=8, the measured compare's rank, unless given)",
        "feedback (vpd.feedback=critique): the first line of the task's stepwise critique of one student attempt "
        "of this step (vpd.attempt=first_wrong: the lowest-index wrong rollout, else row 0); arithmetic's critique "
        "uses the gold working; vpd.feedback=verdict gives only correct/wrong",
        "teacher prompt (vpd.template): prompt + 'Previous attempt:' + attempt + 'Feedback: ' + feedback + the "
        "prompt again, so it ends as the task's prompt",
        "E-step: G teacher samples per prompt, GRPO advantages within each teacher group, PPO clip vpd.clip=0.2, "
        "seq-mean-token-mean, plus beta * token-mean KL(q(.|x,f) || sg pi(.|x)), exact over the vocabulary "
        "(vpd.e_kl=k3 for the sampled-token estimate)",
        "controller: beta0=0.1, target delta=0.05 nats/token, x2 above 1.5 delta, /2 below delta/1.5, measured as "
        "the k1 KL on this step's teacher samples and applied from the next step; beta kept in [1e-3, 10]",
        "M-step: token-mean reverse KL(pi(.|x) || sg q(.|x,f)) on the student's rows, vpd.m_coef=1 "
        "(vpd.m_divergence=forward_kl | sampled)",
        "student GRPO term weight alpha=1 (vpd.alpha); E-step weight vpd.e_coef=1",
        "schedule: E and M in the same optimiser step (disjoint adapters; each reads the other as at the step's "
        "start), one AdamW over both adapters with a joint gradient-norm clip (the spec's k_E = k_M = 1)",
        "group_size=8, sampling (T=0.8) and optimiser (AdamW lr 5e-5, cosine) as grpo",
    ),
    vpd=VPD(),
    run_defaults=(("lora.r", 8),),
)
