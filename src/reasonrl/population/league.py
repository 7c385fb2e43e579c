"""A population's league: every member's rating, PFSP matchmaking and the games played, kept in a plain
dict (a part's checkpointed state), so a resumed run continues with the same numbers bit for bit.

Each student attempt at a teacher's task is one 1-v-1 game: the student wins when it solves the task,
the teacher when it does not (PopuLoRA, spec envs-selfplay-eval.md 4 (b)). A task's attempts are
played in the order given. Teachers and students are two sub-populations: a teacher is only ever
matched with students and the other way round.
"""

from __future__ import annotations

import random
from typing import Sequence

from .pbt import Replacement, offspring_rating
from .ratings import Rating, RatingModel, conservative, pfsp_pick

__all__ = ["League"]


class League:
    """Ratings of ``teachers`` and ``students`` in ``state["ratings"]`` (name -> [mu, sigma]), the game
    count in ``state["games"]``; created at the rating model's prior on first use."""

    def __init__(
        self, state: dict, teachers: Sequence[str], students: Sequence[str], model: RatingModel, pfsp: str = "balanced"
    ):
        self.teachers, self.students, self.model, self.pfsp = list(teachers), list(students), model, pfsp
        self.ratings: dict[str, list[float]] = state.setdefault(
            "ratings", {n: list(model.initial()) for n in self.teachers + self.students}
        )
        state.setdefault("games", 0)
        self.state = state
        missing = [n for n in self.teachers + self.students if n not in self.ratings]
        if missing:
            raise ValueError(f"the league's state has no rating for {missing}: it belongs to another population")

    def rating(self, name: str) -> Rating:
        mu, sigma = self.ratings[name]
        return (mu, sigma)

    def p_student_wins(self, student: str, teacher: str) -> float:
        return self.model.win_probability(self.rating(student), self.rating(teacher))

    def opponent(self, member: str, rng: random.Random) -> str:
        """A PFSP opponent for ``member`` from the other sub-population: weight p (1 - p), p the predicted
        probability that the student of the pair wins (the weight is symmetric in p and 1 - p)."""
        if member in self.teachers:
            p = [self.p_student_wins(s, member) for s in self.students]
            return self.students[pfsp_pick(p, rng, self.pfsp)]
        p = [self.p_student_wins(member, t) for t in self.teachers]
        return self.teachers[pfsp_pick(p, rng, self.pfsp)]

    def play(self, student: str, teacher: str, solved: Sequence[bool]) -> None:
        """The games of ``student``'s attempts at one of ``teacher``'s tasks (True: solved, the student wins)."""
        s, t = self.model.games(self.rating(student), self.rating(teacher), list(solved))
        self.ratings[student], self.ratings[teacher] = list(s), list(t)
        self.state["games"] += len(solved)

    def inherit(self, plan: Sequence[Replacement], offspring_sigma: float) -> None:
        """Each replaced member takes its first parent's rating with sigma raised (PBT offspring)."""
        for r in plan:
            self.ratings[r.child] = list(offspring_rating(self.rating(r.parents[0]), offspring_sigma))

    def sub_ratings(self, names: Sequence[str]) -> dict[str, Rating]:
        return {n: self.rating(n) for n in names}

    def metrics(self, prefix: str = "populora/") -> dict[str, float]:
        """Each member's mu, sigma and conservative skill, the games so far, the spread of each side."""
        out: dict[str, float] = {f"{prefix}games": float(self.state["games"])}
        for n in self.teachers + self.students:
            r = self.rating(n)
            out.update({f"{prefix}mu_{n}": r[0], f"{prefix}sigma_{n}": r[1], f"{prefix}skill_{n}": conservative(r)})
        for side, names in (("teachers", self.teachers), ("students", self.students)):
            skills = [conservative(self.rating(n)) for n in names]
            out[f"{prefix}{side}_skill_mean"] = sum(skills) / len(skills)
        return out
