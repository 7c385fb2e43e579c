"""EvoEnv's environment pool with rotation (spec envs-selfplay-eval.md section 2 (b), [inferred]).

Every entry keeps a running accuracy ``p_hat``, an EMA of the solver's training rollouts on it. Each
observation is a *check*: an environment above ``p_hi`` (too easy) or at ``p_zero`` or below (never
solved) for ``patience`` consecutive checks is retired. Past ``capacity`` entries, the oldest written
environment goes first. Seed environments are never retired or evicted.

The pool is plain data (a list of dicts, JSON-able) so that the part's checkpointed state holds it and
a resumed run continues with the same pool, the same EMAs and the same counters.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from typing import Any

__all__ = ["EnvPool", "env_id"]


def env_id(code: str) -> str:
    """A stable short id of a module's code."""
    return hashlib.sha256(code.encode()).hexdigest()[:12]


@dataclass
class EnvPool:
    """A view over ``entries`` (mutated in place: the list lives in the part's state)."""

    entries: list[dict[str, Any]]
    capacity: int = 64
    ema: float = 0.2  # weight of a new observation
    p_hi: float = 0.8
    p_zero: float = 0.05  # "stays at zero": the EMA from a calibrated start only nears 0
    patience: int = 3  # consecutive checks before retirement

    def add(self, code: str, *, name: str, seed: bool, step: int, p_hat: float | None, difficulty: int = 1) -> str:
        """Admit an environment (its calibration accuracy starts the EMA); evict past capacity."""
        eid = env_id(code)
        self.entries.append(
            {
                "id": eid,
                "code": code,
                "name": name,
                "seed": seed,
                "born": step,
                "p_hat": p_hat,
                "difficulty": difficulty,
                "high": 0,
                "zero": 0,
                "checks": 0,
            }
        )
        written = [e for e in self.entries if not e["seed"]]
        while len(self.entries) > self.capacity and written:
            oldest = min(written, key=lambda e: e["born"])
            self.entries.remove(oldest)
            written.remove(oldest)
        return eid

    def get(self, eid: str) -> dict[str, Any] | None:
        return next((e for e in self.entries if e["id"] == eid), None)

    def observe(self, eid: str, accuracy: float) -> None:
        """One check of an environment: its EMA moves toward ``accuracy``, the counters follow it."""
        e = self.get(eid)
        if e is None:  # retired since it was drawn: nothing left to update
            return
        e["p_hat"] = accuracy if e["p_hat"] is None else (1 - self.ema) * e["p_hat"] + self.ema * accuracy
        e["checks"] += 1
        e["high"] = e["high"] + 1 if e["p_hat"] > self.p_hi else 0
        e["zero"] = e["zero"] + 1 if e["p_hat"] <= self.p_zero else 0

    def rotate(self) -> list[dict[str, Any]]:
        """Retire the written environments too easy or never solved for ``patience`` checks; returns them."""
        gone = [e for e in self.entries if not e["seed"] and max(e["high"], e["zero"]) >= self.patience]
        for e in gone:
            self.entries.remove(e)
        return gone

    def pick(self, rng: random.Random) -> dict[str, Any]:
        return rng.choice(self.entries)

    def stats(self) -> dict[str, float]:
        known = [e["p_hat"] for e in self.entries if e["p_hat"] is not None]
        return {
            "evoenv/pool_size": float(len(self.entries)),
            "evoenv/pool_written": float(sum(not e["seed"] for e in self.entries)),
            "evoenv/pool_p_hat": sum(known) / len(known) if known else float("nan"),
        }
