"""Prompt-policy RL: a small prompter trained by policy gradient to write prompts for a frozen black-box worker,
with a contrastive experience buffer and iterative distillation into one-shot prompting.

Spec: shared/specs/envs-selfplay-eval.md section 5 (the abstract fixes the structure: a trainable prompter, a
frozen worker, a buffer of prompts with scores and critiques, GRPO on the prompter's tokens, distillation of
the history-conditioned refinement into the history-free prompter; everything else is [inferred]). The part is
:class:`~reasonrl.parts.PromptPolicy`; the run's ``--task`` is the worker's task.
"""

import dataclasses

from ..parts import PromptPolicy, Smoke
from .grpo import GRPO

PROMPT_POLICY_RECIPE = dataclasses.replace(
    GRPO,
    name="prompt_policy",
    summary="a prompter trained on a frozen worker's success, with a contrastive history, distilled to one shot",
    details="",  # not grpo's (replace() would keep it): the summary says it
    doc="prompt_policy.md",
    smoke=Smoke(
        metrics=("prompt_policy/worker_calls", "prompt_policy/best_reward", "prompt_policy/distill_term"),
        changes=(("prompt_policy.instances", 2),),
    ),
    paper="Prompt-policy RL by iterative distillation of experience with a black-box worker (the spec's section 5)",
    inferred=(
        "the run's model is the prompter; the worker (prompt_policy.worker=base: the shipped model, frozen, greedy; "
        "or a model directory / hub id, or module:attr for a user's Worker or function) answers the run's task",
        "contexts: the whole task (prompt_policy.contexts=task) or instances grouped by meta fields (meta:f1,f2); "
        "a step's items are contexts in turn, each scored on M=4 train instances (prompt_policy.instances)",
        "the prompter's prompt: 'task: <context>' + 'tried:' and the history, one line per entry "
        "'<score>: <prompt> | <critique>' + 'prompt:'; history = the k_top=2 best and k_bottom=2 worst entries of "
        "the context (ties in a seeded order), best first; buffer of 64 entries per context, oldest dropped",
        "renderer prompt_policy.renderer=hints: the digits 1-9 of the prompter's first line pick the instance's task "
        "hints by number (at most 2), no digit is no prompt (a fragment vocabulary a tiny prompter can write); "
        "renderer=text takes the first line verbatim; the worker reads '<prompt>\\n<instance prompt>'",
        "reward: R(p) = the worker's mean success over the M instances (G x M worker calls per context and step, "
        "counted, capped by prompt_policy.max_worker_calls); GRPO group z-score on the prompter's tokens",
        "critic prompt_policy.critic=failures: the number of failed instances and the first failure's trace (no "
        "model); critiques enter the history",
        "distillation: distill_coef=1 x the token-mean NLL of the best prompt found so far for each of the step's "
        "contexts under the history-free prompt (rejection-sampling fine-tuning), every step beside GRPO; best = the "
        "highest running mean over every evaluation of a prompt (as the worker reads it), re-evaluated each time the "
        "prompter writes it again; the target moves only to a strictly higher estimate (prompt_policy.target=mean; "
        "first_max: the first top R, never re-evaluated, before issue 41)",
        "group_size=8 prompts per context, AdamW lr 5e-5 as grpo, no KL; the prompter sampled at T=2.0, not grpo's "
        "0.8: the tiny prompter at 0.8 writes hint 1 in 92-99% of its lines and never the hint that helps, and at "
        "2.0 the loop finds it (the oracle worker: 3 of 3 seeds at 1.000 by step 40, against 2 of 3 by step 60; a "
        "hint-reading worker: 0.623 against 0.493; the shipped worker: no prompt either way; docs/prompt_policy.md). "
        "For a real LM prompter set sampling.temperature=1.0",
    ),
    sampling=dataclasses.replace(GRPO.sampling, temperature=2.0),
    prompt_policy=PromptPolicy(),
    run_defaults=(("task", "arithmetic"),),
)
