"""Multi-turn episodes as a rollout strategy (the ``generate`` hook): any recipe trains on agent episodes.

``Recipe(..., episodes=Episodes(max_turns=4))``, or ``episodes.max_turns=4`` on the command line with a
task that has environments. The task gives one environment per rollout row: ``task.environment(item)``
(``reset(item) -> str``, ``step(action_text) -> (observation, done, answer)``, optional ``close()``;
:mod:`reasonrl.envs`). Each row of the rollouts is one episode (:mod:`reasonrl.rollout.episode`): its
completion is every turn's ids, the policy's and the observations', its ``trainable`` mask is 1 on the
policy's alone, and its text is the episode's answer in ``answer_format`` (what the task's verifier
scores; "" when none). An episode cut by the turn cap or the context cap gets ``turn_limit_reward`` /
``overflow_reward`` as its reward, whatever the task says. The batch maker and the trainer see ordinary
rollouts: GRPO broadcasts the episode's reward to its trainable tokens, and every loss reads the mask.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ..rollout import Rollouts
from ..rollout.agent import EpisodeOptions, environment_rollouts, is_episodic, require_episodic
from ..rollout.multiturn import EpisodeLimits
from ..rewards.sandbox.levels import UID_SLOTS
from ..config.rules import Rule, at_least, within
from ..tasks.base import TaskWrapper
from ..tasks.protocols import WithEnvironments
from .protocol import TaskSetup, register_part
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
    none); ``workers``: environments stepped at once; ``max_live``: episodes run together, in waves (a CodeAct
    episode holds one of the sandbox's per-process uids from its first cell to its end: at most 64)."""

    PHASE = "rollout"
    AFTER = ("beam",)  # the order it ran in before the order was declared (one rollout strategy per recipe)

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
    max_live: int = 64  # episodes run at once (a CodeAct episode holds one of the sandbox's 64 uids to its end)

    task_needs: ClassVar[tuple[type, ...]] = (WithEnvironments,)  # each row is an episode in a task's environment
    RULES: ClassVar[dict[str, Rule]] = {
        "max_turns": at_least(1),
        "max_obs_tokens": at_least(1),
        "max_context_tokens": at_least(2),
        "max_turn_tokens": Rule(lambda v, _: v is None or v >= 1, ">= 1, or null for sampling.max_new_tokens"),
        "observation_template": Rule(lambda v, _: str(v).count("{observation}") == 1, "holding {observation} once"),
        "workers": at_least(1),
        "max_live": within(1, UID_SLOTS),
        "answer_format": Rule(lambda v, _: str(v).count("{answer}") == 1, "holding {answer} once"),
    }
    needs = frozenset({"in_process"})  # turns continue from token ids on the trainer's own engine

    @property
    def options(self) -> EpisodeOptions:
        limits = EpisodeLimits(
            self.max_turns, self.max_turn_tokens, self.max_obs_tokens, self.max_context_tokens, self.marker
        )
        return EpisodeOptions(
            limits,
            self.overflow_reward,
            self.turn_limit_reward,
            self.role,
            self.observation_template,
            self.answer_format,
            self.workers,
            self.max_live,
        )

    def wrap_task(self, ctx: TaskSetup) -> tuple[Any, dict[str, float]]:
        """The task, carrying these options: the run's evaluation runs its episodes as training does."""
        require_episodic(ctx.task)  # refused where the run builds its task, before any model loads
        return EpisodicTask(ctx.task, self.options), {}

    def generate(self, req: GenRequest) -> tuple[Rollouts, dict[str, float]]:
        # the episodes' counts travel in ro.extras["metrics"] (environment_rollouts'), so the part adds none
        ro = environment_rollouts(
            req.engine,
            req.task,
            req.items,
            req.group_size,
            req.sampling,
            req.seeds("episode"),
            req.formatter,
            self.options,
        )
        return ro, {}


class EpisodicTask(TaskWrapper):
    """A task with environments and the run's episode options (``episode_options``); all else is the task's."""

    def __init__(self, task: Any, options: EpisodeOptions):
        super().__init__(task)
        self.episode_options = options


def episodic_problems(task: Any, recipe: Any) -> list[str]:
    """One line when ``task`` hands out environments and ``recipe`` does not roll them out as episodes
    (its rollout strategy is not the ``episodes`` part): it would train on single completions, the
    reward reading the first action's text as the answer, while evaluation runs episodes (issue 41).
    Refused rather than given the part with its defaults: turn caps and budgets are the recipe's choice."""
    if not is_episodic(task) or any(isinstance(p, Episodes) for _, p in recipe.hooked("generate")):
        return []
    return [
        f"task {task.name!r} hands out environments (multi-turn episodes), but recipe "
        f"{recipe.name!r} has no episodes part, so it would train on single completions: add it "
        "(episodes.max_turns=4, docs/agents.md) or train recipe codeact"
    ]
