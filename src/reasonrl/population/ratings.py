"""Ratings and matchmaking of a population (PopuLoRA; spec envs-selfplay-eval.md 4 (b)).

Ratings come from the ``openskill`` package (MIT, maintained; Weng and Lin 2011), set up so that its
Thurstone-Mosteller full-pairing model is exactly the spec's two-player TrueSkill update: no draw
margin (epsilon 0) and gamma 1. For a win of w over l, with sigma^2 <- sigma^2 + tau^2 first:

    c^2 = 2 beta^2 + sigma_w^2 + sigma_l^2,   t = (mu_w - mu_l) / c,   v = phi(t) / Phi(t),   w = v (v + t)
    mu_w += sigma_w^2 / c * v,   mu_l -= sigma_l^2 / c * v,   sigma^2 <- sigma^2 (1 - sigma^2 / c^2 * w)

and P(i beats j) = Phi((mu_i - mu_j) / sqrt(2 beta^2 + sigma_i^2 + sigma_j^2)). A member is ranked by
its conservative skill mu - 3 sigma. Defaults: mu0 25, sigma0 25/3, beta sigma0/2, tau sigma0/100.

PFSP (prioritised fictitious self-play, AlphaStar's "balanced" weighting; the paper: "concentrates on
near-balanced matchups"): an opponent is picked with probability proportional to f(p) = p (1 - p),
p the predicted win probability, largest at p = 1/2. Ratings are plain (mu, sigma) float pairs, so a
checkpoint holds them exactly.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Sequence

from ..errors import UserError

__all__ = ["PFSP_MODES", "RatingModel", "conservative", "pfsp_pick", "pfsp_weights"]

PFSP_MODES = ("balanced", "uniform")
Rating = tuple[float, float]  # (mu, sigma)


def _one(*_args) -> float:
    return 1.0  # gamma = 1: the TrueSkill variance update (openskill's default shrinks it by sigma / c)


@dataclass(frozen=True)
class RatingModel:
    """The spec's TrueSkill through openskill; every game is one 1-v-1 match."""

    mu0: float = 25.0
    sigma0: float = 25.0 / 3.0
    beta: float = 25.0 / 6.0
    tau: float = 25.0 / 300.0

    def _model(self):
        try:
            from openskill.models import ThurstoneMostellerFull
        except ImportError as err:  # an optional extra: only the population recipes need it
            raise UserError(
                "PopuLoRA's ratings need the openskill package: pip install 'reasonrl[population]' "
                "(or pip install openskill)"
            ) from err
        return ThurstoneMostellerFull(
            mu=self.mu0, sigma=self.sigma0, beta=self.beta, tau=self.tau, epsilon=0.0, gamma=_one
        )

    def initial(self) -> Rating:
        return (self.mu0, self.sigma0)

    def play(self, winner: Rating, loser: Rating) -> tuple[Rating, Rating]:
        """One game: the winner's and the loser's new (mu, sigma)."""
        model = self._model()
        w, l_ = model.rating(mu=winner[0], sigma=winner[1]), model.rating(mu=loser[0], sigma=loser[1])
        [[w2], [l2]] = model.rate([[w], [l_]])  # the first team ranked first: it won
        return (w2.mu, w2.sigma), (l2.mu, l2.sigma)

    def games(self, a: Rating, b: Rating, outcomes: Sequence[bool]) -> tuple[Rating, Rating]:
        """``a`` and ``b`` after the games ``outcomes`` (True: a won), played in order."""
        for a_won in outcomes:
            if a_won:
                a, b = self.play(a, b)
            else:
                b, a = self.play(b, a)
        return a, b

    def win_probability(self, a: Rating, b: Rating) -> float:
        """P(a beats b) = Phi((mu_a - mu_b) / sqrt(2 beta^2 + sigma_a^2 + sigma_b^2))."""
        model = self._model()
        return float(model.predict_win([[model.rating(mu=a[0], sigma=a[1])], [model.rating(mu=b[0], sigma=b[1])]])[0])


def conservative(r: Rating) -> float:
    """mu - 3 sigma: the skill a member has with high confidence (what PBT ranks by)."""
    return r[0] - 3.0 * r[1]


def pfsp_weights(p: Sequence[float], mode: str = "balanced") -> list[float]:
    """(n,) predicted win probabilities -> (n,) selection probabilities: ``balanced`` f(p) = p (1 - p),
    normalised (all-zero weights, e.g. every p in {0, 1}, fall back to uniform); ``uniform`` 1/n."""
    if mode not in PFSP_MODES:
        raise ValueError(f"unknown PFSP mode {mode!r}; valid: {', '.join(PFSP_MODES)}")
    if not len(p):
        raise ValueError("pfsp_weights needs at least one opponent")
    f = [x * (1.0 - x) for x in p] if mode == "balanced" else [1.0] * len(p)
    total = sum(f)
    return [x / total for x in f] if total > 0 else [1.0 / len(p)] * len(p)


def pfsp_pick(p: Sequence[float], rng: random.Random, mode: str = "balanced") -> int:
    """The index of one opponent drawn with :func:`pfsp_weights` (a seeded ``random.Random``)."""
    return rng.choices(range(len(p)), weights=pfsp_weights(p, mode))[0]
