"""PPO with a learned critic and GAE (Schulman et al. 2017, arXiv 1707.06347; GAE arXiv 1506.02438), as
verl, OpenRLHF and TRL run it on language models, and GRLO (RLHF from a base model with a
Bradley-Terry reward model, spec envs-selfplay-eval section 8). The critic part
(:mod:`reasonrl.parts.critic`) supplies the baseline, so the policy loss is the existing PPO-clip
on per-token GAE advantages.
"""

import dataclasses

from ..models.reward_model import RMReward
from ..parts import KL, Advantage, Critic, Optim, PolicyLoss, Recipe, Smoke
from .grpo import TINY_CPU_OPTIM, TINY_CPU_SAMPLING

PPO = Recipe(
    name="ppo",
    summary=(
        "a learned critic (separate model or value head) with GAE; GRLO: PPO from the base on a Bradley-Terry "
        "reward model's score, KL 0.5 to the start (the paper: none)"
    ),
    details=(
        "PPO-clip 0.2, token mean, a learned critic (a copy of the starting model with a value head, or "
        "`critic.model=head`) and GAE (gamma 1, lam 1, whitened, value clip 0.5), its own AdamW group (lr "
        "5e-4): [ppo.md](ppo.md)"
    ),
    doc="ppo.md",
    smoke=Smoke(
        metrics=("critic/value_loss_term", "critic/explained_var", "critic/vf_clip_frac", "grad_norm/critic.value")
    ),
    paper="PPO, arXiv 1707.06347, with GAE, arXiv 1506.02438 (verl's adv_estimator=gae)",
    inferred=(
        "GAE gamma=1, lam=1, advantages whitened over the batch's tokens, value clip 0.5: verl's defaults",
        "critic: a separate copy of the policy's starting weights with a fresh value head (critic.model=head: a "
        "value head on the policy's hidden states instead), its own AdamW group, lr 5e-4 = 10x the actor's 5e-5 "
        "(GRLO's critic/actor ratio, 1e-5 / 1e-6, on the tiny reasoner's tuned actor lr), its own clip 1.0",
        "the sequence reward on the last trainable token; the estimator is REINFORCE's A = r, which the critic's "
        "GAE replaces (advantage.estimator=reinforce), so group_size=1 is allowed",
        "group_size=8 and one optimiser step per batch as grpo (verl's PPO samples n=1 per prompt): `compare` "
        "with grpo then isolates the critic; token-mean aggregation (verl loss_agg_mode), PPO clip 0.2",
        "no KL (verl: use_kl_in_reward=False, use_kl_loss=False), no critic warm-up (critic.warmup_steps)",
        "sampling (T=0.8) and actor optimiser (AdamW lr 5e-5, cosine) as grpo",
    ),
    advantage=Advantage("reinforce"),
    loss=PolicyLoss(ratio="token", clip_low=0.2, clip_high=0.2, agg="token-mean"),
    kl=KL(coef=0.0),
    group_size=8,
    sampling=TINY_CPU_SAMPLING,
    optim=TINY_CPU_OPTIM,
    critic=Critic(),
)

# GRLO: PPO + GAE (gamma 1, lam 1) from a base model, rewarded by a BT reward model alone, n = 1; a KL anchor
# the paper does not use (measured: without it a weak reward model is hacked, see the inferred list)
GRLO = dataclasses.replace(
    PPO,
    name="grlo",
    summary=(
        "a learned critic (separate model or value head) with GAE; GRLO: PPO from the base on a Bradley-Terry "
        "reward model's score, KL 0.5 to the start (the paper: none)"
    ),
    details=(
        "`ppo` from the base with G = 1 on the `explain` task, reward = a Bradley-Terry reward model's score "
        "alone (`rewards.rm.model=DIR`), k3 KL 0.5 to the start (the paper: none, `kl.coef=0`), 4 PPO "
        "mini-batches: [ppo.md](ppo.md)"
    ),
    doc="ppo.md",
    smoke=Smoke("explain", (("max_digits", 1),), ("critic/value_loss_term", "reward/rm/score", "reward/rm/mean")),
    paper="GRLO: RLHF from zero in open-ended environments (SJY8460/GRLO, train.sh)",
    inferred=(
        "reward: the score of a Bradley-Terry reward model (rewards.rm.model=DIR, `reasonrl rm train`; the paper: "
        "Skywork-Reward-V2-Llama-3.1-8B) on the last response token, the task's verifier weighted 0 (its accuracy "
        "is logged only); style_mix's length control is unreleased: off (rewards.rm.length_coef=0), the spec's "
        "inferred form r - coef * max(0, L - L0) / L0 behind rewards.rm.length_coef > 0",
        "task: explain (open-ended facts to explain in plain-text prompts, no chat template: a 'zero' run on the "
        "base); the transfer reading evaluates arithmetic (benchmarks/learning/grlo_transfer.py)",
        "verl PPO: gamma = lam = 1, whitened GAE advantages, value clip 0.5, rollout n = 1 (group_size=1), 4 "
        "optimiser steps per batch (train batch 1024 / PPO mini-batch 256)",
        "KL to the start, k3, coef 0.5 (the paper: none; kl.coef=0 restores it): with the tiny reasoner's 0.71-"
        "accurate reward model and no KL the policy hacks the reward (held-out arithmetic 0.420 -> 0.115 +- 0.014 over "
        "3 seeds x 60 steps); with 0.5 it keeps 0.372 +- 0.016 (benchmarks/learning/grlo_transfer.py, docs/ppo.md)",
        "batch: 64 prompts x 1 sample per step (the samples of grpo's 8 x 8) on the tiny reasoner",
        "lr: actor 2e-5, critic 2e-4 (the paper's 1e-6 / 1e-5: the same 10x ratio; the actor's 5e-5 of grpo "
        "over 2.5 since each batch takes 4 optimiser steps here), critic a separate copy of the starting model",
        "sampling (T=0.8) as grpo; 15 epochs over 5K prompts in the paper: here a stream of explain problems",
    ),
    group_size=1,
    task_reward_weight=0.0,
    extra_rewards=((RMReward(), 1.0),),
    optim=Optim(lr=2e-5, minibatches=4),
    critic=Critic(lr=2e-4),
    kl=KL(coef=0.5),
    run_defaults=(("task", "explain"), ("prompts_per_step", 64)),
)
