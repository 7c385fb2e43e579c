"""PPO with a learned critic and GAE (Schulman et al. 2017, arXiv 1707.06347; GAE arXiv 1506.02438), as
verl, OpenRLHF and TRL run it on language models. The critic part (:mod:`reasonrl.parts.critic`)
supplies the baseline, so the policy loss is the existing PPO-clip on per-token GAE advantages.
"""
from ..parts import KL, Advantage, Critic, PolicyLoss, Recipe
from .grpo import TINY_CPU_OPTIM, TINY_CPU_SAMPLING

PPO = Recipe(
    name="ppo",
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
