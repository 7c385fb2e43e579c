"""Distribution matching: FlowRL (arXiv 2509.15207), DISA (arXiv 2605.17295), TraFL (arXiv 2605.13935),
and d1's diffu-GRPO (arXiv 2504.12216) as TraFL's reward-maximising baseline. Spec: shared/specs/objectives.md
sections 1.5, 7 and 8; the objective's maths in reasonrl.losses.balance, the part in reasonrl.parts.balance."""

from ..parts import KL, Advantage, Diffusion, PolicyLoss, Recipe, TrajectoryBalance, Smoke, POLICY_METRICS
from .grpo import TINY_CPU_OPTIM, TINY_CPU_SAMPLING

_SHARED = (
    "r_hat is the recipe's GRPO advantage (group z-score, unbiased std), as FlowRL passes it",
    "sampling, optimiser and G = 8 as grpo (tuned for the tiny reasoner on CPU), so the comparison is like for like",
    "the log-probs are tempered by sampling.temperature in the residual, for the policy and the reference alike",
)

# FlowRL: the trajectory-balance residual with a learned log Z(x), beta 15, w the clipped sequence ratio
FLOWRL = Recipe(
    name="flowrl",
    summary=(
        "distribution matching: trajectory balance to `pi_ref exp(beta r)` with a learned / an offline frozen log Z"
    ),
    doc="distmatch.md",
    smoke=Smoke(metrics=("balance/loss_term", "balance/log_z_term", "balance/w_term", "balance/delta_std")),
    paper="FlowRL: Matching Reward Distributions via Flow Balance, arXiv 2509.15207 (verl recipe/flowrl)",
    inferred=_SHARED
    + (
        "w = clip(exp(sum_t (l - l_old)), 0.8, 1.2): the spec's eps 0.2 (FlowRL's code: 0.2 / 0.28)",
        "the log Z head (3-layer MLP on the mean-pooled prompt hidden state) trains in its own AdamW group at lr 1e-3; "
        "FlowRL's head shares the policy's lr (1e-6 at 7B), too slow for a fresh head beside a tiny policy",
        "the head's input is a forward of the prompt alone (a causal LM's prompt states do not see the completion), "
        "with grad into the backbone as FlowRL's shared forward; dropout 0.1 (its draws follow the micro-batch split)",
    ),
    advantage=Advantage("grpo", scale="group"),
    loss=None,
    kl=KL(coef=0.0),
    group_size=8,
    sampling=TINY_CPU_SAMPLING,
    optim=TINY_CPU_OPTIM,
    balance=TrajectoryBalance(),
)

# DISA: the same residual with a frozen, offline importance-sampled log Z_hat(x) and the raw reward
DISA = Recipe(
    name="disa",
    summary=(
        "distribution matching: trajectory balance to `pi_ref exp(beta r)` with a learned / an offline frozen log Z"
    ),
    doc="distmatch.md",
    smoke=Smoke(
        metrics=("balance/loss_term", "disa/missing", "disa/ess_mean", "disa/residual_prompt_abs"),
        changes=(("balance.proposals", 2),),
    ),  # the in-run table: 2 proposals per pool prompt
    paper="DISA: Offline Importance Sampling for Distribution-Matching LLM-RL, arXiv 2605.17295",
    inferred=_SHARED[1:]
    + (
        "r is the raw verifier reward in {0, 1} in the residual and in Z (group normalisation is not available "
        "offline), N = 8 proposals per prompt, w clipped to [0.8, 1.2] (spec section 7 (b))",
        "beta 1, not the spec's 15 (FlowRL's; balance.beta=15): measured, 3 seeds x 60 steps from the shipped base, "
        "beta 15 narrows the policy (held-out pass@64 0.900 -> 0.853, greedy 0.497 against grpo's 0.583 on the same "
        "pool) since a wrong answer's residual is ~beta wherever Z_hat saw a correct proposal; beta 1 gives greedy "
        "0.587, pass@64 0.930 (docs/distmatch.md)",
        "log Z_hat = logsumexp_n(lbar_ref - lbar_mu + beta r_n) - log N with length-normalised log-likelihoods, the "
        "residual's convention (balance.length_norm=false: sequence sums in both)",
        "without balance.table the offline stage runs in the run, before the first update, over data.pool=128 "
        "prompts with the initial policy (= the reference) as the proposal; `reasonrl disa estimate` writes a table "
        "from any proposal model",
    ),
    advantage=Advantage("grpo", scale="group"),
    loss=None,
    kl=KL(coef=0.0),
    group_size=8,
    sampling=TINY_CPU_SAMPLING,
    optim=TINY_CPU_OPTIM,
    balance=TrajectoryBalance(log_z="table", reward="raw", beta=1.0),
    run_defaults=(("data.pool", 128),),
)

_DIFFUSION = (
    "the policy is the shipped masked-diffusion LM (builtin:diffusion: a 2-layer bidirectional transformer warm-"
    "started by LLaDA's masked-token objective), sampled by LLaDA's low-confidence remasking, blocks of 8, two "
    "positions per step",
)

# TraFL: trajectory balance on a masked-diffusion LM with the ELBO surrogate (coupled masks) and a learned log Z
TRAFL = Recipe(
    name="trafl",
    summary="trajectory balance / GRPO on a tiny masked-diffusion LM (LLaDA sampler, ELBO surrogate)",
    doc="distmatch.md",
    smoke=Smoke(metrics=("balance/loss_term", "balance/log_z_term", "balance/logp_gap_term")),
    paper="TraFL: Beyond Mode-Seeking RL, trajectory flow balancing for diffusion LMs, arXiv 2605.13935",
    inferred=_SHARED
    + _DIFFUSION
    + (
        "lbar is the ELBO surrogate: K_mc = 1 draw per update, t ~ U(1e-3, 1] (LLaDA's eps), every canvas position "
        "masked with probability t, the same masks for the policy and the reference, normalised by the response length",
        "w = 1 (the spec's default: the old likelihoods of a diffusion LM are themselves noisy estimates)",
        "log Z: FlowRL's head on the prompt's hidden states beside a fully masked canvas, its own lr 1e-3",
    ),
    advantage=Advantage("grpo", scale="group"),
    loss=None,
    kl=KL(coef=0.0),
    group_size=8,
    sampling=TINY_CPU_SAMPLING,
    optim=TINY_CPU_OPTIM,
    balance=TrajectoryBalance(surrogate="elbo", weight="one"),
    diffusion=Diffusion(),
    run_defaults=(("model", "builtin:diffusion"),),
)

# diffu-GRPO (d1): GRPO on a masked-diffusion LM with d1's one-step per-token log-probs
DIFFU_GRPO = Recipe(
    name="diffu_grpo",
    summary="trajectory balance / GRPO on a tiny masked-diffusion LM (LLaDA sampler, ELBO surrogate)",
    doc="distmatch.md",
    smoke=Smoke(metrics=POLICY_METRICS + ("loss/kl",)),
    paper="d1: Scaling Reasoning in Diffusion LLMs via RL (diffu-GRPO), arXiv 2504.12216",
    inferred=_SHARED[1:]
    + _DIFFUSION
    + (
        "per-token log-probs are d1's one-step estimate, log p(y_j | x, whole completion masked); d1's random prompt "
        "masking (p 0.15, redrawn per inner update) is left out: with mu = 1 it only adds noise, and the sampler's "
        "behaviour log-probs would need the same masks",
        "mu = 1 (d1: 12 inner updates per batch, which its prompt masking regularises)",
        "KL to the reference, beta 0.04 with k3 (GRPO's value, which d1 keeps), so diffu_grpo and trafl both anchor "
        "to the warm start",
    ),
    advantage=Advantage("grpo", scale="group"),
    loss=PolicyLoss(ratio="token", clip_low=0.2, clip_high=0.2, agg="seq-mean-token-mean"),
    kl=KL(coef=0.04, estimator="k3"),
    group_size=8,
    sampling=TINY_CPU_SAMPLING,
    optim=TINY_CPU_OPTIM,
    diffusion=Diffusion(),
    run_defaults=(("model", "builtin:diffusion"),),
)

DISTMATCH_RECIPES = (FLOWRL, DISA, TRAFL, DIFFU_GRPO)
