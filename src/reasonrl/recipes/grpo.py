"""GRPO (DeepSeekMath, arXiv 2402.03300) and Dr. GRPO (Liu et al., arXiv 2503.20783)."""

from ..parts import KL, Advantage, Optim, PolicyLoss, Recipe, Sampling

# Tuned on the shipped tiny reasoner, 2 CPU cores (see the README): sampling at 0.8 keeps more
# groups informative than 1.0, and 5e-5 learns fastest per second among 3e-5, 5e-5 and 1e-4.
TINY_CPU_OPTIM = Optim(lr=5e-5)
TINY_CPU_SAMPLING = Sampling(temperature=0.8)

# GRPO: group z-score advantage, PPO clip 0.2, per-sequence token mean. The paper's KL (beta 0.04,
# k3) is off by default here, as in TRL and verl today; set kl.coef=0.04 for the original.
GRPO = Recipe(
    name="grpo",
    summary=(
        "group z-score advantage, PPO clip, per-sequence token mean; Dr. GRPO's mean-only advantage and "
        "constant normaliser"
    ),
    details="group z-score advantage, PPO clip 0.2, per-sequence token mean",
    paper="DeepSeekMath, arXiv 2402.03300",
    inferred=(
        "kl.coef=0 (paper: 0.04 with k3); modern defaults (TRL, verl) drop the KL term",
        "std is the unbiased (N-1) estimate, as torch.std in TRL/verl; advantage.unbiased=false for N",
        "group_size=8 (paper: 64; modern recipes 8-16)",
        "optim: lr 5e-5, AdamW betas (0.9, 0.99), 5 warmup steps, cosine to 10%: tuned for the tiny reasoner on CPU",
        "sampling.temperature=0.8 (TRL default 1.0): tuned for the tiny reasoner on CPU",
    ),
    advantage=Advantage("grpo", scale="group"),
    loss=PolicyLoss(ratio="token", clip_low=0.2, clip_high=0.2, agg="seq-mean-token-mean"),
    kl=KL(coef=0.0, estimator="k3"),
    group_size=8,
    sampling=TINY_CPU_SAMPLING,
    optim=TINY_CPU_OPTIM,
)

# Dr. GRPO: no std division (too-easy/hard groups are not up-weighted) and no 1/|y| (long wrong
# answers are not penalised less): a constant G * L_max normaliser, L_max = the generation budget.
DR_GRPO = Recipe(
    name="dr_grpo",
    summary=(
        "group z-score advantage, PPO clip, per-sequence token mean; Dr. GRPO's mean-only advantage and "
        "constant normaliser"
    ),
    details="mean-only advantage, constant `G * L_max` normaliser",
    paper="Understanding R1-Zero-like Training, arXiv 2503.20783",
    inferred=(
        "loss.norm_len defaults to the generation budget (max_new_tokens), as TRL's dr_grpo",
        "group_size=8, sampling and optimiser settings are the same as grpo here, so the two compare cleanly",
    ),
    advantage=Advantage("dr_grpo"),
    loss=PolicyLoss(ratio="token", clip_low=0.2, clip_high=0.2, agg="seq-mean-token-sum-norm"),
    kl=KL(coef=0.0),
    group_size=8,
    sampling=TINY_CPU_SAMPLING,
    optim=TINY_CPU_OPTIM,
)
