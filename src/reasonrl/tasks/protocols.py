"""The task's optional abilities, declared: one :class:`typing.Protocol` each (issue 44 item 3).

Every task has :class:`reasonrl.tasks.base.Task`'s three methods. Beyond them a task may have
abilities that some parts, evaluation or the loop use; each is a runtime-checkable protocol here,
so the code asks ``provides(task, WithHints)`` (or :func:`require`, which raises the one-line
:class:`~reasonrl.errors.UserError`) instead of probing the task with ``getattr``/``hasattr``. A
part that cannot run without an ability says so in its ``task_needs`` (a tuple of these
protocols), and :func:`reasonrl.config.validate.task_problems` checks them once, on the built
task, before any model loads.

A wrapper (:class:`reasonrl.tasks.base.TaskWrapper`) is the wrapped task for every attribute it does
not define itself; :func:`provides` looks through it (``wrapped``), so the answer does not depend on
how ``isinstance`` reads a wrapper's forwarded attributes (Python 3.12 reads them statically).

``Item`` is written ``Any`` in the signatures: this module sits below :mod:`reasonrl.tasks.base`
(which asks it whether a task prepares its verifications), so that rollouts and data can ask too.
"""

from __future__ import annotations

import random
from typing import Any, Protocol, Sequence, runtime_checkable

from ..errors import UserError

DEFAULT_BUDGET = 128  # new tokens per completion for a task that does not state its own (WithBudget)


@runtime_checkable
class WithBudget(Protocol):
    """Its own completion budget (new tokens), used when the run's ``sampling.max_new_tokens`` is unset."""

    max_new_tokens: int


@runtime_checkable
class PreparesBatches(Protocol):
    """Prepares a batch of ``verify`` calls at once (the sandboxed tasks run all programs in one call)."""

    def prepare(self, completions: list[str], metas: list[dict[str, Any]]) -> None: ...


@runtime_checkable
class WithDiagnostics(Protocol):
    """Task-specific rates of greedy held-out outputs that evaluation reports beside pass@1."""

    def diagnostics(
        self, completions: list[str], metas: list[dict[str, Any]], scores: list[float]
    ) -> dict[str, float]: ...


@runtime_checkable
class WithEnvironments(Protocol):
    """Hands out an environment per item: its rows are multi-turn episodes (reasonrl.envs, docs/agents.md)."""

    def environment(self, item: Any) -> Any: ...


@runtime_checkable
class Episodic(Protocol):
    """Carries the run's episode options (the episodes part's wrapper), so evaluation runs episodes as training does."""

    episode_options: Any  # reasonrl.rollout.agent.EpisodeOptions


@runtime_checkable
class Branching(Protocol):
    """Locates where a completion first goes wrong: (character to branch at, score) (beam sampling)."""

    def branch_point(self, completion: str, meta: dict[str, Any], rng: random.Random) -> tuple[int, float]: ...


@runtime_checkable
class WithStepRewards(Protocol):
    """Segments a completion into steps and rewards each: (character spans or None, rewards) (SAPO)."""

    def step_rewards(self, completion: str, meta: dict[str, Any], mode: str = ...) -> Any: ...


@runtime_checkable
class ReadsGenerated(Protocol):
    """Reads a problem the model wrote back as an item with its true answer, or None (D2Evo's questioner)."""

    def generated_item(self, text: str, parse: str = ...) -> Any: ...


@runtime_checkable
class Judged(Protocol):
    """A scripted judge and edited variants of a reference, for preference pairs (``reasonrl rm pairs``)."""

    def judge(self, item: Any, completion: str) -> Any: ...

    def variants(self, item: Any, rng: random.Random) -> list[str]: ...


@runtime_checkable
class Fitting(Protocol):
    """Fits an item under the run's prompt limit, or None when it must be dropped (tasks.limits)."""

    def fit(self, item: Any, split: str) -> Any: ...


@runtime_checkable
class WithHints(Protocol):
    """Short strategy hints for an item (NudgeRL, prompt policy's hint renderer)."""

    def hints(self, item: Any) -> list[str]: ...


@runtime_checkable
class WithSolutions(Protocol):
    """A privileged reference solution for an item (EGRSD's teacher context)."""

    def reference_solution(self, item: Any) -> str: ...


@runtime_checkable
class WithCritiques(Protocol):
    """Its own stepwise critique of a completion (STRIDE's critic=task, VPD's critique feedback)."""

    def critique(self, item: Any, completion: str) -> Any: ...


@runtime_checkable
class WithSteps(Protocol):
    """Its own step splitter (otherwise steps are the pieces between blank lines)."""

    def steps(self, completion: str) -> list[str]: ...

    def prefix_before_step(self, completion: str, k: int) -> tuple[str, int]: ...


@runtime_checkable
class WithCritiquePrompt(Protocol):
    """Its own prompt for the verifier role (otherwise a generic one for blank-line steps)."""

    def critique_prompt(self, item: Any, completion: str) -> str: ...


@runtime_checkable
class Wraps(Protocol):
    """A task wrapper: ``wrapped`` is the task it forwards everything it does not define to."""

    @property
    def wrapped(self) -> Any: ...


ABILITIES: tuple[type, ...] = (
    WithBudget,
    PreparesBatches,
    WithDiagnostics,
    WithEnvironments,
    Episodic,
    Branching,
    WithStepRewards,
    ReadsGenerated,
    Judged,
    Fitting,
    WithHints,
    WithSolutions,
    WithCritiques,
    WithSteps,
    WithCritiquePrompt,
)


def members(ability: type) -> tuple[str, ...]:
    """The attributes and methods an ability's protocol asks for, in declaration order."""
    names = list(vars(ability).get("__annotations__", {}))
    names += [n for n, v in vars(ability).items() if callable(v) and not n.startswith("_")]
    return tuple(names)


def provides(task: Any, ability: type) -> bool:
    """Whether ``task`` (or, for a wrapper, the task it wraps) has ``ability``."""
    while True:
        if isinstance(task, ability):
            return True
        if not isinstance(task, Wraps):
            return False
        task = task.wrapped


def missing(task: Any, ability: type) -> str:
    """One line naming ``task`` and the members of ``ability`` it lacks ("task 'gym' has no hints()")."""
    shown = ", ".join(f"{m}()" if callable(vars(ability).get(m)) else m for m in members(ability))
    return f"task {task.name!r} has no {shown}"


def require(task: Any, ability: type, who: str, fix: str = "") -> Any:
    """``task`` when it has ``ability``, else a UserError naming ``who`` needs it, what the task lacks and ``fix``."""
    if not provides(task, ability):
        tail = f"; {fix}" if fix else ""
        raise UserError(f"{who} needs a task with {ability.__name__}: {missing(task, ability)}{tail}")
    return task


def budget(task: Any) -> int:
    """The task's completion budget (:class:`WithBudget`), else :data:`DEFAULT_BUDGET`."""
    return int(task.max_new_tokens) if provides(task, WithBudget) else DEFAULT_BUDGET


def prepare_verify(task: Any, completions: Sequence[str], metas: Sequence[dict[str, Any]]) -> None:
    """Let a task prepare a batch of verifications (:class:`PreparesBatches`; nothing otherwise)."""
    if provides(task, PreparesBatches):
        task.prepare(list(completions), list(metas))


__all__ = [
    "ABILITIES",
    "DEFAULT_BUDGET",
    "Branching",
    "Episodic",
    "Fitting",
    "Judged",
    "PreparesBatches",
    "ReadsGenerated",
    "WithBudget",
    "WithCritiquePrompt",
    "WithCritiques",
    "WithDiagnostics",
    "WithEnvironments",
    "WithHints",
    "WithSolutions",
    "WithStepRewards",
    "WithSteps",
    "Wraps",
    "budget",
    "members",
    "missing",
    "provides",
    "prepare_verify",
    "require",
]
