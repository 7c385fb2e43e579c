"""The Task protocol: problems with references, a verifier, demonstrations and an answer extractor.

A task hands out :class:`Item` s from two splits that never overlap: every problem has a
canonical key, and a salted hash of that key decides its split once and for all. Sampling
order then depends on the seed, but membership never does, for any seed or sample size.
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Protocol, Sequence, TypeVar, runtime_checkable

from ..errors import UserError
from ..seeds import stable_seed  # noqa: F401 - re-exported: tasks seed their streams with it
from ..rewards.base import Reward, RewardResult
from .protocols import prepare_verify  # noqa: F401 - re-exported: TaskReward and evaluation call it

T = TypeVar("T")

SPLITS = ("train", "test")


@dataclass(frozen=True)
class Item:
    """One problem: what the model sees, the reference answer, and anything a verifier needs."""

    key: str  # canonical identity of the problem (decides the split)
    prompt: str | list[dict[str, str]]  # text, or chat messages (TRL's conversational format; models.chat renders both)
    answer: str
    meta: dict[str, Any] = field(default_factory=dict)
    demo: str | None = None  # a correct completion (chain of thought + answer) for warm starts


@runtime_checkable
class Task(Protocol):
    name: str

    def iter_items(self, split: str, seed: int) -> Iterator[Item]:
        """An endless (or, for files, epoch-cycling) stream of items of one split."""

    def verify(self, completion: str, answer: str, meta: dict[str, Any]) -> float:
        """Score in [0, 1]; 1.0 means correct."""

    def extract_answer(self, completion: str) -> str | None:
        """The normalised final answer (what majority votes and error clusters compare), or None."""

    # Optional abilities (a budget, batched verification, diagnostics, environments, hints, ...) are
    # protocols of their own in reasonrl.tasks.protocols, asked with provides(task, Ability).


class TaskWrapper:
    """A task that changes some of another task's items and is that task for everything else: the
    verifier, ``extract_answer``, options, budget, guidance. Subclasses set ``self.task`` (and usually
    override ``iter_items``); ``delegate`` names the attribute ``__getattr__`` forwards to (default
    ``task``: a wrapper of a wrapper forwards to the next one)."""

    delegate = "task"

    def __init__(self, task: Any):
        self.task, self.name = task, task.name

    @property
    def wrapped(self) -> Any:
        """The task this one forwards to (tasks.protocols.provides looks through wrappers with it)."""
        return getattr(self, self.delegate)

    def __getattr__(self, name: str) -> Any:
        if name in ("task", self.delegate):  # not yet set (copy, pickle): no recursion
            raise AttributeError(name)
        return getattr(getattr(self, self.delegate), name)

    def iter_items(self, split: str, seed: int) -> Iterator[Item]:
        return self.task.iter_items(split, seed)

    def verify(self, completion: str, answer: str, meta: dict[str, Any]) -> float:
        return self.task.verify(completion, answer, meta)

    def extract_answer(self, completion: str) -> str | None:
        return self.task.extract_answer(completion)


def in_test_split(key: str, test_fraction: float, salt: str = "reasonrl-split-v1") -> bool:
    """Deterministic split membership by a salted hash of the problem's key."""
    digest = hashlib.sha256(f"{salt}\x00{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < test_fraction


def check_split(split: str) -> None:
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; valid splits: {list(SPLITS)}")


def make_config(cls: type, task: str, options: dict[str, Any]) -> Any:
    """``cls(**options)`` for task ``task``, an unknown option named with the list of valid ones."""
    valid = {f.name for f in dataclasses.fields(cls)}
    if set(options) - valid:
        raise UserError(f"unknown option(s) {sorted(set(options) - valid)} for {task}; valid: {sorted(valid)}")
    return cls(**options)


def split_user_items(
    name: str, train: list[Item], test: list[Item] | None, split: str, test_fraction: float, source: str
) -> list[Item]:
    """One split of a task's user rows: ``test`` rows when given, else a hash fraction of ``train``."""
    check_split(split)
    if test is not None:
        items = train if split == "train" else test
    else:
        items = [it for it in train if in_test_split(it.key, test_fraction) == (split == "test")]
    if not items:
        raise UserError(f"{name}: the {split} split of {source} is empty (test_fraction={test_fraction})")
    return items


def user_splits(data: str | None, test_data: str | None, load: Callable[[str], T]) -> dict[str, T | None] | None:
    """A task's user data, loaded (and so validated) up front: ``{"train", "test"}`` (test None when
    not given), or None when the task has no ``data`` option set (it generates its own)."""
    if data is None:
        return None
    return {"train": load(data), "test": load(test_data) if test_data else None}


def epochs(items: list[Item], rng: random.Random) -> Iterator[Item]:
    """Endless passes over ``items``, each in a fresh order drawn from ``rng``."""
    while True:
        order = list(range(len(items)))
        rng.shuffle(order)
        yield from (items[i] for i in order)


def take_items(task: Task, split: str, n: int, seed: int = 0, unique: bool = True) -> list[Item]:
    """The first ``n`` items of a split's stream, distinct by key when ``unique``."""
    out, seen = [], set()
    max_draws = 200 * n + 1000  # a small finite problem space must fail loudly, not spin
    for draws, item in enumerate(task.iter_items(split, seed)):
        if draws >= max_draws:
            raise UserError(f"task {task.name!r} has fewer than {n} distinct {split} problems (got {len(out)})")
        if unique and item.key in seen:
            continue
        seen.add(item.key)
        out.append(item)
        if len(out) == n:
            return out
    if len(out) < n and not unique:
        raise UserError(f"task {task.name!r} split {split!r} ran out after {len(out)} items")
    return out


def is_correct(score: float) -> bool:
    return score >= 1.0 - 1e-9


class TaskReward(Reward):
    """The task's own verifier as a reward in the TRL contract (columns ``answer`` and ``meta``)."""

    def __init__(self, task: Task, name: str = "correct"):
        self.task, self.name = task, name

    def score(self, prompts: Sequence[str], completions: Sequence[str], **columns: Any) -> RewardResult:
        answers, metas = columns["answer"], columns.get("meta") or [{}] * len(completions)
        prepare_verify(self.task, completions, metas)
        values = [float(self.task.verify(c, a, m)) for c, a, m in zip(completions, answers, metas)]
        unparsed = sum(self.task.extract_answer(c) is None for c in completions) / max(len(completions), 1)
        return RewardResult(values, {f"reward/{self.name}/unparsed_frac": unparsed})


def reward_columns(items: Sequence[Item]) -> dict[str, list[Any]]:
    """Dataset columns handed to reward functions for these items (TRL passes columns likewise)."""
    return {"answer": [it.answer for it in items], "meta": [it.meta for it in items]}
