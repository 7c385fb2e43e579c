"""Every registered recipe's parts and key numbers, pinned by hand.

The table below is written from the papers and the recipe docstrings (src/reasonrl/recipes/*.py),
not dumped from the code, so a changed default fails here and must be made on purpose (and the
row updated, with its source). A recipe registered without a row fails too.

Fields pinned: only those that define each method. Deliberately left out: Veto's relaxed band
(its clip_low / clip_high may become tied to the loss clip), the SAGE knobs of recipes without a
guide, Steering's contrastive texts beyond their count, and any option being added concurrently
(Steering alphas/anneal, KL schedules, GroupFilter.max_rounds=None).
"""
import dataclasses
import json
import re

import pytest

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
    "steering": None,  # (layer, alpha_max, is_correction, number of contrastive pairs)
    "beam": None,  # (first_frac, k_max)
    "hints": None,  # NudgeRL's (n_hints, per_hint, p_drop, sampler, adv_lambda, distill_coef)
    "correction": None,  # (p_max, q0, kappa, weight, rho, rho_min, acc_floor, factor)
    "redirect": None,  # STRIDE: (critic, n_r, n_v, harmless, ratio, clip, lambda_r, eta, max_redirects)
    "shapers": (),  # ((type, {option: value}), ...)
    "extra_rewards": (),  # ((type, weight, {option: value}), ...)
    "aux_losses": (),  # type names
    "ssopd": None,  # (coef, divergence, frontier, max_prefix_tokens, clip, w_star, teacher)
    "egrsd": None,  # (direction, magnitude, cap, g_min, tau, lookahead, alpha)
    "selector": None,  # LZE's (selection_ratio, min_selection_ratio, ema_decay, alpha, d_min, jitter, warmup epochs,
    # prune, prune_streak, replay_frac)
    "d2evo": None,  # (iteration_steps, estimate_samples, solver_samples, p_lo, p_hi, p_star, eta, invalid, floor,
    #                  use_gold, ngram, anchors_per_step, parse)
    "teacher": None,  # (teacher model, offload, tgpo (variant, coef, decay, min_coef), rkl_opd (coef, grpo_weight),
    #                    kdrl (coef, estimator))
    "fest": None,  # (coef, gamma, decay, beta, sup_loss, reference, length_norm, n_demos, demos_per_step, negatives, all_correct)
    "vpd": None,  # (feedback, beta, target_kl, factor, band, e_kl, m_divergence, m_coef, alpha)
    "refine_replay": None,  # SU-01: (refine_share, replay_share, mean_below, sample_below, min_reward, capacity, drop_zero_std)
    "drafts": None,  # drafts in the prompt: (mode, seed, max_prompt_tokens, template starts with "Problem: ")
    "azr": None,  # AZR's self-play: (proposals, estimate_samples, types, capacity, min_inputs)
    "evoenv": None,  # EvoEnv: (proposals, estimate_instances, estimate_samples, p_lo, p_hi, reward, review,
    #                   review_samples, novelty_tau, capacity, ema, patience)
    "populora": None,  # PopuLoRA: (teachers, students, proposals, estimate_samples, types, zero_when_unsolved, pfsp,
    #                     pbt_every, pbt_frac, operators, mutation_sigma, interp, offspring_sigma, (mu0, sigma0, beta, tau))
    "prompt_policy": None,  # prompt-policy RL: (worker, contexts, instances, renderer, k_top, k_bottom, capacity,
    #                          critic, distill_coef)
    "run_defaults": {},  # run settings the recipe brings to the command line
    "critic": None,  # PPO's critic: (model, lr, gamma, lam, whiten, value_clip, vf_coef, warmup_steps)
    "balance": None,  # trajectory balance: (beta, reward, length_norm, weight, clip_low, clip_high, log_z, z_lr, z_layers,
    #                   z_dropout, z_detach, proposals, missing, surrogate, mc, mask_t, t_min)
    "episodes": None,  # (max_turns, max_turn_tokens, max_obs_tokens, max_context_tokens, overflow_reward, turn_limit_reward)
    "diffusion": None,  # the masked-diffusion policy's sampler: (steps, block_length, remasking), None = the model's
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
    "dr_grpo": row(advantage=("dr_grpo", "group"),
                   loss=("token", 0.2, 0.2, None, "clip", "seq-mean-token-sum-norm", None)),
    # mismatched wrong drafts (arXiv 2605.17314, spec distill-and-data.md 9): Dr. GRPO on prompts with another
    # problem's wrong draft; derangement seed 0, prompt cap 3072 tokens, the paper's template
    "drafts": row(advantage=("dr_grpo", "group"), loss=("token", 0.2, 0.2, None, "clip", "seq-mean-token-sum-norm", None),
                  drafts=("mismatched_wrong", 0, 3072, True)),
    "dapo": DAPO_ROW,
    # GSPO (arXiv 2507.18071): one length-normalised ratio per response, clip 3e-4 / 4e-4 (section 5.1),
    # the batch split into minibatches (2 here) so the sequence clip acts off-policy
    "gspo": row(loss=("sequence", 3e-4, 4e-4, None, "clip", "seq-mean-token-mean", None), optim=(5e-5, 1, 2)),
    # RLOO (arXiv 2402.14740): leave-one-out baseline, sequence log-likelihood (token sum), PPO clip 0.2 (TRL)
    "rloo": row(advantage=("rloo", "group"), loss=("token", 0.2, 0.2, None, "clip", "seq-mean-token-sum", None)),
    # REINFORCE++ (arXiv 2501.03262): batch-normalised advantage, token mean, KL off
    "reinforce_pp": row(advantage=("reinforce_pp", "group"),
                        loss=("token", 0.2, 0.2, None, "clip", "token-mean", None)),
    # CISPO (MiniMax-M1, arXiv 2506.13585): the detached IS weight is clipped in DAPO's band [0.8, 1.28]
    "cispo": row(loss=("token", 0.2, 0.28, None, "cispo", "token-mean", None)),
    # EDAS (arXiv 2605.17333) on DAPO: lambda = n^gamma / mean, gamma 1, unparsed answers one cluster, no clip
    "edas": {**DAPO_ROW, "shapers": (("EDAS", {"gamma": 1.0, "none_policy": "cluster", "lambda_min": None,
                                               "lambda_max": None}),)},
    # Mu-GRPO (arXiv 2605.17570): 4 generate-then-train stages, relaxed band [0.5, 2.0], token mean, the
    # negative-advantage veto triggered when a ratio leaves the band, trigger token included
    "mu_grpo": row(loss=("token", 0.5, 1.0, None, "clip", "token-mean", None), stages=4,
                   veto=("out_of_band", True)),
    # SAGE (arXiv 2605.18864, official code): beta 0.05 k3 anchored at q * pi_ref, branch guide
    # q = clamp(1 + 0.3 relu(H - 1.2), 0.6, 1.4)
    "sage": row(kl=(0.05, "k3", "branch"), sage=(0.3, 1.2, 0.6, 1.4)),
    # CorR-PO (arXiv 2605.17770): reward bonus -0.1 * Pearson(H, logit-grad norm), inversion sign, weight 1
    "corr_po": row(extra_rewards=(("CorrBonus", 1.0, {"coef": 0.1, "sign": "inversion", "method": "pearson",
                                                      "min_tokens": 3}),)),
    # TEMPO (arXiv 2605.18843): the two-mode reward replaces the verifier's; per-response modes, leak
    # penalty -k/max(n, 1), k_cap 5, tau 1%, claims checker, no min_claims
    "tempo": row(task_reward_weight=0.0,
                 extra_rewards=(("TempoReward", 1.0, {"leak_penalty": "fraction", "k_cap": 5,
                                                      "mode_schedule": "per_response", "tau": 0.01,
                                                      "min_claims": 0, "latch": False}),)),
    # SAPO (arXiv 2605.17648): per-step group-relative advantages by position match, 0 outside steps
    "sapo": row(shapers=(("StepCredit", {"mode": "position_match", "outside": "zero"}),)),
    # SSPO (arXiv 2605.17308): R = 1 x format + 1 x Jaccard, no gate, strict vocabulary; replaces the verifier
    "sspo": row(task_reward_weight=0.0,
                extra_rewards=(("SetReward", 1.0, {"metric": "jaccard", "w_fmt": 1.0, "w_set": 1.0, "gate": False,
                                                   "strict": True}),)),
    # CodeThinker (arXiv 2605.17958): R = 1[c >= 0.5] x outcome + 0.5 x c (precision); beam: half the group
    # sampled, the rest branched from the 2 best prefixes
    "codethinker": row(task_reward_weight=0.0, beam=(0.5, 2),
                       extra_rewards=(("ConsistencyReward", 1.0, {"tau": 0.5, "lambda_p": 0.5, "mode": "gated",
                                                                  "process": "precision"}),)),
    # VSPO (arXiv 2605.15604): steering at layer 2, intensities up to 0.6 of the residual norm, no IS
    # correction, 16 contrastive pairs; reward = task + 0.5 x the spaced-style behaviour
    # NudgeRL (arXiv 2605.15726, authors' config): 2 hints (the first two) x 4 rollouts = G 8, dropout 0.5,
    # adv_lbd 1.1, distill_coeff 0.1; PPO clip 0.2 / 0.2, no KL, per-sequence token mean (loss_type "grpo")
    "nudgerl": row(hints=(2, 4, 0.5, "sequential", 1.1, 0.1)),
    # CIPO (arXiv 2605.14539; thresholds [inferred], spec section 6): accuracy in (0, 0.75] picked, all-wrong
    # prompts with probability 0.5, -0.5 for a wrong correction repeating the failed answer, lambda_c 1, replay
    # ratio 0.5 halved (down to 1/8) while correction accuracy < 0.1; GRPO with token mean over the joint batch
    "cipo": row(loss=("token", 0.2, 0.2, None, "clip", "token-mean", None),
                correction=(0.75, 0.5, 0.5, 1.0, 0.5, 0.125, 0.1, 2.0)),
    # STRIDE (arXiv 2605.18851, spec section 7, all [inferred]): the task's critique on the tiny reasoner, n_r = 4
    # continuations, harmless advantage, ratio clipped at c = 5, lambda_r = 1, eta = 0.5, n_v = 4, one
    # redirection per prompt per step (None)
    "stride": row(redirect=("task", 4, 4, True, True, 5.0, 1.0, 0.5, None)),
    "vspo": row(steering=(2, 0.6, False, 16), extra_rewards=(("FormatRegex", 0.5, {"name": "spaced"}),)),
    # Physics-R1 (spec envs-selfplay-eval 7(b): verl grpo + loss_mode gspo + reward_manager dapo): GSPO's sequence
    # ratio clipped 3e-4 / 4e-4, dynamic sampling on accuracy (3 rounds), the binary physics_match reward (rtol 1e-2,
    # atol 1e-6, DENSE_REWARD=0) replacing the verifier, overlong shaping over the last 20% unscaled (verl's DAPO
    # reward manager, penalty_factor 1.0), minibatches 2 as gspo
    "physics_r1": row(loss=("sequence", 3e-4, 4e-4, None, "clip", "seq-mean-token-mean", None), optim=(5e-5, 1, 2),
                      group_filter=("accuracy", 3), task_reward_weight=0.0,
                      extra_rewards=(("PhysicsMatch", 1.0, {"rtol": 1e-2, "atol": 1e-6, "symbolic": False,
                                                            "dense": False}),
                                     ("OverlongPenalty", 1.0, {"cache_frac": 0.2, "max_len": None,
                                                               "cache_len": None}))),
    # SSOPD (arXiv 2605.17497; spec section 1, all [inferred]): lambda 1, forward KL on the full vocabulary,
    # frontier weight 4p(1-p), no prefix cap; GRPO otherwise
    "ssopd": row(ssopd=(1.0, "forward_kl", "4p(1-p)", None, 1.0, "eos", "live")),
    # EGRSD (arXiv 2605.13255; spec section 2, forms [inferred]): A_i x clip(exp(q - s), 1/5, 5) x gate (g_min 0.1,
    # tau 1), PPO-clip 0.2 with token-mean over the batch (1 / sum |y_i|), no additive GRPO share;
    # CL-EGRSD: lookahead window 8. Magnitude 'ratio' since issue #26 (3 seeds x 60 steps from the context-mix
    # warm start, recipe_health/egrsd_ctx.json: ratio 0.651 +- 0.050, the spec's inferred 'abs' 0.536 +- 0.023,
    # grpo 0.633 +- 0.053; alpha=1 0.627, tau=0.1 0.541)
    "egrsd": row(loss=("token", 0.2, 0.2, None, "clip", "token-mean", None),
                 egrsd=("advantage", "ratio", 5.0, 0.1, 1.0, 0, 0.0)),
    # LZE (arXiv 2605.17003; spec section 10): the example scripts' ratio 0.4 and no warm-up, no std division;
    # the class defaults otherwise (min ratio 0.3, EMA 0.9, alpha 0.3, d_min 0.05, Gumbel 0.05, prune after 2
    # solved epochs, replay 10%)
    "lze": row(advantage=("grpo", "none"), selector=(0.4, 0.3, 0.9, 0.3, 0.05, 0.05, 0, True, 2, 0.1),
               run_defaults={"data.pool": 128}),  # the pool of the measured 3-seed compares
    # D2Evo (arXiv 2605.17037; spec section 11, all [inferred]): n = 8 samples to estimate and to judge, band
    # [0.2, 0.8], p* 0.5, eta 0.5, invalid -1, majority floor 0.3 (no gold), character 3-grams; G_Q = G = 4,
    # 4 anchors per step, 10 steps per iteration, a question is the longest leading expression (ours)
    "d2evo": row(group_size=4, d2evo=(10, 8, 8, 0.2, 0.8, 0.5, 0.5, -1.0, 0.3, False, 3, 4, "prefix"),
                 run_defaults={"data.pool": 128}),
    "cl_egrsd": row(loss=("token", 0.2, 0.2, None, "clip", "token-mean", None),
                    egrsd=("advantage", "ratio", 5.0, 0.1, 1.0, 8, 0.0)),
    # TGPO (arXiv 2605.13230, released code helldog-star/TGPO): PPO-clip 0.2 with token-mean, entropy 0.001,
    # no KL; reg: lambda_0 0.002, delta 1e-5; adv: 0.02, 1e-4 (None = the variant's default, resolved in
    # TGPO.coef_at); RKL-OPD: log pi_T - log pi_old alone; KDRL: beta 0.002 on the k2 estimate
    "tgpo": row(loss=("token", 0.2, 0.2, None, "clip", "token-mean", None), entropy_coef=0.001,
                teacher=("builtin:teacher", False, ("reg", None, None, 0.0), None, None)),
    "tgpo_adv": row(loss=("token", 0.2, 0.2, None, "clip", "token-mean", None), entropy_coef=0.001,
                    teacher=("builtin:teacher", False, ("adv", None, None, 0.0), None, None)),
    "rkl_opd": row(loss=("token", 0.2, 0.2, None, "clip", "token-mean", None), entropy_coef=0.001,
                   teacher=("builtin:teacher", False, None, (1.0, 0.0), None)),
    "kdrl": row(loss=("token", 0.2, 0.2, None, "clip", "token-mean", None), entropy_coef=0.001,
                teacher=("builtin:teacher", False, None, None, (0.002, "k2"))),
    # FEST (arXiv 2605.15012; spec section 5, constants [inferred]): alpha_0 = 1 halving per pass over the demos,
    # sigmoid DPO beta 0.1 on summed log-probs against the initial model; 32 demos, 4 a step, the first incorrect
    # rollout as rejected, all-correct demos skipped; GRPO otherwise
    "fest": row(fest=(1.0, 0.5, "exponential", 0.1, "dpo", "initial", False, 32, 4, "one", "skip")),
    # VPD (arXiv 2605.15113; spec section 4, all [inferred]): the task's critique as feedback, beta0 0.1, target
    # 0.05 nats/token, x2 / /2 outside [delta/1.5, 1.5 delta], exact E-step KL, reverse-KL M-step weight 1, GRPO alpha 1
    "vpd": row(vpd=("critique", 0.1, 0.05, 2.0, 1.5, "exact", "reverse_kl", 1.0, 1.0),
               run_defaults={"lora.r": 8}),  # the rank of the measured compare
    # SU-01 (arXiv 2605.13301, spec section 13): GSPO eps 1e-3 / 1e-3, no KL, 4 optimizer steps per rollout batch,
    # zero-std filtering (3 rounds), refine prompts 20% and replay 25% of the batch from groups with mean reward < 0.5
    # (samples < 0.9) and successes above reward 0; buffer 256 and filtering of extra groups [inferred]
    "su01": row(loss=("sequence", 1e-3, 1e-3, None, "clip", "seq-mean-token-mean", None), optim=(5e-5, 1, 4),
                group_filter=("accuracy", 3), refine_replay=(0.2, 0.25, 0.5, 0.9, 0.0, 256, True)),
    # AZR (arXiv 2505.03335, released code): TRR++ over REINFORCE++ (the estimator named, the part overrides it
    # by bucket), no KL, the solver's 1 / -0.5 / -1 format shaping as an extra reward of weight 1; the program
    # world's task; 2 proposal prompts per type, p_hat from 4 solver samples (code: 8), all three types
    "azr": row(advantage=("reinforce_pp", "group"), loss=("token", 0.2, 0.2, None, "clip", "token-mean", None),
               group_size=4, extra_rewards=(("AZRShaping", 1.0, {"wrong": -0.5, "bad_format": -1.0}),),
               azr=(2, 4, "deduction,abduction,induction", 512, 4), run_defaults={"task": "azr"}),
    # EvoEnv (spec section 2, [inferred] but for the four checks and the ten seeds): per-role TRR++, no KL; L5 from
    # 4 instances x 2 answers in [0.1, 0.8], learnability reward, the policy's review (3 votes), novelty tau 0.8
    # (the spec's 0.5 rejects the tiny model's short modules on their boilerplate), pool of 64, EMA 0.2, patience 3
    "evoenv": row(advantage=("reinforce_pp", "group"), loss=("token", 0.2, 0.2, None, "clip", "token-mean", None),
                  group_size=4, evoenv=(2, 4, 2, 0.1, 0.8, "learnability", "policy", 3, 0.8, 64, 0.2, 3),
                  run_defaults={"task": "evoenv"}),
    # PopuLoRA (spec section 4): the paper's 4 + 4 adapters on AZR's game (the azr recipe's loss, shaping and G);
    # the teacher reward 1 - s_hat with AZR's 0 at s_hat = 0; TrueSkill's defaults (mu0 25, sigma0 25/3, beta 25/6,
    # tau 25/300); PFSP p(1-p); PBT [inferred]: every 10 steps the bottom quarter, the four operators, sigma_m 0.1,
    # a = 0.5, offspring sigma >= 25/6
    "populora": row(advantage=("reinforce_pp", "group"), loss=("token", 0.2, 0.2, None, "clip", "token-mean", None),
                    group_size=4, extra_rewards=(("AZRShaping", 1.0, {"wrong": -0.5, "bad_format": -1.0}),),
                    populora=(4, 4, 1, 4, "deduction,abduction,induction", True, "balanced", 10, 0.25,
                              "gaussian,spectral,modulewise,svd", 0.1, 0.5, 25 / 6, (25.0, 25 / 3, 25 / 6, 25 / 300)),
                    run_defaults={"task": "azr", "lora.r": 8}),
    # prompt-policy RL (spec section 5, [inferred] but the structure): GRPO on the prompter, the shipped base as the
    # worker, one context, M = 4 instances, the task's hints as fragments, history of the 2 best and 2 worst of 64,
    # the failure critic, distillation weight 1; the prompter sampled at T = 2.0 [inferred, measured:
    # benchmarks/results/prompt_policy/oracle60_T2.json 3 of 3 seeds at 1.000 against 2 of 3 at T = 0.8 (oracle90.json);
    # ctxbase45_60_T2.json 0.623 against 0.493 at T = 0.8 (ctxbase45_60.json)]
    "prompt_policy": row(prompt_policy=("base", "task", 4, "hints", 2, 2, 64, "failures", 1.0), temperature=2.0,
                         run_defaults={"task": "arithmetic"}),
    # PPO + GAE (arXiv 1707.06347, 1506.02438; verl's defaults): gamma = lam = 1, whitened advantages, value clip
    # 0.5, token-mean loss, no KL; a separate critic copied from the policy, lr 10x the actor's (GRLO's 1e-5 / 1e-6
    # on the tiny actor lr 5e-5); REINFORCE's A = r as the estimator the critic replaces; G = 8 as grpo
    "ppo": row(advantage=("reinforce", "group"), loss=("token", 0.2, 0.2, None, "clip", "token-mean", None),
               critic=("policy", 5e-4, 1.0, 1.0, True, 0.5, 1.0, 0)),
    # GRLO (spec envs-selfplay-eval 8 (b), train.sh): verl PPO + GAE gamma = lam = 1 from the base, n = 1, a BT
    # reward model's score alone (style_mix off), 4 PPO mini-batches per batch, actor / critic lr 1:10 (1e-6 / 1e-5
    # there; 2e-5 / 2e-4 on the tiny reasoner); k3 KL 0.5 to the start [inferred: the paper has none; measured, the
    # weak tiny reward model is hacked without it]
    "grlo": row(advantage=("reinforce", "group"), loss=("token", 0.2, 0.2, None, "clip", "token-mean", None),
                kl=(0.5, "k3", None),
                group_size=1, optim=(2e-5, 1, 4), task_reward_weight=0.0,
                extra_rewards=(("RMReward", 1.0, {"model": "", "length_coef": 0.0, "length_target": 64}),),
                critic=("policy", 2e-4, 1.0, 1.0, True, 0.5, 1.0, 0),
                run_defaults={"task": "explain", "prompts_per_step": 64}),
    # FlowRL (arXiv 2509.15207, verl recipe/flowrl): no policy loss, the trajectory-balance residual with beta 15 on
    # the GRPO advantage, token-mean log-probs, w clipped to the spec's [0.8, 1.2], a 3-layer log Z head (dropout
    # 0.1) with grad into the backbone; its own lr 1e-3 [inferred]
    "flowrl": row(loss=None, balance=(15.0, "group", True, "clip", 0.2, 0.2, "head", 1e-3, 3, 0.1, False, 8, "error",
                                      "token", 1, None, 1e-3)),
    # DISA (arXiv 2605.17295, spec section 7): the same residual with the raw reward and a frozen table log Z_hat
    # estimated from N = 8 proposals (in the run over data.pool = 128 without balance.table); missing prompts fail; beta 1
    # [inferred, measured: the spec's 15 (FlowRL's) narrows the policy on the raw {0, 1} reward, docs/distmatch.md]
    "disa": row(loss=None, balance=(1.0, "raw", True, "clip", 0.2, 0.2, "table", 1e-3, 3, 0.1, False, 8, "error",
                                    "token", 1, None, 1e-3), run_defaults={"data.pool": 128}),
    # TraFL (arXiv 2605.13935, spec section 8): the residual on the masked-diffusion LM with the ELBO surrogate (K_mc 1,
    # t ~ U(1e-3, 1], coupled masks), w = 1, a learned log Z; the shipped diffusion model, its own sampler settings
    "trafl": row(loss=None, balance=(15.0, "group", True, "one", 0.2, 0.2, "head", 1e-3, 3, 0.1, False, 8, "error",
                                     "elbo", 1, None, 1e-3), diffusion=(None, None, None), run_defaults={"model": "builtin:diffusion"}),
    # CodeAct agent (spec envs-selfplay-eval 6, mechanics [inferred]: verl multi-turn, Search-R1): trajectory-level
    # GRPO over G = 8 episodes, DAPO-style token-mean with clip 0.2 / 0.28, no KL; 4 turns, observations of 256
    # tokens, context 2048, an episode cut by a cap scores 0; the FHIR task
    "codeact": row(loss=("token", 0.2, 0.28, None, "clip", "token-mean", None), episodes=(4, None, 256, 2048, 0.0, 0.0),
                   run_defaults={"task": "fhir"}),
    # the same with the paper's reward: the LLM judge's verdict alone (backend set by the user), the verifier weight 0
    "codeact_judge": row(loss=("token", 0.2, 0.28, None, "clip", "token-mean", None), task_reward_weight=0.0,
                         extra_rewards=(("JudgeReward", 1.0, {"backend": "", "mode": "verdict"}),),
                         episodes=(4, None, 256, 2048, 0.0, 0.0),
                         run_defaults={"task": "fhir"}),
    # diffu-GRPO (d1, arXiv 2504.12216): GRPO's clipped loss on the one-step per-token log-probs, KL 0.04 (k3) to the
    # warm start, on the shipped diffusion model
    "diffu_grpo": row(kl=(0.04, "k3", None), diffusion=(None, None, None), run_defaults={"model": "builtin:diffusion"}),
}


def _options(obj, names):
    return {k: getattr(obj, k) for k in names}


def _actual(recipe, expected):
    """The recipe's values for the fields of the table, read field by field (options: those the row names)."""
    r, loss, kl = recipe, recipe.loss, recipe.kl
    shapers = tuple((type(s).__name__, _options(s, opts)) for s, (_, opts) in zip(r.shapers, expected["shapers"]))
    shapers += tuple((type(s).__name__, {}) for s in r.shapers[len(expected["shapers"]):])
    extras = tuple((type(fn).__name__, w, _options(fn, opts))
                   for (fn, w), (_, _, opts) in zip(r.extra_rewards, expected["extra_rewards"]))
    extras += tuple((type(fn).__name__, w, {}) for fn, w in r.extra_rewards[len(expected["extra_rewards"]):])
    st, c = r.steering, r.correction
    return {
        "advantage": (r.advantage.estimator, r.advantage.scale),
        "loss": None if loss is None else (loss.ratio, loss.clip_low, loss.clip_high, loss.dual_clip, loss.trust_region,
                                           loss.agg, loss.norm_len),
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
        "steering": None if st is None else (st.layer, st.alpha_max, st.is_correction, len(st.positive)),
        "beam": None if r.beam is None else (r.beam.first_frac, r.beam.k_max),
        "hints": None if r.hints is None else (r.hints.n_hints, r.hints.per_hint, r.hints.p_drop, r.hints.sampler,
                                               r.hints.adv_lambda, r.hints.distill_coef),
        "correction": None if r.correction is None else (c.p_max, c.q0, c.kappa, c.weight, c.rho, c.rho_min, c.acc_floor,
                                                         c.factor),
        "redirect": None if r.redirect is None else tuple(getattr(r.redirect, k) for k in (
            "critic", "n_r", "n_v", "harmless", "ratio", "clip", "lambda_r", "eta", "max_redirects")),
        "shapers": shapers,
        "extra_rewards": extras,
        "aux_losses": tuple(type(a).__name__ for a in r.aux_losses),
        "ssopd": None if r.ssopd is None else (r.ssopd.coef, r.ssopd.divergence, r.ssopd.frontier,
                                               r.ssopd.max_prefix_tokens, r.ssopd.clip, r.ssopd.w_star, r.ssopd.teacher),
        "selector": None if r.selector is None else tuple(getattr(r.selector, k) for k in (
            "selection_ratio", "min_selection_ratio", "ema_decay", "alpha", "d_min", "jitter", "warmup_transition_epochs",
            "prune", "prune_streak", "replay_frac")),
        "teacher": None if r.teacher is None else (
            r.teacher.model, r.teacher.offload,
            None if r.tgpo is None else (r.tgpo.variant, r.tgpo.coef, r.tgpo.decay, r.tgpo.min_coef),
            None if r.rkl_opd is None else (r.rkl_opd.coef, r.rkl_opd.grpo_weight),
            None if r.kdrl is None else (r.kdrl.coef, r.kdrl.estimator)),
        "fest": None if r.fest is None else tuple(getattr(r.fest, k) for k in (
            "coef", "gamma", "decay", "beta", "sup_loss", "reference", "length_norm", "n_demos", "demos_per_step",
            "negatives", "all_correct")),
        "drafts": None if getattr(r, "drafts", None) is None else (r.drafts.mode, r.drafts.seed, r.drafts.max_prompt_tokens,
                                                                 r.drafts.template.startswith("Problem: {problem}")),
        "egrsd": None if r.egrsd is None else (r.egrsd.direction, r.egrsd.magnitude, r.egrsd.cap, r.egrsd.g_min,
                                               r.egrsd.tau, r.egrsd.lookahead, r.egrsd.alpha),
        "d2evo": None if r.d2evo is None else tuple(getattr(r.d2evo, k) for k in (
            "iteration_steps", "estimate_samples", "solver_samples", "p_lo", "p_hi", "p_star", "eta", "invalid", "floor",
            "use_gold", "ngram", "anchors_per_step", "parse")),
        "vpd": None if r.vpd is None else tuple(getattr(r.vpd, k) for k in (
            "feedback", "beta", "target_kl", "factor", "band", "e_kl", "m_divergence", "m_coef", "alpha")),
        "critic": None if r.critic is None else tuple(getattr(r.critic, k) for k in (
            "model", "lr", "gamma", "lam", "whiten", "value_clip", "vf_coef", "warmup_steps")),
        "refine_replay": None if r.refine_replay is None else tuple(getattr(r.refine_replay, k) for k in (
            "refine_share", "replay_share", "mean_below", "sample_below", "min_reward", "capacity", "drop_zero_std")),
        "azr": None if r.azr is None else tuple(getattr(r.azr, k) for k in (
            "proposals", "estimate_samples", "types", "capacity", "min_inputs")),
        "evoenv": None if r.evoenv is None else tuple(getattr(r.evoenv, k) for k in (
            "proposals", "estimate_instances", "estimate_samples", "p_lo", "p_hi", "reward", "review", "review_samples",
            "novelty_tau", "capacity", "ema", "patience")),
        "populora": None if r.populora is None else (*(getattr(r.populora, k) for k in (
            "teachers", "students", "proposals", "estimate_samples", "types", "zero_when_unsolved", "pfsp", "pbt_every",
            "pbt_frac", "operators", "mutation_sigma", "interp", "offspring_sigma")),
            (r.populora.mu0, r.populora.sigma0, r.populora.beta, r.populora.tau)),
        "prompt_policy": None if r.prompt_policy is None else tuple(getattr(r.prompt_policy, k) for k in (
            "worker", "contexts", "instances", "renderer", "k_top", "k_bottom", "capacity", "critic", "distill_coef")),
        "run_defaults": dict(r.run_defaults),
        "balance": None if r.balance is None else tuple(getattr(r.balance, k) for k in (
            "beta", "reward", "length_norm", "weight", "clip_low", "clip_high", "log_z", "z_lr", "z_layers", "z_dropout",
            "z_detach", "proposals", "missing", "surrogate", "mc", "mask_t", "t_min")),
        "diffusion": None if r.diffusion is None else (r.diffusion.steps, r.diffusion.block_length, r.diffusion.remasking),
        "episodes": None if r.episodes is None else tuple(getattr(r.episodes, k) for k in (
            "max_turns", "max_turn_tokens", "max_obs_tokens", "max_context_tokens", "overflow_reward", "turn_limit_reward")),
    }


def test_every_registered_recipe_has_a_row_and_every_row_a_recipe():
    assert set(RECIPES) - set(TABLE) == set(), "a recipe is registered without a pinned row: add it to TABLE"
    assert set(TABLE) - set(RECIPES) == set(), "TABLE pins a recipe that is no longer registered"
    assert all(set(r) == set(GRPO_ROW) for r in TABLE.values())  # every row states every field


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
        assert (None if loss is None else (loss["ratio"], loss["clip_low"], loss["clip_high"], loss["dual_clip"],
                                           loss["trust_region"], loss["agg"], loss["norm_len"])) == exp["loss"], name
        assert (got["kl"]["coef"], got["kl"]["estimator"], got["kl"]["guide"]) == exp["kl"], name
        assert (got["group_size"], got["sampling"]["temperature"], got["task_reward_weight"]) == \
            (exp["group_size"], exp["temperature"], exp["task_reward_weight"]), name
        assert (got["optim"]["lr"], got["optim"]["mu"], got["optim"]["minibatches"]) == exp["optim"], name
        assert (got["stages"] or {}).get("count") == exp["stages"], name
        assert len(got["shapers"]) == len(exp["shapers"]) and len(got["extra_rewards"]) == len(exp["extra_rewards"])
        # "<weight> x <reward>" in the listing
        assert [float(e.split(" x ")[0]) for e in got["extra_rewards"]] == [w for _, w, _ in exp["extra_rewards"]]


def test_extra_rewards_keep_their_config_names():
    # rewards.<name>.<option> config keys and the reward/<name>/* metrics are built from these names
    names = {n: [reward_name(fn) for fn, _ in r.extra_rewards] for n, r in RECIPES.items() if r.extra_rewards}
    assert names == {"dapo": ["overlong"], "edas": ["overlong"], "corr_po": ["corr_po"], "tempo": ["tempo"],
                     "sspo": ["sspo"], "codethinker": ["consistency"], "vspo": ["spaced"],
                     "physics_r1": ["physics_match", "overlong"], "azr": ["azr_format"],
                     "populora": ["azr_format"], "grlo": ["rm"],
                     "codeact_judge": ["judge"]}


def test_vspo_behaviour_reward_is_the_spaced_style_and_its_steering_pairs_contrast_it():
    # the behaviour: an operator written with spaces in the chain of thought ('7 + 5 + 0 = 12')
    vspo = RECIPES["vspo"]
    (fn, _), = vspo.extra_rewards
    assert fn.score(["3+4=?\n"] * 2, ["3 + 4 + 0 = 7\nA:7", "3+4+0=7\nA:7"]).values == [1.0, 0.0]
    spaced = re.compile(r"\d [-+=] \d")
    assert all(spaced.search(t) for t in vspo.steering.positive)
    assert not any(spaced.search(t) for t in vspo.steering.negative)


def test_edas_recipe_is_dapo_plus_the_shaper():
    # EDAS is evaluated on top of DAPO in the paper: every other part is DAPO's
    edas, dapo = RECIPES["edas"], RECIPES["dapo"]
    assert dataclasses.replace(edas, name="dapo", paper=dapo.paper, inferred=dapo.inferred, shapers=()) == dapo
