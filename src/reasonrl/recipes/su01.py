"""SU-01's refined RL (arXiv 2605.13301; spec distill-and-data section 13).

GSPO (one length-normalised ratio per response, clipped per response, eps 1e-3 both sides, no KL)
with dynamic sampling (groups whose accuracy does not vary are dropped and refilled), plus a round
(:class:`~reasonrl.parts.RefineReplay`) that mixes self-refinement prompts built from recent wrong
answers (20% of the batch) and ExGRPO-style replay of past successes (25%, k = 1) into each batch.
The generative proof reward of the paper is left out: the built-in tasks have exact verifiers. The
SFT stage is ``reasonrl pretrain --curriculum reverse_ppl``; the test-time loop ``reasonrl eval --refine N``.
"""

from ..parts import KL, Advantage, GroupFilter, Optim, PolicyLoss, Recipe, RefineReplay, Smoke
from .grpo import TINY_CPU_OPTIM, TINY_CPU_SAMPLING

SU01 = Recipe(
    name="su01",
    summary="GSPO + zero-std filtering + self-refine prompts + replay of past successes",
    details=(
        "GSPO (clip 1e-3) with zero-std filtering, self-refinement prompts from recent wrong answers (20% of "
        "a batch) and replay of past successes (25%, one per group, old log-probs kept) (`refine_replay`); "
        "with `pretrain --curriculum reverse_ppl` and `eval --refine N`"
    ),
    doc="su01.md",
    smoke=Smoke(metrics=("su01/refine_buffer", "su01/replay_buffer", "su01/refine_groups")),
    paper="SU-01: reverse-perplexity SFT, GSPO with self-refine and replay, test-time refine, arXiv 2605.13301",
    inferred=(
        "refine_replay.refine_share=0.2 and refine_replay.replay_share=0.25 are shares of the final batch: the "
        "ordinary groups stay prompts_per_step and round(share * n_main / (1 - 0.2 - 0.25)) extra groups of each kind "
        "are added (fewer while a buffer is short); the paper replaces part of its 128-prompt batch instead",
        "refine collection sees the groups the zero-std filter kept (all-wrong groups are dropped before it): "
        "groups with mean reward < refine_replay.mean_below=0.5 give their samples with reward < "
        "refine_replay.sample_below=0.9; newest first, one refine prompt per question (its other samples leave the "
        "buffer), at most refine_replay.capacity=256 buffered samples (oldest dropped); a question in the current "
        "batch waits",
        "refine prompt (refine_replay.template): prompt + 'Previous answer:' + the answer + an instruction, then the "
        "prompt again so that it ends as the task's prompt; G samples, the question's own verifier, GRPO advantages",
        "replay (ExGRPO, k=1): each ordinary group with a correct sample (reward > refine_replay.min_reward=0.0) "
        "that is not entirely correct stores its lowest-entropy correct row (replacing an older one); a replay "
        "group is G-1 "
        "fresh samples + that row, with its old behaviour log-probs, advantages by the estimator over the mixed group; "
        "a question whose fresh samples are all correct (or whose ordinary group is) is retired",
        "refine_replay.drop_zero_std=true: extra groups whose accuracy does not vary are dropped too",
        "GSPO clip 1e-3 / 1e-3 (spec); optim.minibatches=4 (the spec's 4 optimizer steps per rollout batch); "
        "group_filter.max_rounds=3 generation rounds (the paper over-samples 160 for 128)",
        "lr 5e-5 cosine and T=0.8 as grpo (the spec's 1e-6 constant is for a 30B model); group_size=8 as the spec",
        "the generative proof reward is left out (exact verifiers); partial rollouts and TIS are not used",
    ),
    advantage=Advantage("grpo"),
    loss=PolicyLoss(ratio="sequence", clip_low=1e-3, clip_high=1e-3, agg="seq-mean-token-mean"),
    kl=KL(coef=0.0),
    group_filter=GroupFilter(metric="accuracy", max_rounds=3),
    refine_replay=RefineReplay(),
    sampling=TINY_CPU_SAMPLING,
    optim=Optim(lr=TINY_CPU_OPTIM.lr, minibatches=4),
)
