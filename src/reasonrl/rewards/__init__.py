"""Built-in rewards and the reward contract.

A reward is any callable ``(prompts, completions, **columns) -> list[float | None]`` (see
:mod:`reasonrl.rewards.base`); call it through :func:`score_rewards` to get validation, metrics
and errors that name the task, row and completion. Built-ins can be made by name from config
files with :func:`get_reward` (names in :data:`REWARDS`).
"""

from __future__ import annotations

from typing import Any, Callable

from .answers import (
    EXTRACTORS,
    extract_boxed,
    extract_last_number,
    extract_tag,
    normalize_number,
    normalize_text,
    parse_number,
    resolve_extractor,
)
from .base import Reward, RewardError, RewardFn, RewardResult, score_rewards, summarize
from .combine import ComponentError, Weighted
from .format import FormatRegex, RequiredSections
from .length import LengthPenalty, OverlongPenalty, completion_lengths
from .match import ExactMatch, NumericMatch, column_values
from .judge import JudgeReward
from .mathverify import MathVerify
from .physics import PhysicsMatch
from .consistency import ConsistencyReward
from .sets import SetReward
from .steps import SidExact, SidLevels
from .temporal import TempoReward
from .user import FunctionReward, UserReward, is_reward_path

__all__ = [
    "Reward",
    "RewardResult",
    "RewardError",
    "RewardFn",
    "score_rewards",
    "summarize",
    "ExactMatch",
    "NumericMatch",
    "MathVerify",
    "PhysicsMatch",
    "FormatRegex",
    "RequiredSections",
    "OverlongPenalty",
    "LengthPenalty",
    "Weighted",
    "TempoReward",
    "SidExact",
    "SidLevels",
    "SetReward",
    "ConsistencyReward",
    "ComponentError",
    "FunctionReward",
    "UserReward",
    "JudgeReward",
    "REWARDS",
    "get_reward",
    "normalize_number",
    "normalize_text",
    "parse_number",
    "extract_boxed",
    "extract_tag",
    "extract_last_number",
    "EXTRACTORS",
    "resolve_extractor",
    "column_values",
    "completion_lengths",
]

# Name -> factory. Weighted is not listed: it takes reward objects, which a config builds first.
REWARDS: dict[str, Callable[..., Reward]] = {
    "exact_match": ExactMatch,
    "numeric": NumericMatch,
    "math_verify": MathVerify,
    "physics_match": PhysicsMatch,
    "format_regex": FormatRegex,
    "sections": RequiredSections,
    "overlong": OverlongPenalty,
    "length": LengthPenalty,
    "tempo": TempoReward,
    "sid_exact": SidExact,
    "sid_levels": SidLevels,
    "sspo": SetReward,
    "consistency": ConsistencyReward,
    "judge": JudgeReward,
}


def get_reward(name: str, **kwargs: Any) -> Reward:
    """Build the built-in reward registered as ``name`` with ``kwargs``, or a user's function named
    ``path/to/rewards.py:function`` (:mod:`.user`: TRL's contract; it takes no options).

    Raises:
        ValueError: ``name`` is not in :data:`REWARDS` (the message lists the valid names).
        TypeError: ``kwargs`` do not fit that reward's constructor (the message names it).
    """
    if is_reward_path(name):
        if kwargs:
            raise TypeError(
                f"get_reward({name!r}): a reward function from a file takes no options, got {sorted(kwargs)}"
            )
        return UserReward(name)
    if name not in REWARDS:
        raise ValueError(
            f"unknown reward {name!r}; valid names: {', '.join(sorted(REWARDS))}, or a function in a "
            "Python file: path/to/rewards.py:function"
        )
    try:
        return REWARDS[name](**kwargs)
    except TypeError as err:
        raise TypeError(f"get_reward({name!r}): {err}") from err
