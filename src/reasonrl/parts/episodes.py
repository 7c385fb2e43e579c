"""Multi-turn episodes as a rollout strategy (the ``generate`` hook): any recipe trains on agent episodes.

``Recipe(..., episodes=Episodes(max_turns=4))``, or ``episodes.max_turns=4`` on the command line with a
task that has environments. The task gives one environment per rollout row: ``task.environment(item)``
(``reset(item) -> str``, ``step(action_text) -> (observation, done, answer)``, optional ``close()``;
:mod:`reasonrl.envs`). Each row of the rollouts is one episode (:mod:`reasonrl.rollout.episode`): its
completion is every turn's ids, the policy's and the observations', its ``trainable`` mask is 1 on the
policy's alone, and its text is the episode's answer in ``answer_format`` (what the task's verifier
scores; "" when none). An episode cut by the turn cap or the context cap gets ``turn_limit_reward`` /
``overflow_reward`` as its reward, whatever the task says. The batch maker and the trainer see ordinary rollouts: GRPO broadcasts
the episode's reward to its trainable tokens, and every loss reads the mask.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import ClassVar

from ..errors import UserError
from ..rollout import Rollouts
from ..rollout.episode import FINISH, Episode, episodes_to_rollouts, fixed_rewards
from ..rollout.multiturn import EngineTurns, EpisodeLimits, ObservationFormat, run_episodes
from ..rules import Rule, at_least
from ..seeds import stable_seed
from .protocol import register_part
from .strategy import GenRequest


@register_part("episodes")
@dataclass(frozen=True)
class Episodes:
    """``max_turns``: policy turns per episode; ``max_turn_tokens``: each turn's budget (null: the run's
    ``sampling.max_new_tokens``); ``max_obs_tokens``: an observation's cap (middle-truncated, ``marker``
    where it was cut); ``max_context_tokens``: prompt + episode; ``overflow_reward`` / ``turn_limit_reward``:
    the reward of an episode that hit the context / turn cap (spec: 0); ``role``: the chat role of an
    observation; ``observation_template``: plain prompts' turn markers around it; ``answer_format``: the
    text of an answered row, what the task's verifier reads (``{answer}``: the environment's answer; "" when
    none); ``workers``: environments stepped at once."""

    max_turns: int = 4
    max_turn_tokens: int | None = None
    max_obs_tokens: int = 256
    max_context_tokens: int = 2048
    overflow_reward: float = 0.0
    turn_limit_reward: float = 0.0
    role: str = "user"
    observation_template: str = "\nObservation:\n{observation}\n"
    marker: str = "\n...\n"
    answer_format: str = "{answer}"  # a row's text, what the task's verifier reads (arithmetic's: "A:{answer}")
    workers: int = 8

    RULES: ClassVar[dict[str, Rule]] = {
        "max_turns": at_least(1), "max_obs_tokens": at_least(1), "max_context_tokens": at_least(2),
        "max_turn_tokens": Rule(lambda v, _: v is None or v >= 1, ">= 1, or null for sampling.max_new_tokens"),
        "observation_template": Rule(lambda v, _: str(v).count("{observation}") == 1, "holding {observation} once"),
        "workers": at_least(1),
        "answer_format": Rule(lambda v, _: str(v).count("{answer}") == 1, "holding {answer} once"),
    }
    needs = frozenset({"in_process"})  # turns continue from token ids on the trainer's own engine

    @property
    def limits(self) -> EpisodeLimits:
        return EpisodeLimits(self.max_turns, self.max_turn_tokens, self.max_obs_tokens, self.max_context_tokens,
                             self.marker)

    def generate(self, req: GenRequest) -> Rollouts:
        G, tok = req.group_size, req.engine.tok
        make = getattr(req.task, "environment", None)
        if make is None:
            raise UserError(f"the episodes part needs a task with environments: task {getattr(req.task, 'name', '?')!r} "
                            "has no environment(item) method (reasonrl.envs, docs/agents.md)")
        rows = [it for it in req.items for _ in range(G)]
        envs = [make(it) for it in rows]
        try:
            prompts = [req.formatter.render(env.reset(it)) for env, it in zip(envs, rows)]
            prompt_ids = [list(tok(p)["input_ids"]) for p in prompts]  # as the engine encodes a prompt
            seeds = [stable_seed(s, j) for s in req.seeds("episode") for j in range(G)]
            fmt = ObservationFormat.build(tok, req.formatter, role=self.role, template=self.observation_template,
                                          marker=self.marker)
            eps = run_episodes(EngineTurns(req.engine), envs, prompt_ids, req.sampling, seeds, self.limits, fmt,
                               lambda ids: tok.decode(ids, skip_special_tokens=True), self.workers)
            evidence = [str(env.evidence()) if hasattr(env, "evidence") else "" for env in envs]
        finally:
            for env in envs:
                close = getattr(env, "close", None)
                if close is not None:
                    close()
        texts = ["" if e.answer is None else self.answer_format.replace("{answer}", e.answer) for e in eps]
        fixed = fixed_rewards(eps, {"turns": self.turn_limit_reward, "context": self.overflow_reward})
        ro = episodes_to_rollouts(eps, prompts, G, tok.pad_token_id, texts, fixed)
        ro.extras["metrics"] = episode_metrics(eps)
        ro.extras["evidence"] = evidence  # per row, the environment's evidence() (a judge reads it)
        return ro


def episode_metrics(eps: list[Episode]) -> dict[str, float]:
    """Turns per episode, the share of each finish reason, and the share of the tokens the policy sampled."""
    n, reasons = max(len(eps), 1), Counter(e.finish_reason for e in eps)
    tokens = sum(len(e.ids) for e in eps)
    return {"episode/turns_mean": sum(e.turns for e in eps) / n,
            **{f"episode/finish_{r}": reasons[r] / n for r in FINISH},
            "episode/trainable_frac": sum(sum(e.loss_mask) for e in eps) / max(tokens, 1)}

