"""EvoEnv's generator reward (spec envs-selfplay-eval.md section 2 (b), [inferred, modelled on AZR]).

* -1 when the environment fails L1/L2 (it does not parse, is not an environment, crashes, is not
  deterministic or not diverse);
* -0.5 when it fails L3 (self-consistency, degenerate answers, leaks), L4 (the semantic review) or
  novelty;
* otherwise, from the solver's accuracy p_hat on it (L5): AZR's learnability ``1 - p_hat`` when
  ``0 < p_hat < 1``, else 0 (``learnability``); or ``1`` inside the calibration band
  ``[p_lo, p_hi]``, else 0 (``band``). Only an *admitted* environment (p_hat in the band) is paid: the
  spec's "if admitted, r_gen = 1 - p_hat" (section 2 (b)); one that L5 rejects earns 0 (``paid=admitted``).
  ``paid=calibrated`` pays ``1 - p_hat`` to every environment that reached L5, band or not: the reward
  before issue 41, which paid a too-hard environment (p_hat 0.05) 0.95, more than any admitted one.

Pure functions, no torch (the rewards layer).
"""

from __future__ import annotations

__all__ = ["GENERATOR_REWARDS", "PAID", "evoenv_generator_reward", "in_band"]

GENERATOR_REWARDS = ("learnability", "band")
PAID = ("admitted", "calibrated")  # who earns the learnability reward: admitted environments (spec) or all calibrated


def in_band(p_hat: float, p_lo: float, p_hi: float) -> bool:
    """L5: the solver's accuracy lies in the calibration band (both ends included)."""
    return p_lo <= p_hat <= p_hi


def evoenv_generator_reward(
    level: int,
    p_hat: float | None,
    mode: str = "learnability",
    p_lo: float = 0.1,
    p_hi: float = 0.8,
    paid: str = "admitted",
) -> float:
    """The generator's reward for one environment. ``level``: the stage that rejected it (1-2: L1/L2,
    3-4: L3/L4/novelty), or 0 when it reached calibration, which then needs ``p_hat``; ``paid``: see the module."""
    if level in (1, 2):
        return -1.0
    if level in (3, 4):
        return -0.5
    if level != 0:
        raise ValueError(f"level is 0 (calibrated) or a rejecting stage 1-4, got {level}")
    if p_hat is None or not 0.0 <= p_hat <= 1.0:
        raise ValueError(f"a calibrated environment needs p_hat in [0, 1], got {p_hat}")
    if paid not in PAID:
        raise ValueError(f"paid is one of {PAID}, got {paid!r}")
    if mode == "band":
        return float(in_band(p_hat, p_lo, p_hi))
    if mode != "learnability":
        raise ValueError(f"mode is one of {GENERATOR_REWARDS}, got {mode!r}")
    if paid == "admitted" and not in_band(p_hat, p_lo, p_hi):
        return 0.0  # rejected by L5: the spec pays admitted environments only (section 2 (b))
    return 1.0 - p_hat if 0.0 < p_hat < 1.0 else 0.0
