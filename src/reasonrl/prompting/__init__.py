"""Prompt-policy RL (spec envs-selfplay-eval.md 5): a prompter trained on a frozen worker's success, a
contrastive experience buffer, the worker and critic protocols with call budgeting, the prompter's
task, and a toy categorical prompter. The ``prompt_policy`` part (:mod:`reasonrl.parts.prompt_policy`)
runs them in the trainer."""

from .buffer import TARGETS, Experience, ExperienceBuffer, Target, format_history
from .task import PromptTask, context_of, prompt_key, prompter_prompt, render
from .toy import CategoricalPrompter, toy_round
from .workers import CallableWorker, Critic, FailureCritic, ModelWorker, Worker, WorkerCalls, load_worker, worker_input

__all__ = [
    "CallableWorker",
    "CategoricalPrompter",
    "Critic",
    "Experience",
    "ExperienceBuffer",
    "FailureCritic",
    "ModelWorker",
    "PromptTask",
    "TARGETS",
    "Target",
    "Worker",
    "WorkerCalls",
    "context_of",
    "format_history",
    "load_worker",
    "prompt_key",
    "prompter_prompt",
    "render",
    "toy_round",
    "worker_input",
]
