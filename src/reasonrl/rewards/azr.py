"""AZR's rewards (Absolute Zero Reasoner, arXiv 2505.03335; the released code's values).

* Proposer (learnability, ``generation_accuracy_convertion: one_minus``): with p_hat the solver's
  accuracy over n samples of the proposed task, ``1 - p_hat`` when ``p_hat > 0``, else 0: a task the
  solver always solves (p_hat = 1) or never solves (p_hat = 0) teaches nothing.
* Format shaping, applied to both roles: the role reward when the format is right and the role
  reward is > 0; -0.5 when the format is right but the answer is wrong or the task invalid; -1 when
  the format is wrong.

Pure functions, no torch (the rewards layer).
"""

from __future__ import annotations

__all__ = ["BAD_FORMAT", "WRONG", "azr_format_shaping", "azr_proposer_reward", "azr_proposal_reward"]

WRONG = -0.5  # format right, answer wrong or task invalid
BAD_FORMAT = -1.0


def azr_proposer_reward(p_hat: float) -> float:
    """``1 - p_hat if p_hat > 0 else 0``: 0 -> 0, 1 -> 0, 0.25 -> 0.75."""
    if not 0.0 <= p_hat <= 1.0:
        raise ValueError(f"p_hat is an accuracy in [0, 1], got {p_hat}")
    return 1.0 - p_hat if p_hat > 0 else 0.0


def azr_format_shaping(role_reward: float, format_ok: bool) -> float:
    """The solver's final reward: ``role_reward`` if the format is right and it is > 0, else -0.5
    (right format, wrong answer), or -1 (wrong format)."""
    if not format_ok:
        return BAD_FORMAT
    return role_reward if role_reward > 0 else WRONG


def azr_proposal_reward(format_ok: bool, valid: bool, p_hat: float | None) -> float:
    """The proposer's final reward: -1 for a wrong format, -0.5 for an invalid task (it does not
    parse, run or repeat), else the learnability ``1 - p_hat`` (0 at p_hat in {0, 1}: a valid but
    useless task scores above an invalid one, as in the released reward manager)."""
    if not format_ok:
        return BAD_FORMAT
    if not valid:
        return WRONG
    if p_hat is None:
        raise ValueError("a valid proposal needs the solver's accuracy p_hat")
    return azr_proposer_reward(p_hat)
