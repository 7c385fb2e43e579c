"""PopuLoRA's teacher reward (spec envs-selfplay-eval.md 4 (b); the paper: "teacher reward ties to
matched-student failure rate", the form [inferred]).

A teacher's valid task earns ``1 - s_hat``, s_hat the matched student's solve rate over n samples. At
s_hat = 0 the spec leaves a choice: AZR's rule gives 0 (an unsolvable task teaches nothing; the
default, ``zero_when_unsolved``), a pure zero-sum reading gives 1. Invalid tasks get AZR's -0.5 and a
wrong format -1 (:mod:`.azr`). Pure functions, no torch.
"""

from __future__ import annotations

from .azr import BAD_FORMAT, WRONG

__all__ = ["teacher_reward", "teacher_proposal_reward"]


def teacher_reward(s_hat: float, zero_when_unsolved: bool = True) -> float:
    """``1 - s_hat``; at ``s_hat == 0``: 0 with ``zero_when_unsolved`` (AZR), else 1 (zero-sum)."""
    if not 0.0 <= s_hat <= 1.0:
        raise ValueError(f"s_hat is a solve rate in [0, 1], got {s_hat}")
    if s_hat == 0.0 and zero_when_unsolved:
        return 0.0
    return 1.0 - s_hat


def teacher_proposal_reward(
    format_ok: bool, valid: bool, s_hat: float | None, zero_when_unsolved: bool = True
) -> float:
    """The teacher's final reward: -1 wrong format, -0.5 invalid task, else :func:`teacher_reward`."""
    if not format_ok:
        return BAD_FORMAT
    if not valid:
        return WRONG
    if s_hat is None:
        raise ValueError("a valid task needs the matched student's solve rate s_hat")
    return teacher_reward(s_hat, zero_when_unsolved)
