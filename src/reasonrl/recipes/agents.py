"""Multi-turn CodeAct agents (spec envs-selfplay-eval section 6: the FHIR agent paper, "standard multi-turn
agentic GRPO" for the mechanics): each action a Python cell calling the task's tools in a persistent sandboxed
interpreter, the interpreter's output the next observation, a loss on the policy's tokens alone.

``codeact`` rewards the answer with the task's verifier (the FHIR task: the gold number within 0.05), so it
runs with no judge; ``codeact_judge`` is the paper's reward, an LLM judge reading the question, gold, answer and
the retrieved evidence (``rewards.judge.backend=...``: a local HF model, an OpenAI-compatible server or a
Python function; docs/agents.md). Warm-start the tiny reasoner first (`reasonrl pretrain --task fhir`): from
the arithmetic base no action is code and nothing is rewarded.
"""

import dataclasses

from ..parts import KL, Advantage, Episodes, PolicyLoss, Recipe, Smoke, POLICY_METRICS
from ..rewards.judge import JudgeReward
from .grpo import TINY_CPU_OPTIM, TINY_CPU_SAMPLING

CODEACT = Recipe(
    name="codeact",
    summary=(
        "multi-turn CodeAct episodes (Python cells calling tools in a persistent sandbox, observations masked "
        "from the loss) on the FHIR records task; the verifier's or an LLM judge's reward"
    ),
    doc="agents.md",
    smoke=Smoke(
        "fhir",
        (("n_patients", 10),),
        POLICY_METRICS
        + ("episode/turns_mean", "episode/finish_context", "episode/trainable_frac", "env/codeact/malformed"),
    ),
    paper="FHIR agent: multi-turn CodeAct RL with an LLM-judge reward (spec envs-selfplay-eval 6; mechanics: "
    "verl multi-turn, Search-R1, verifiers' MultiTurnEnv)",
    inferred=(
        "trajectory-level GRPO: G = 8 episodes per question, A = (r - mean) / std broadcast to every policy token; "
        "the loss mask is 1 on the policy's sampled tokens only (observations and turn markers 0)",
        "DAPO-style token-level aggregation over the masked tokens, clip 0.2 / 0.28 on the token ratio, no KL",
        "episodes: 4 turns, observations capped at 256 tokens (middle-truncated), context 2048 tokens (capped at "
        "the model's own context length); an episode cut by the turn or context cap scores 0 (the spec's failure)",
        "reward: the task's verifier (codeact) or the judge alone (codeact_judge, task weight 0); the spec's optional "
        "format and integrity penalties are off",
        "task fhir, whose default prompt names the tools without documenting them (the tiny reasoner's 512 positions "
        "cannot hold the documentation; task_options.prompt=tools for a real model); sampling T=0.8 and AdamW lr 5e-5 "
        "as grpo's tiny-CPU settings",
    ),
    advantage=Advantage("grpo"),
    loss=PolicyLoss(ratio="token", clip_low=0.2, clip_high=0.28, agg="token-mean"),
    kl=KL(coef=0.0),
    group_size=8,
    sampling=TINY_CPU_SAMPLING,
    optim=TINY_CPU_OPTIM,
    episodes=Episodes(max_turns=4, max_obs_tokens=256, max_context_tokens=2048),
    run_defaults=(("task", "fhir"),),
)

# the paper's reward: the judge's verdict alone (the verifier's correctness is still logged as accuracy)
CODEACT_JUDGE = dataclasses.replace(
    CODEACT,
    name="codeact_judge",
    smoke=Smoke("fhir", (("n_patients", 10),), ("episode/turns_mean", "judge/no_answer", "reward/judge/mean")),
    task_reward_weight=0.0,
    extra_rewards=((JudgeReward(), 1.0),),
)

AGENT_RECIPES = (CODEACT, CODEACT_JUDGE)
