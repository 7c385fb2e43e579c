"""A user's own reward function from a Python file: ``reward=path/to/rewards.py:function``.

TRL's contract (``reward_funcs``; not verl's per-sample ``compute_score``): the function is called as
``fn(prompts=..., completions=..., **columns)``, each a list with one entry per completion, the
columns being the dataset row's own (everything but the prompt), and returns one float per
completion (None: not applicable). When a prompt is conversational (a list of messages) its
completion comes as messages too, ``[{"role": "assistant", "content": text}]``, as TRL hands them.

The file is imported once. A file that does not exist, an import that fails, a missing function
or one whose signature cannot take those arguments is one UserError line naming file and function.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
from pathlib import Path
from typing import Any, Callable, Sequence

from ..errors import MissingPathError, UserError
from .base import Reward, RewardResult


def is_reward_path(name: str) -> bool:
    """``path/to/file.py:function`` (a user's reward) rather than a built-in reward's name."""
    return ":" in name and name.rsplit(":", 1)[0].endswith(".py")


def load_function(spec: str) -> Callable[..., Sequence[float | None]]:
    """The callable ``function`` defined in the Python file of ``spec`` (``file.py:function``)."""
    path_text, _, name = spec.rpartition(":")
    path = Path(path_text)
    if not path.is_file():
        raise MissingPathError(f"reward {spec!r}: the file {path} does not exist")
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
    module_spec = importlib.util.spec_from_file_location(f"reasonrl_user_reward_{digest}", path)
    module = importlib.util.module_from_spec(module_spec)
    try:
        module_spec.loader.exec_module(module)
    except Exception as err:  # noqa: BLE001 - whatever the user's file raises on import is reported as one line
        raise UserError(f"reward {spec!r}: importing {path} failed: {type(err).__name__}: {err}") from err
    fn = getattr(module, name, None)
    if not callable(fn):
        found = sorted(
            k
            for k, v in vars(module).items()
            if callable(v) and not k.startswith("_") and getattr(v, "__module__", None) == module.__name__
        )
        raise UserError(
            f"reward {spec!r}: {path} defines no function {name!r} (its functions: {', '.join(found) or 'none'})"
        )
    return fn


def check_signature(fn: Callable[..., Any], columns: Sequence[str], spec: str) -> None:
    """``fn`` can be called as TRL calls a reward function with these dataset columns."""
    args = {"prompts": [], "completions": [], **{c: [] for c in columns}}
    try:
        inspect.signature(fn).bind(**args)
    except TypeError as err:
        raise UserError(
            f"reward {spec!r} cannot be called as fn(prompts=..., completions=..., "
            f"{', '.join(f'{c}=...' for c in columns)}) ({err}); define it as "
            "def fn(prompts, completions, **kwargs)"
        ) from err


TRL_ROW_KEY = "_trl_row"  # reasonrl.tasks.rows.TRL_ROW: an item's meta key of its row's prompt and columns


class FunctionReward(Reward):
    """A user's reward function as one of several weighted terms (``--reward path.py:fn``, ``reasonrl.train``'s
    ``reward_funcs``): called as TRL calls ``reward_funcs``, ``fn(prompts=..., completions=..., completion_ids=...,
    answer=..., **columns)``, each a list with one entry per completion; ``columns`` are the row's own when the
    task keeps them (a file or dataset task whose reward is a user's function). Returns one float per
    completion, or None where it does not apply (that row's term then adds nothing)."""

    def __init__(self, fn: Callable[..., Sequence[float | None]] | str, name: str | None = None):
        self.spec = fn if isinstance(fn, str) else getattr(fn, "__name__", type(fn).__name__)
        self.fn = load_function(fn) if isinstance(fn, str) else fn
        if not callable(self.fn):
            raise UserError(f"reward function {fn!r} is not callable: give a function or 'path/to/file.py:function'")
        self.name = name or getattr(self.fn, "__name__", None) or type(self.fn).__name__
        check_signature(self.fn, ["completion_ids", "answer"], self.spec)

    def score(self, prompts: Sequence[Any], completions: Sequence[str], **columns: Any) -> RewardResult:
        n = len(completions)
        meta = columns.get("meta") or [{}] * n
        rows = [m.get(TRL_ROW_KEY) if isinstance(m, dict) else None for m in meta]
        kwargs: dict[str, Any] = {
            "answer": list(columns.get("answer") or [None] * n),
            "completion_ids": list(columns.get("completion_ids") or [None] * n),
        }
        if n and all(rows):  # the row's own prompt and columns, as TRL hands them
            prompts = [r["prompt"] for r in rows]
            kwargs.update({k: [r["columns"].get(k) for r in rows] for k in rows[0]["columns"]})
        shown = [
            [{"role": "assistant", "content": c}] if isinstance(p, (list, tuple)) else c
            for p, c in zip(prompts, completions)
        ]
        return RewardResult(list(self.fn(prompts=list(prompts), completions=shown, **kwargs)))


class UserReward(Reward):
    """A user's function behind the :class:`Reward` interface (TRL's arguments, see the module docs)."""

    def __init__(self, spec: str):
        self.spec, self.fn = spec, load_function(spec)
        self.name = getattr(self.fn, "__name__", "user_reward")

    def check(self, columns: Sequence[str]) -> "UserReward":
        check_signature(self.fn, columns, self.spec)
        return self

    def score(self, prompts: Sequence[Any], completions: Sequence[str], **columns: Any) -> RewardResult:
        shown = [
            [{"role": "assistant", "content": c}] if isinstance(p, (list, tuple)) else c
            for p, c in zip(prompts, completions)
        ]
        return RewardResult(list(self.fn(prompts=list(prompts), completions=shown, **columns)))
