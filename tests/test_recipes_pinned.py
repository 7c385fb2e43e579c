"""Every registered recipe's parts and key numbers, pinned by hand.

The table below is written from the papers and the recipe docstrings (src/reasonrl/recipes/*.py),
not dumped from the code, so a changed default fails here and must be made on purpose (and the
row updated, with its source). A recipe registered without a row fails too.

Fields pinned: only those that define each method. Deliberately left out: Veto's relaxed band
(its clip_low / clip_high may become tied to the loss clip), the SAGE knobs of recipes without a
guide, Steering's contrastive texts beyond their count (tested below), and any option being added
concurrently (Steering alphas/anneal, KL schedules, GroupFilter.max_rounds=None). A part (a registered
recipe part: its config section) is pinned by the options its row names, so a new part needs no entry
here beyond the rows of the recipes that use it.
"""

import dataclasses
import json
import re

import pytest

from reasonrl.parts import PART_TYPES
from reasonrl.recipes import RECIPES
from reasonrl.rewards.base import reward_name

# The grpo base every recipe builds on (src/reasonrl/recipes/grpo.py): group z-score advantage,
# PPO clip 0.2 on the token ratio, per-sequence token mean (DeepSeekMath, arXiv 2402.03300), KL off
# (TRL/verl defaults), G = 8, and the tiny-reasoner CPU settings: T = 0.8, AdamW lr 5e-5, one pass,
# one optimiser step per batch.
GRPO_ROW = {
    "advantage": ("grpo", "group"),  # (estimator, scale)
    "loss": ("token", 0.2, 0.2, None, "clip", "seq-mean-token-mean", None),
    # ^ (ratio level, clip_low, clip_high, dual_clip, trust_region, agg, norm_len)
    "kl": (0.0, "k3", None),  # (coef, estimator, guide)
    "sage": None,  # the SAGE guide's (ratio, threshold, q_min, q_max), only where kl.guide is set
    "entropy_coef": 0.0,
    "group_size": 8,
    "temperature": 0.8,
    "optim": (5e-5, 1, 1),  # (lr, mu, minibatches)
    "task_reward_weight": 1.0,
    "mask_truncated": False,
    "group_filter": None,  # (metric, max_rounds)
    "stages": None,  # count
    "veto": None,  # (trigger, include_trigger)
    "shapers": (),  # ((type, {option: value}), ...)
    "extra_rewards": (),  # ((type, weight, {option: value}), ...)
    "aux_losses": (),  # type names
    "selector": None,  # LZE's (selection_ratio, min_selection_ratio, ema_decay, alpha, d_min, jitter, warmup epochs,
    # prune, prune_streak, replay_frac)
    "run_defaults": {},  # run settings the recipe brings to the command line
    # every registered part (a config section: reasonrl.parts.PART_TYPES): None where the recipe has none; a row
    # pins a part as {option: value} for the options that define the method (only those are compared)
    **{key: None for key in PART_TYPES},
}


def row(**changes):
    unknown = set(changes) - set(GRPO_ROW)
    assert not unknown, f"table typo: {unknown}"
    return {**GRPO_ROW, **changes}


# DAPO (arXiv 2503.14476): clip-higher 0.2 / 0.28, token-level mean, dynamic sampling on raw
# accuracy (3 generation rounds, verl's max_num_gen_batches), soft overlong punishment over the last
# 20% of the budget (paper: 4096 of 20480), weighted 0.5 against the 0/1 correctness.
DAPO_ROW = row(
    loss=("token", 0.2, 0.28, None, "clip", "token-mean", None),
    group_filter=("accuracy", 3),
    extra_rewards=(("OverlongPenalty", 0.5, {"cache_frac": 0.2, "max_len": None, "cache_len": None}),),
)

TABLE = {
    "grpo": row(),
    # Dr. GRPO (arXiv 2503.20783): no std division, constant G * L_max normaliser (norm_len None = the budget)
    "dr_grpo": row(
        advantage=("dr_grpo", "group"), loss=("token", 0.2, 0.2, None, "clip", "seq-mean-token-sum-norm", None)
    ),
    # mismatched wrong drafts (arXiv 2605.17314, spec distill-and-data.md 9): Dr. GRPO on prompts with another
    # problem's wrong draft; derangement seed 0, prompt cap 3072 tokens, the paper's template
    "drafts": row(
        advantage=("dr_grpo", "group"),
        loss=("token", 0.2, 0.2, None, "clip", "seq-mean-token-sum-norm", None),
        drafts=dict(mode="mismatched_wrong", seed=0, max_prompt_tokens=3072),
    ),
    "dapo": DAPO_ROW,
    # GSPO (arXiv 2507.18071): one length-normalised ratio per response, clip 3e-4 / 4e-4 (section 5.1),
    # the batch split into minibatches (2 here) so the sequence clip acts off-policy
    "gspo": row(loss=("sequence", 3e-4, 4e-4, None, "clip", "seq-mean-token-mean", None), optim=(5e-5, 1, 2)),
    # RLOO (arXiv 2402.14740): leave-one-out baseline, sequence log-likelihood (token sum), PPO clip 0.2 (TRL)
    "rloo": row(advantage=("rloo", "group"), loss=("token", 0.2, 0.2, None, "clip", "seq-mean-token-sum", None)),
    # REINFORCE++ (arXiv 2501.03262): batch-normalised advantage, token mean, KL off
    "reinforce_pp": row(
        advantage=("reinforce_pp", "group"), loss=("token", 0.2, 0.2, None, "clip", "token-mean", None)
    ),
    # CISPO (MiniMax-M1, arXiv 2506.13585): the detached IS weight is clipped in DAPO's band [0.8, 1.28]
    "cispo": row(loss=("token", 0.2, 0.28, None, "cispo", "token-mean", None)),
    # EDAS (arXiv 2605.17333) on DAPO: lambda = n^gamma / mean, gamma 1, unparsed answers one cluster, no clip
    "edas": {
        **DAPO_ROW,
        "shapers": (("EDAS", {"gamma": 1.0, "none_policy": "cluster", "lambda_min": None, "lambda_max": None}),),
    },
    # Mu-GRPO (arXiv 2605.17570): 4 generate-then-train stages, relaxed band [0.5, 2.0], token mean, the
    # negative-advantage veto triggered when a ratio leaves the band, trigger token included
    "mu_grpo": row(loss=("token", 0.5, 1.0, None, "clip", "token-mean", None), stages=4, veto=("out_of_band", True)),
    # SAGE (arXiv 2605.18864, official code): beta 0.05 k3 anchored at q * pi_ref, branch guide
    # q = clamp(1 + 0.3 relu(H - 1.2), 0.6, 1.4)
    "sage": row(kl=(0.05, "k3", "branch"), sage=(0.3, 1.2, 0.6, 1.4)),
    # CorR-PO (arXiv 2605.17770): reward bonus -0.1 * Pearson(H, logit-grad norm), inversion sign, weight 1
    "corr_po": row(
        extra_rewards=(("CorrBonus", 1.0, {"coef": 0.1, "sign": "inversion", "method": "pearson", "min_tokens": 3}),)
    ),
    # TEMPO (arXiv 2605.18843): the two-mode reward replaces the verifier's; per-response modes, leak
    # penalty -k/max(n, 1), k_cap 5, tau 1%, claims checker, no min_claims
    "tempo": row(
        task_reward_weight=0.0,
        extra_rewards=(
            (
                "TempoReward",
                1.0,
                {
                    "leak_penalty": "fraction",
                    "k_cap": 5,
                    "mode_schedule": "per_response",
                    "tau": 0.01,
                    "min_claims": 0,
                    "latch": False,
                },
            ),
        ),
    ),
    # SAPO (arXiv 2605.17648): per-step group-relative advantages by position match, 0 outside steps
    "sapo": row(shapers=(("StepCredit", {"mode": "position_match", "outside": "zero"}),)),
    # SSPO (arXiv 2605.17308): R = 1 x format + 1 x Jaccard, no gate, strict vocabulary; replaces the verifier
    "sspo": row(
        task_reward_weight=0.0,
        extra_rewards=(
            ("SetReward", 1.0, {"metric": "jaccard", "w_fmt": 1.0, "w_set": 1.0, "gate": False, "strict": True}),
        ),
    ),
    # CodeThinker (arXiv 2605.17958): R = 1[c >= 0.5] x outcome + 0.5 x c (precision); beam: half the group
    # sampled, the rest branched from the 2 best prefixes
    "codethinker": row(
        task_reward_weight=0.0,
        beam=dict(first_frac=0.5, k_max=2),
        extra_rewards=(
            ("ConsistencyReward", 1.0, {"tau": 0.5, "lambda_p": 0.5, "mode": "gated", "process": "precision"}),
        ),
    ),
    # VSPO (arXiv 2605.15604): steering at layer 2, intensities up to 0.6 of the residual norm, no IS
    # correction, 16 contrastive pairs; reward = task + 0.5 x the spaced-style behaviour
    # NudgeRL (arXiv 2605.15726, authors' config): 2 hints (the first two) x 4 rollouts = G 8, dropout 0.5,
    # adv_lbd 1.1, distill_coeff 0.1; PPO clip 0.2 / 0.2, no KL, per-sequence token mean (loss_type "grpo")
    "nudgerl": row(
        hints=dict(n_hints=2, per_hint=4, p_drop=0.5, sampler="sequential", adv_lambda=1.1, distill_coef=0.1)
    ),
    # CIPO (arXiv 2605.14539; thresholds [inferred], spec section 6): accuracy in (0, 0.75] picked, all-wrong
    # prompts with probability 0.5, -0.5 for a wrong correction repeating the failed answer, lambda_c 1, replay
    # ratio 0.5 halved (down to 1/8) while correction accuracy < 0.1; GRPO with token mean over the joint batch
    "cipo": row(
        loss=("token", 0.2, 0.2, None, "clip", "token-mean", None),
        correction=dict(p_max=0.75, q0=0.5, kappa=0.5, weight=1.0, rho=0.5, rho_min=0.125, acc_floor=0.1, factor=2.0),
    ),
    # STRIDE (arXiv 2605.18851, spec section 7, all [inferred]): the task's critique on the tiny reasoner, n_r = 4
    # continuations, harmless advantage, ratio clipped at c = 5, lambda_r = 1, eta = 0.5, n_v = 4, one
    # redirection per prompt per step (None)
    "stride": row(
        redirect=dict(
            critic="task", n_r=4, n_v=4, harmless=True, ratio=True, clip=5.0, lambda_r=1.0, eta=0.5, max_redirects=None
        )
    ),
    "vspo": row(
        steering=dict(layer=2, alpha_max=0.6, is_correction=False),
        extra_rewards=(("FormatRegex", 0.5, {"name": "spaced"}),),
    ),
    # Physics-R1 (spec envs-selfplay-eval 7(b): verl grpo + loss_mode gspo + reward_manager dapo): GSPO's sequence
    # ratio clipped 3e-4 / 4e-4, dynamic sampling on accuracy (3 rounds), the binary physics_match reward (rtol 1e-2,
    # atol 1e-6, DENSE_REWARD=0) replacing the verifier, overlong shaping over the last 20% unscaled (verl's DAPO
    # reward manager, penalty_factor 1.0), minibatches 2 as gspo
    "physics_r1": row(
        loss=("sequence", 3e-4, 4e-4, None, "clip", "seq-mean-token-mean", None),
        optim=(5e-5, 1, 2),
        group_filter=("accuracy", 3),
        task_reward_weight=0.0,
        extra_rewards=(
            ("PhysicsMatch", 1.0, {"rtol": 1e-2, "atol": 1e-6, "symbolic": False, "dense": False}),
            ("OverlongPenalty", 1.0, {"cache_frac": 0.2, "max_len": None, "cache_len": None}),
        ),
    ),
    # SSOPD (arXiv 2605.17497; spec section 1, all [inferred]): lambda 1, forward KL on the full vocabulary,
    # frontier weight 4p(1-p), no prefix cap; GRPO otherwise
    "ssopd": row(
        ssopd=dict(
            coef=1.0,
            divergence="forward_kl",
            frontier="4p(1-p)",
            max_prefix_tokens=None,
            clip=1.0,
            w_star="eos",
            teacher="live",
        )
    ),
    # EGRSD (arXiv 2605.13255; spec section 2, forms [inferred]): A_i x clip(exp(q - s), 1/5, 5) x gate (g_min 0.1,
    # tau 1), PPO-clip 0.2 with token-mean over the batch (1 / sum |y_i|), no additive GRPO share;
    # CL-EGRSD: lookahead window 8. Magnitude 'ratio' since issue #26 (3 seeds x 60 steps from the context-mix
    # warm start, recipe_health/egrsd_ctx.json: ratio 0.651 +- 0.050, the spec's inferred 'abs' 0.536 +- 0.023,
    # grpo 0.633 +- 0.053; alpha=1 0.627, tau=0.1 0.541)
    "egrsd": row(
        loss=("token", 0.2, 0.2, None, "clip", "token-mean", None),
        egrsd=dict(direction="advantage", magnitude="ratio", cap=5.0, g_min=0.1, tau=1.0, lookahead=0, alpha=0.0),
    ),
    # LZE (arXiv 2605.17003; spec section 10): the example scripts' ratio 0.4 and no warm-up, no std division;
    # the class defaults otherwise (min ratio 0.3, EMA 0.9, alpha 0.3, d_min 0.05, Gumbel 0.05, prune after 2
    # solved epochs, replay 10%)
    "lze": row(
        advantage=("grpo", "none"),
        selector=(0.4, 0.3, 0.9, 0.3, 0.05, 0.05, 0, True, 2, 0.1),
        run_defaults={"data.pool": 128},
    ),  # the pool of the measured 3-seed compares
    # D2Evo (arXiv 2605.17037; spec section 11, all [inferred]): n = 8 samples to estimate and to judge, band
    # [0.2, 0.8], p* 0.5, eta 0.5, invalid -1, majority floor 0.3 (no gold), character 3-grams; G_Q = G = 4,
    # 4 anchors per step, 10 steps per iteration, a question is the longest leading expression (ours)
    "d2evo": row(
        group_size=4,
        d2evo=dict(
            iteration_steps=10,
            estimate_samples=8,
            solver_samples=8,
            p_lo=0.2,
            p_hi=0.8,
            p_star=0.5,
            eta=0.5,
            invalid=-1.0,
            floor=0.3,
            use_gold=False,
            ngram=3,
            anchors_per_step=4,
            parse="prefix",
        ),
        run_defaults={"data.pool": 128},
    ),
    "cl_egrsd": row(
        loss=("token", 0.2, 0.2, None, "clip", "token-mean", None),
        egrsd=dict(direction="advantage", magnitude="ratio", cap=5.0, g_min=0.1, tau=1.0, lookahead=8, alpha=0.0),
    ),
    # TGPO (arXiv 2605.13230, released code helldog-star/TGPO): PPO-clip 0.2 with token-mean, entropy 0.001,
    # no KL; reg: lambda_0 0.002, delta 1e-5; adv: 0.02, 1e-4 (None = the variant's default, resolved in
    # TGPO.coef_at); RKL-OPD: log pi_T - log pi_old alone; KDRL: beta 0.002 on the k2 estimate
    "tgpo": row(
        loss=("token", 0.2, 0.2, None, "clip", "token-mean", None),
        entropy_coef=0.001,
        teacher=dict(model="builtin:teacher", offload=False),
        tgpo=dict(variant="reg", coef=None, decay=None, min_coef=0.0),
    ),
    "tgpo_adv": row(
        loss=("token", 0.2, 0.2, None, "clip", "token-mean", None),
        entropy_coef=0.001,
        teacher=dict(model="builtin:teacher", offload=False),
        tgpo=dict(variant="adv", coef=None, decay=None, min_coef=0.0),
    ),
    "rkl_opd": row(
        loss=("token", 0.2, 0.2, None, "clip", "token-mean", None),
        entropy_coef=0.001,
        teacher=dict(model="builtin:teacher", offload=False),
        rkl_opd=dict(coef=1.0, grpo_weight=0.0),
    ),
    "kdrl": row(
        loss=("token", 0.2, 0.2, None, "clip", "token-mean", None),
        entropy_coef=0.001,
        teacher=dict(model="builtin:teacher", offload=False),
        kdrl=dict(coef=0.002, estimator="k2"),
    ),
    # FEST (arXiv 2605.15012; spec section 5, constants [inferred]): alpha_0 = 1 halving per pass over the demos,
    # sigmoid DPO beta 0.1 on summed log-probs against the initial model; 32 demos, 4 a step, the first incorrect
    # rollout as rejected, all-correct demos skipped; GRPO otherwise
    "fest": row(
        fest=dict(
            coef=1.0,
            gamma=0.5,
            decay="exponential",
            beta=0.1,
            sup_loss="dpo",
            reference="initial",
            length_norm=False,
            n_demos=32,
            demos_per_step=4,
            negatives="one",
            all_correct="skip",
        )
    ),
    # VPD (arXiv 2605.15113; spec section 4, all [inferred]): the task's critique as feedback, beta0 0.1, target
    # 0.05 nats/token, x2 / /2 outside [delta/1.5, 1.5 delta], exact E-step KL, reverse-KL M-step weight 1, GRPO alpha 1
    "vpd": row(
        vpd=dict(
            feedback="critique",
            beta=0.1,
            target_kl=0.05,
            factor=2.0,
            band=1.5,
            e_kl="exact",
            m_divergence="reverse_kl",
            m_coef=1.0,
            alpha=1.0,
        ),
        run_defaults={"lora.r": 8},
    ),  # the rank of the measured compare
    # SU-01 (arXiv 2605.13301, spec section 13): GSPO eps 1e-3 / 1e-3, no KL, 4 optimizer steps per rollout batch,
    # zero-std filtering (3 rounds), refine prompts 20% and replay 25% of the batch from groups with mean reward < 0.5
    # (samples < 0.9) and successes above reward 0; buffer 256 and filtering of extra groups [inferred]
    "su01": row(
        loss=("sequence", 1e-3, 1e-3, None, "clip", "seq-mean-token-mean", None),
        optim=(5e-5, 1, 4),
        group_filter=("accuracy", 3),
        refine_replay=dict(
            refine_share=0.2,
            replay_share=0.25,
            mean_below=0.5,
            sample_below=0.9,
            min_reward=0.0,
            capacity=256,
            drop_zero_std=True,
        ),
    ),
    # AZR (arXiv 2505.03335, released code): TRR++ over REINFORCE++ (the estimator named, the part overrides it
    # by bucket), no KL, the solver's 1 / -0.5 / -1 format shaping as an extra reward of weight 1; the program
    # world's task; 2 proposal prompts per type, p_hat from 4 solver samples (code: 8), all three types
    "azr": row(
        advantage=("reinforce_pp", "group"),
        loss=("token", 0.2, 0.2, None, "clip", "token-mean", None),
        group_size=4,
        extra_rewards=(("AZRShaping", 1.0, {"wrong": -0.5, "bad_format": -1.0}),),
        azr=dict(proposals=2, estimate_samples=4, types="deduction,abduction,induction", capacity=512, min_inputs=4),
        run_defaults={"task": "azr"},
    ),
    # EvoEnv (spec section 2, [inferred] but for the four checks and the ten seeds): per-role TRR++, no KL; L5 from
    # 4 instances x 2 answers in [0.1, 0.8], learnability reward, the policy's review (3 votes), novelty tau 0.8
    # (the spec's 0.5 rejects the tiny model's short modules on their boilerplate), pool of 64, EMA 0.2, patience 3
    "evoenv": row(
        advantage=("reinforce_pp", "group"),
        loss=("token", 0.2, 0.2, None, "clip", "token-mean", None),
        group_size=4,
        evoenv=dict(
            proposals=2,
            estimate_instances=4,
            estimate_samples=2,
            p_lo=0.1,
            p_hi=0.8,
            reward="learnability",
            review="policy",
            review_samples=3,
            novelty_tau=0.8,
            capacity=64,
            ema=0.2,
            patience=3,
        ),
        run_defaults={"task": "evoenv"},
    ),
    # PopuLoRA (spec section 4): the paper's 4 + 4 adapters on AZR's game (the azr recipe's loss, shaping and G);
    # the teacher reward 1 - s_hat with AZR's 0 at s_hat = 0; TrueSkill's defaults (mu0 25, sigma0 25/3, beta 25/6,
    # tau 25/300); PFSP p(1-p); PBT [inferred]: every 10 steps the bottom quarter, the four operators, sigma_m 0.1,
    # a = 0.5, offspring sigma >= 25/6
    "populora": row(
        advantage=("reinforce_pp", "group"),
        loss=("token", 0.2, 0.2, None, "clip", "token-mean", None),
        group_size=4,
        extra_rewards=(("AZRShaping", 1.0, {"wrong": -0.5, "bad_format": -1.0}),),
        populora=dict(
            teachers=4,
            students=4,
            proposals=1,
            estimate_samples=4,
            types="deduction,abduction,induction",
            zero_when_unsolved=True,
            pfsp="balanced",
            pbt_every=10,
            pbt_frac=0.25,
            operators="gaussian,spectral,modulewise,svd",
            mutation_sigma=0.1,
            interp=0.5,
            offspring_sigma=25 / 6,
            mu0=25.0,
            sigma0=25 / 3,
            beta=25 / 6,
            tau=25 / 300,
        ),
        run_defaults={"task": "azr", "lora.r": 8},
    ),
    # prompt-policy RL (spec section 5, [inferred] but the structure): GRPO on the prompter, the shipped base as the
    # worker, one context, M = 4 instances, the task's hints as fragments, history of the 2 best and 2 worst of 64,
    # the failure critic, distillation weight 1; the prompter sampled at T = 2.0 [inferred, measured:
    # benchmarks/results/prompt_policy/oracle60_T2.json 3 of 3 seeds at 1.000 against 2 of 3 at T = 0.8 (oracle90.json);
    # ctxbase45_60_T2.json 0.623 against 0.493 at T = 0.8 (ctxbase45_60.json)]
    "prompt_policy": row(
        prompt_policy=dict(
            worker="base",
            contexts="task",
            instances=4,
            renderer="hints",
            k_top=2,
            k_bottom=2,
            capacity=64,
            critic="failures",
            distill_coef=1.0,
        ),
        temperature=2.0,
        run_defaults={"task": "arithmetic"},
    ),
    # PPO + GAE (arXiv 1707.06347, 1506.02438; verl's defaults): gamma = lam = 1, whitened advantages, value clip
    # 0.5, token-mean loss, no KL; a separate critic copied from the policy, lr 10x the actor's (GRLO's 1e-5 / 1e-6
    # on the tiny actor lr 5e-5); REINFORCE's A = r as the estimator the critic replaces; G = 8 as grpo
    "ppo": row(
        advantage=("reinforce", "group"),
        loss=("token", 0.2, 0.2, None, "clip", "token-mean", None),
        critic=dict(
            model="policy", lr=5e-4, gamma=1.0, lam=1.0, whiten=True, value_clip=0.5, vf_coef=1.0, warmup_steps=0
        ),
    ),
    # GRLO (spec envs-selfplay-eval 8 (b), train.sh): verl PPO + GAE gamma = lam = 1 from the base, n = 1, a BT
    # reward model's score alone (style_mix off), 4 PPO mini-batches per batch, actor / critic lr 1:10 (1e-6 / 1e-5
    # there; 2e-5 / 2e-4 on the tiny reasoner); k3 KL 0.5 to the start [inferred: the paper has none; measured, the
    # weak tiny reward model is hacked without it]
    "grlo": row(
        advantage=("reinforce", "group"),
        loss=("token", 0.2, 0.2, None, "clip", "token-mean", None),
        kl=(0.5, "k3", None),
        group_size=1,
        optim=(2e-5, 1, 4),
        task_reward_weight=0.0,
        extra_rewards=(("RMReward", 1.0, {"model": "", "length_coef": 0.0, "length_target": 64}),),
        critic=dict(
            model="policy", lr=2e-4, gamma=1.0, lam=1.0, whiten=True, value_clip=0.5, vf_coef=1.0, warmup_steps=0
        ),
        run_defaults={"task": "explain", "prompts_per_step": 64},
    ),
    # FlowRL (arXiv 2509.15207, verl recipe/flowrl): no policy loss, the trajectory-balance residual with beta 15 on
    # the GRPO advantage, token-mean log-probs, w clipped to the spec's [0.8, 1.2], a 3-layer log Z head (dropout
    # 0.1) with grad into the backbone; its own lr 1e-3 [inferred]
    "flowrl": row(
        loss=None,
        balance=dict(
            beta=15.0,
            reward="group",
            length_norm=True,
            weight="clip",
            clip_low=0.2,
            clip_high=0.2,
            log_z="head",
            z_lr=1e-3,
            z_layers=3,
            z_dropout=0.1,
            z_detach=False,
            proposals=8,
            missing="error",
            surrogate="token",
            mc=1,
            mask_t=None,
            t_min=1e-3,
        ),
    ),
    # DISA (arXiv 2605.17295, spec section 7): the same residual with the raw reward and a frozen table log Z_hat
    # estimated from N = 8 proposals (in the run over data.pool = 128 without balance.table); missing prompts fail;
    # beta 1
    # [inferred, measured: the spec's 15 (FlowRL's) narrows the policy on the raw {0, 1} reward, docs/distmatch.md]
    "disa": row(
        loss=None,
        balance=dict(
            beta=1.0,
            reward="raw",
            length_norm=True,
            weight="clip",
            clip_low=0.2,
            clip_high=0.2,
            log_z="table",
            z_lr=1e-3,
            z_layers=3,
            z_dropout=0.1,
            z_detach=False,
            proposals=8,
            missing="error",
            surrogate="token",
            mc=1,
            mask_t=None,
            t_min=1e-3,
        ),
        run_defaults={"data.pool": 128},
    ),
    # TraFL (arXiv 2605.13935, spec section 8): the residual on the masked-diffusion LM with the ELBO surrogate (K_mc 1,
    # t ~ U(1e-3, 1], coupled masks), w = 1, a learned log Z; the shipped diffusion model, its own sampler settings
    "trafl": row(
        loss=None,
        balance=dict(
            beta=15.0,
            reward="group",
            length_norm=True,
            weight="one",
            clip_low=0.2,
            clip_high=0.2,
            log_z="head",
            z_lr=1e-3,
            z_layers=3,
            z_dropout=0.1,
            z_detach=False,
            proposals=8,
            missing="error",
            surrogate="elbo",
            mc=1,
            mask_t=None,
            t_min=1e-3,
        ),
        diffusion=dict(steps=None, block_length=None, remasking=None),
        run_defaults={"model": "builtin:diffusion"},
    ),
    # CodeAct agent (spec envs-selfplay-eval 6, mechanics [inferred]: verl multi-turn, Search-R1): trajectory-level
    # GRPO over G = 8 episodes, DAPO-style token-mean with clip 0.2 / 0.28, no KL; 4 turns, observations of 256
    # tokens, context 2048, an episode cut by a cap scores 0; the FHIR task
    "codeact": row(
        loss=("token", 0.2, 0.28, None, "clip", "token-mean", None),
        episodes=dict(
            max_turns=4,
            max_turn_tokens=None,
            max_obs_tokens=256,
            max_context_tokens=2048,
            overflow_reward=0.0,
            turn_limit_reward=0.0,
        ),
        run_defaults={"task": "fhir"},
    ),
    # the same with the paper's reward: the LLM judge's verdict alone (backend set by the user), the verifier weight 0
    "codeact_judge": row(
        loss=("token", 0.2, 0.28, None, "clip", "token-mean", None),
        task_reward_weight=0.0,
        extra_rewards=(("JudgeReward", 1.0, {"backend": "", "mode": "verdict"}),),
        episodes=dict(
            max_turns=4,
            max_turn_tokens=None,
            max_obs_tokens=256,
            max_context_tokens=2048,
            overflow_reward=0.0,
            turn_limit_reward=0.0,
        ),
        run_defaults={"task": "fhir"},
    ),
    # diffu-GRPO (d1, arXiv 2504.12216): GRPO's clipped loss on the one-step per-token log-probs, KL 0.04 (k3) to the
    # warm start, on the shipped diffusion model
    "diffu_grpo": row(
        kl=(0.04, "k3", None),
        diffusion=dict(steps=None, block_length=None, remasking=None),
        run_defaults={"model": "builtin:diffusion"},
    ),
}


def _options(obj, names):
    return {k: getattr(obj, k) for k in names}


def _actual(recipe, expected):
    """The recipe's values for the fields of the table, read field by field (options: those the row names)."""
    r, loss, kl = recipe, recipe.loss, recipe.kl
    shapers = tuple((type(s).__name__, _options(s, opts)) for s, (_, opts) in zip(r.shapers, expected["shapers"]))
    shapers += tuple((type(s).__name__, {}) for s in r.shapers[len(expected["shapers"]) :])
    extras = tuple(
        (type(fn).__name__, w, _options(fn, opts))
        for (fn, w), (_, _, opts) in zip(r.extra_rewards, expected["extra_rewards"])
    )
    extras += tuple((type(fn).__name__, w, {}) for fn, w in r.extra_rewards[len(expected["extra_rewards"]) :])
    return {
        "advantage": (r.advantage.estimator, r.advantage.scale),
        "loss": None
        if loss is None
        else (loss.ratio, loss.clip_low, loss.clip_high, loss.dual_clip, loss.trust_region, loss.agg, loss.norm_len),
        "kl": (kl.coef, kl.estimator, kl.guide),
        "sage": None if kl.guide is None else (kl.ratio, kl.threshold, kl.q_min, kl.q_max),
        "entropy_coef": r.entropy_coef,
        "group_size": r.group_size,
        "temperature": r.sampling.temperature,
        "optim": (r.optim.lr, r.optim.mu, r.optim.minibatches),
        "task_reward_weight": r.task_reward_weight,
        "mask_truncated": r.mask_truncated,
        "group_filter": None if r.group_filter is None else (r.group_filter.metric, r.group_filter.max_rounds),
        "stages": None if r.stages is None else r.stages.count,
        "veto": None if loss is None or loss.veto is None else (loss.veto.trigger, loss.veto.include_trigger),
        "shapers": shapers,
        "extra_rewards": extras,
        "aux_losses": tuple(type(a).__name__ for a in r.aux_losses),
        "selector": None
        if r.selector is None
        else tuple(
            getattr(r.selector, k)
            for k in (
                "selection_ratio",
                "min_selection_ratio",
                "ema_decay",
                "alpha",
                "d_min",
                "jitter",
                "warmup_transition_epochs",
                "prune",
                "prune_streak",
                "replay_frac",
            )
        ),
        "run_defaults": dict(r.run_defaults),
        **{key: _part(r.parts.get(key), expected[key]) for key in PART_TYPES},
    }


def _part(part, expected):
    """A part's values of the options its row names (all its options where the row expects none)."""
    if part is None or expected is None:
        return part if part is None else dataclasses.asdict(part)
    return {k: getattr(part, k) for k in expected}


def test_every_registered_recipe_has_a_row_and_every_row_a_recipe():
    assert set(RECIPES) - set(TABLE) == set(), "a recipe is registered without a pinned row: add it to TABLE"
    assert set(TABLE) - set(RECIPES) == set(), "TABLE pins a recipe that is no longer registered"
    assert all(set(r) == set(GRPO_ROW) for r in TABLE.values())  # every row states every field
    assert all(r[k] is None or (isinstance(r[k], dict) and r[k]) for r in TABLE.values() for k in PART_TYPES)


@pytest.mark.parametrize("name", sorted(TABLE))
def test_recipe_matches_its_pinned_row(name):
    expected = TABLE[name]
    actual = _actual(RECIPES[name], expected)
    wrong = {k: (actual[k], expected[k]) for k in expected if actual[k] != expected[k]}
    assert not wrong, f"{name}: field -> (now, pinned): {wrong}"


def test_the_cli_listing_reports_the_pinned_numbers():
    # `reasonrl recipes --json` is what users read: it must agree with the table
    from typer.testing import CliRunner

    from reasonrl.cli import app

    listed = {r["name"]: r for r in json.loads(CliRunner().invoke(app, ["recipes", "--json"]).stdout)}
    assert set(listed) == set(TABLE)
    for name, exp in TABLE.items():
        got = listed[name]
        loss = got["loss"]
        assert (got["advantage"]["estimator"], got["advantage"]["scale"]) == exp["advantage"], name
        assert (
            None
            if loss is None
            else (
                loss["ratio"],
                loss["clip_low"],
                loss["clip_high"],
                loss["dual_clip"],
                loss["trust_region"],
                loss["agg"],
                loss["norm_len"],
            )
        ) == exp["loss"], name
        assert (got["kl"]["coef"], got["kl"]["estimator"], got["kl"]["guide"]) == exp["kl"], name
        assert (got["group_size"], got["sampling"]["temperature"], got["task_reward_weight"]) == (
            exp["group_size"],
            exp["temperature"],
            exp["task_reward_weight"],
        ), name
        assert (got["optim"]["lr"], got["optim"]["mu"], got["optim"]["minibatches"]) == exp["optim"], name
        assert (got["stages"] or {}).get("count") == exp["stages"], name
        assert len(got["shapers"]) == len(exp["shapers"]) and len(got["extra_rewards"]) == len(exp["extra_rewards"])
        # "<weight> x <reward>" in the listing
        assert [float(e.split(" x ")[0]) for e in got["extra_rewards"]] == [w for _, w, _ in exp["extra_rewards"]]


def test_extra_rewards_keep_their_config_names():
    # rewards.<name>.<option> config keys and the reward/<name>/* metrics are built from these names
    names = {n: [reward_name(fn) for fn, _ in r.extra_rewards] for n, r in RECIPES.items() if r.extra_rewards}
    assert names == {
        "dapo": ["overlong"],
        "edas": ["overlong"],
        "corr_po": ["corr_po"],
        "tempo": ["tempo"],
        "sspo": ["sspo"],
        "codethinker": ["consistency"],
        "vspo": ["spaced"],
        "physics_r1": ["physics_match", "overlong"],
        "azr": ["azr_format"],
        "populora": ["azr_format"],
        "grlo": ["rm"],
        "codeact_judge": ["judge"],
    }


def test_vspo_behaviour_reward_is_the_spaced_style_and_its_steering_pairs_contrast_it():
    # the behaviour: an operator written with spaces in the chain of thought ('7 + 5 + 0 = 12')
    vspo = RECIPES["vspo"]
    ((fn, _),) = vspo.extra_rewards
    assert fn.score(["3+4=?\n"] * 2, ["3 + 4 + 0 = 7\nA:7", "3+4+0=7\nA:7"]).values == [1.0, 0.0]
    spaced = re.compile(r"\d [-+=] \d")
    assert len(vspo.steering.positive) == len(vspo.steering.negative) == 16  # 16 solved problems, with / without
    assert all(spaced.search(t) for t in vspo.steering.positive)
    assert not any(spaced.search(t) for t in vspo.steering.negative)


def test_drafts_prompt_is_the_papers_template():
    # the draft comes after the problem, under the paper's "Problem: ..." template
    assert RECIPES["drafts"].drafts.template.startswith("Problem: {problem}")


def test_edas_recipe_is_dapo_plus_the_shaper():
    # EDAS is evaluated on top of DAPO in the paper: every other part is DAPO's
    edas, dapo = RECIPES["edas"], RECIPES["dapo"]
    assert dataclasses.replace(edas, name="dapo", paper=dapo.paper, inferred=dapo.inferred, shapers=()) == dapo
