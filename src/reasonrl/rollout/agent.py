"""Rollouts of a task with environments: one multi-turn episode per row, for training and for evaluation alike.

A task is *episodic* when it has ``environment(item)`` (:mod:`reasonrl.envs`). Training reaches it
through the ``episodes`` part (its ``generate`` hook); evaluation (:mod:`reasonrl.eval.runner`) calls
:func:`environment_rollouts` for such a task instead of single-turn generation, with the options the
run's ``episodes`` part put on the task (``task.episode_options``) or :class:`EpisodeOptions`' defaults.
So a held-out answer is the episode's answer, never the first action's text read as an answer.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass
from typing import Any, Sequence

from ..errors import UserError
from ..models.chat import PromptFormatter, context_length
from ..seeds import stable_seed
from ..tasks.protocols import WithEnvironments, provides, require
from .base import Rollouts, SamplingParams
from .episode import FINISH, episodes_to_rollouts, fixed_rewards
from .multiturn import EngineTurns, EpisodeLimits, ObservationFormat, run_episodes


@dataclass(frozen=True)
class EpisodeOptions:
    """How episodes run (the ``episodes`` part's options, docs/agents.md)."""

    limits: EpisodeLimits = EpisodeLimits()
    overflow_reward: float = 0.0
    turn_limit_reward: float = 0.0
    role: str = "user"
    observation_template: str = "\nObservation:\n{observation}\n"
    answer_format: str = "{answer}"
    workers: int = 8
    # episodes run at once: a CodeAct episode holds a sandbox session (one of the sandbox's 64 uids per
    # process) from its first cell to its end, so more at once than that would wait on each other forever
    max_live: int = 64


def is_episodic(task: Any) -> bool:
    """Whether ``task`` hands out environments (its rows are episodes, not single completions)."""
    return provides(task, WithEnvironments)


def require_episodic(task: Any) -> None:
    """A UserError naming ``task`` unless it hands out environments."""
    require(task, WithEnvironments, "episodes", "reasonrl.envs, docs/agents.md")


def environment_rollouts(
    engine: Any,
    task: Any,
    items: Sequence[Any],
    n: int,
    sampling: SamplingParams,
    seeds: Sequence[int],
    formatter: PromptFormatter,
    opts: EpisodeOptions,
) -> Rollouts:
    """``n`` episodes per item (rows item-major) on ``engine`` (an in-process HF engine: turns continue
    from token ids), seeded per item by ``seeds``. The context cap is the smaller of the options' and the
    model's context length (the model cannot attend past its positions)."""
    require_episodic(task)
    if not (hasattr(engine, "tok") and hasattr(engine, "model")):
        raise UserError(
            f"episodes run on the in-process engine (turns continue from token ids); got "
            f"{type(engine).__name__}: use rollout.engine=hf"
        )
    tok = engine.tok
    rows = [it for it in items for _ in range(n)]
    row_seeds = [stable_seed(s, j) for s in seeds for j in range(n)]
    model_ctx = context_length(engine.model)
    limits = (
        opts.limits
        if model_ctx is None or model_ctx >= opts.limits.max_context_tokens
        else dataclasses.replace(opts.limits, max_context_tokens=model_ctx)
    )
    fmt = ObservationFormat.build(
        tok, formatter, role=opts.role, template=opts.observation_template, marker=limits.marker
    )
    prompts, eps, evidence, env_counts = [], [], [], []
    for s in range(0, len(rows), opts.max_live):  # waves: an episode holds its sandbox session to its end
        wave = _wave(
            engine,
            task,
            rows[s : s + opts.max_live],
            row_seeds[s : s + opts.max_live],
            sampling,
            formatter,
            limits,
            fmt,
            opts.workers,
        )
        for acc, part in zip((prompts, eps, evidence, env_counts), wave):
            acc += part
    texts = ["" if e.answer is None else opts.answer_format.replace("{answer}", e.answer) for e in eps]
    fixed = fixed_rewards(eps, {"turns": opts.turn_limit_reward, "context": opts.overflow_reward})
    ro = episodes_to_rollouts(eps, prompts, n, tok.pad_token_id, texts, fixed)
    ro.extras["metrics"] = {**episode_metrics(eps), **mean_counts(env_counts)}
    ro.extras["token_budget"] = episode_budget(
        limits, sampling
    )  # what length rewards count the policy's tokens against
    ro.extras["evidence"] = evidence  # per row, the environment's evidence() (a judge reads it)
    return ro


def episode_budget(limits: EpisodeLimits, sampling: SamplingParams) -> int:
    """The most tokens the policy can sample in one episode: every turn at its budget, never past the
    context cap (a length reward's ``max_new_tokens``, issue 41)."""
    return min(limits.max_turns * (limits.max_turn_tokens or sampling.max_new_tokens), limits.max_context_tokens)


def _wave(
    engine: Any,
    task: Any,
    rows: Sequence[Any],
    seeds: Sequence[int],
    sampling: SamplingParams,
    formatter: PromptFormatter,
    limits: EpisodeLimits,
    fmt: ObservationFormat,
    workers: int,
) -> tuple:
    """One wave of episodes run together: (prompts, episodes, evidence, environment counts); every
    environment is closed before the next wave starts."""
    tok, envs = engine.tok, [task.environment(it) for it in rows]
    try:
        prompts = [formatter.render(env.reset(it)) for env, it in zip(envs, rows)]
        prompt_ids = [list(tok(p)["input_ids"]) for p in prompts]  # as the engine encodes a prompt
        eps = run_episodes(
            EngineTurns(engine),
            envs,
            prompt_ids,
            sampling,
            seeds,
            limits,
            fmt,
            lambda ids: tok.decode(ids, skip_special_tokens=True),
            workers,
        )
        evidence = [str(env.evidence()) if hasattr(env, "evidence") else "" for env in envs]
        counts = [env.metrics() for env in envs if callable(getattr(env, "metrics", None))]
    finally:
        for env in envs:
            close = getattr(env, "close", None)
            if close is not None:
                close()
    return prompts, eps, evidence, counts


def episode_metrics(eps: Sequence[Any]) -> dict[str, float]:
    """Turns per episode, the share of each finish reason, and the share of the tokens the policy sampled."""
    n, reasons = max(len(eps), 1), Counter(e.finish_reason for e in eps)
    tokens = sum(len(e.ids) for e in eps)
    return {
        "episode/turns_mean": sum(e.turns for e in eps) / n,
        **{f"episode/finish_{r}": reasons[r] / n for r in FINISH},
        "episode/trainable_frac": sum(sum(e.loss_mask) for e in eps) / max(tokens, 1),
    }


def mean_counts(counts: Sequence[dict[str, float]]) -> dict[str, float]:
    """Each key of the environments' ``metrics()`` averaged over the episodes that report it, as ``env/<key>``."""
    keys = sorted({k for c in counts for k in c})
    return {f"env/{k}": sum(c[k] for c in counts if k in c) / sum(k in c for c in counts) for k in keys}
