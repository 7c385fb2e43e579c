"""Recipes bound to a kind of task: TEMPO (temporal cutoff), SSPO (structured set diagnosis), SAPO
(step-aligned recommendation), CodeThinker (code output prediction), VSPO (a steered behaviour).

Each keeps grpo's estimator, loss, sampling and optimiser, so that ``reasonrl compare --recipes
grpo,<recipe> --task <task>`` isolates what the method changes: its reward, its credit assignment
or its sampler.
"""

import dataclasses

from ..parts import BeamSampling, Recipe, Steering, StepCredit, Smoke
from ..rewards import ConsistencyReward, FormatRegex, SetReward, TempoReward
from ..tasks import ArithmeticTask, take_items
from ..tasks.arithmetic import SPACED_RE, spaced
from .grpo import GRPO

_AS_GRPO = "advantage, loss (clip 0.2, seq-mean-token-mean, no KL), sampling (T=0.8) and optimiser as grpo"


def _on_grpo(**changes) -> Recipe:
    return dataclasses.replace(GRPO, **changes)


# TEMPO: a two-mode reward. A response citing a post-cutoff fact is scored only on its leak fraction
# (-k/n, task ignored); a leak-free one on the task (0..1), so leak-freedom comes first.
TEMPO = _on_grpo(
    name="tempo",
    summary="leak-aware two-mode reward; per-step credit; set reward with format (their own tasks)",
    details=(
        "two-mode reward: a response citing a post-cutoff fact scores `-leaks/claims`, a leak-free one its "
        "task score (`--task temporal`)"
    ),
    doc="tasks.md",
    smoke=Smoke("temporal", metrics=("reward/tempo/leak_rate", "reward/tempo/task_score", "reward/tempo/mean")),
    paper="TEMPO: Temporal Enforcement via Mode-separated Policy Optimization, arXiv 2605.18843",
    inferred=(
        "per-response mode selection, leak penalty -k/max(n,1) (the spec's default; the count penalty, the global "
        "schedule and min_claims are options: rewards.tempo.<option>=...)",
        "the leakage checker is the temporal task's rule (claims 'use d<day> <fact>' looked up against the dated "
        "evidence); a user task needs its own checker (TempoReward(checker=...))",
        "task score = exact match of the last 'A:' line with the reference",
        "kl.coef=0 (spec: GRPO defaults, beta 0.04 unknown); " + _AS_GRPO,
    ),
    task_reward_weight=0.0,
    extra_rewards=((TempoReward(), 1.0),),
)

# SAPO: the same exact-match reward, but each reasoning step (thinking block + SID token) gets its own
# group-relative advantage from whether its SID token matches, so a right coarse code is not punished
# for a wrong fine one.
SAPO = _on_grpo(
    name="sapo",
    summary="leak-aware two-mode reward; per-step credit; set reward with format (their own tasks)",
    details=(
        "per-step group-relative advantages, each given only to its step's tokens (`shapers=(StepCredit(),)`, "
        "`--task recommend`)"
    ),
    doc="tasks.md",
    smoke=Smoke("recommend", metrics=("steps/reward_level0", "steps/token_coverage")),
    paper="SAPO: Step-Aligned Policy Optimization, arXiv 2605.17648",
    inferred=(
        "step reward = position match of the step's SID token (spec default; prefix_match is an option)",
        "tokens outside every step (newlines, EOS) get 0 (spec default; shapers StepCredit(outside='outcome'))",
        "the estimator's sequence advantage is computed and replaced; token-mean within each sequence as grpo",
        _AS_GRPO,
    ),
    shapers=(StepCredit(),),
)

# SSPO: GRPO on format adherence (four stages in order, then a parseable label set) plus the set's
# Jaccard overlap with the truth, so a partly right diagnosis earns partial credit.
SSPO = _on_grpo(
    name="sspo",
    summary="leak-aware two-mode reward; per-step credit; set reward with format (their own tasks)",
    details=(
        "reward = format (four stages in order, then a label set) + Jaccard of the predicted label set "
        "(`--task diagnosis`)"
    ),
    doc="tasks.md",
    smoke=Smoke("diagnosis", metrics=("reward/sspo/format_rate", "reward/sspo/set_score", "reward/sspo/mean")),
    paper="SSPO / CardioThink, arXiv 2605.17308",
    inferred=(
        "R = 1 x format + 1 x Jaccard(P, Gt) (spec defaults; F1 / exact and the format gate are options: "
        "rewards.sspo.<option>=...)",
        "format = the diagnosis task's four stages R:/C:/M:/I: in order, non-empty, then a 'D:' label set that parses",
        "labels outside the vocabulary make the set unparsable (strict=True)",
        _AS_GRPO,
    ),
    task_reward_weight=0.0,
    extra_rewards=((SetReward(), 1.0),),
)

# CodeThinker: the outcome reward is gated by the consistency of the stated execution trace with the true
# one and densified by it; half of each group is sampled, the rest branched from the most consistent prefixes.
CODETHINKER = _on_grpo(
    name="codethinker",
    summary="trace-consistency reward + beam branching; steered rollouts toward a behaviour",
    details=(
        "consistency reward (outcome gated by the trace's consistency + a process term) and dynamic beam "
        "sampling (`beam`: half the group sampled, the rest branched from the best prefixes, budget never "
        "exceeded; `--task code`)"
    ),
    doc="tasks.md",
    smoke=Smoke("code", metrics=("beam/branches", "beam/budget", "reward/consistency/mean")),
    paper="CodeThinker: consistency-based RL for code reasoning, arXiv 2605.17958",
    inferred=(
        "R = 1[c >= 0.5] x outcome + 0.5 x c, c = share of trace claims that match the true trace in execution "
        "order (spec defaults; the multiplicative and outcome-only modes and process=f1, precision and recall of "
        "the trace, are options: rewards.consistency.<option>=...)",
        "beam: 4 of 8 samples independent, 4 branched (2 each) from the 2 prefixes with most consistent steps, cut "
        "before the first inconsistent step or at a random step boundary (spec's minimal variant)",
        "the trace template is the code task's compact one; GRPO-style loss as grpo (spec: GRPO/DAPO)",
        _AS_GRPO,
    ),
    task_reward_weight=0.0,
    extra_rewards=((ConsistencyReward(), 1.0),),
    beam=BeamSampling(first_frac=0.5, k_max=2),
)


def _spaced_pairs(n: int = 16) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Contrastive texts for the spaced style: the same solved problems with and without it."""
    items = take_items(ArithmeticTask(), "train", n, seed=20260530)
    return tuple(it.prompt + spaced(it.demo) for it in items), tuple(it.prompt + it.demo for it in items)


_POSITIVE, _NEGATIVE = _spaced_pairs()

# VSPO: the target behaviour is rare under the base model, so each group is generated at a grid of
# steering intensities along the behaviour's activation direction; the GRPO update is on the unsteered
# policy (the steered samples count as its own), with reward = task + 0.5 x behaviour.
VSPO = _on_grpo(
    name="vspo",
    summary="trace-consistency reward + beam branching; steered rollouts toward a behaviour",
    details=(
        "rollouts at a grid of steering intensities along a behaviour's activation direction (`steering`), "
        "GRPO update of the unsteered policy; reward = task + 0.5 x behaviour"
    ),
    doc="tasks.md",
    smoke=Smoke(
        task_options=(("spaced_rate", 0.05),),
        metrics=("steer/alpha_max", "reward/spaced/mean"),
        changes=(("steering.layer", 1),),
    ),  # the test model has 2 layers
    paper="VSPO: Vector-Steered Policy Optimization, arXiv 2605.15604",
    inferred=(
        "the behaviour on the tiny reasoner: the spaced style of the chain of thought ('7 + 5 + 0 = 12'); train from "
        "a base that shows it rarely: reasonrl pretrain --task-opt spaced_rate=0.05 (and the same task option)",
        "behaviour reward = 1 if an operator is written with spaces, weight lambda_b = 0.5",
        "steering vector: difference of mean layer activations over 16 solved problems with / without the style, "
        "unit norm, scaled by the mean residual norm; intensities alpha_i = alpha_max * i / (G-1) "
        "(steering.alphas=grid; uniform draws are an option), alpha_max constant (steering.anneal=none; linear or "
        "cosine to 0 are options), at generated positions only (steering.steer_prompt=false); behaviour log-probs "
        "re-scored without the hook (is_correction=False)",
        "layer 2 of 4 and alpha_max=0.6 (of the mean residual norm) tuned on the tiny reasoner: at 0.5-0.6 about half "
        "the samples take the style (2% unsteered), above 0.7 the arithmetic breaks; the paper's defaults are unknown",
        "compare with the reward-shaping baseline the paper uses: vspo:steering=null",
        _AS_GRPO,
    ),
    steering=Steering(layer=2, alpha_max=0.6, positive=_POSITIVE, negative=_NEGATIVE),
    extra_rewards=((FormatRegex(SPACED_RE, name="spaced"), 0.5),),
)

TASK_RECIPES = (TEMPO, SAPO, SSPO, CODETHINKER, VSPO)
