"""How long a prompt may be: the model's context length, ``prompt.max_tokens`` and the overflow policy.

:func:`prompt_cap` checks up front that a prompt and the generation budget fit the model's context
(``max_position_embeddings``): a ``prompt.max_tokens`` that leaves no room for ``max_new_tokens``
is a UserError naming the three numbers. :func:`limit_prompts` then wraps the task so that every
prompt it hands out, rendered as the model sees it, fits the cap: a longer one is dropped and
counted (``overflow=drop``, the default, as verl's ``filter_overlong_prompts``) or loses its first
tokens (``overflow=truncate_left``; of a conversation, the first turn after the system prompt
loses them, so the template's markup stays whole). Counts are of distinct problems, per split.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterator

from ..errors import UserError
from ..models.chat import PromptFormatter, context_length, is_conversational, prompt_text
from ..config.sections import PROMPT_OVERFLOW as OVERFLOW
from .base import Item, TaskWrapper

MAX_MISSES = 10_000  # prompts in a row that do not fit before a task counts as unusable (never spin)


def prompt_cap(max_tokens: int | None, budget: int, context: int | None, model: str = "the model") -> int | None:
    """The most prompt tokens a row may have: ``max_tokens``, else the context length less ``budget``
    (None: no limit known). A budget or cap the context cannot hold is a UserError."""
    if context is None:
        return max_tokens
    room = context - budget
    if room < 1:
        raise UserError(
            f"max_new_tokens={budget} leaves no room for a prompt in {model}'s context length {context} "
            "(max_position_embeddings): lower sampling.max_new_tokens"
        )
    if max_tokens is not None and max_tokens > room:
        raise UserError(
            f"prompt.max_tokens={max_tokens} + max_new_tokens={budget} = {max_tokens + budget} exceed "
            f"{model}'s context length {context} (max_position_embeddings): lower one of them"
        )
    return room if max_tokens is None else max_tokens


def limit_prompts(task: Any, formatter: PromptFormatter, cap: int | None, overflow: str = "drop") -> Any:
    """``task`` whose prompts fit ``cap`` tokens (see the module docs); the task itself when no cap."""
    if overflow not in OVERFLOW:
        raise UserError(f"prompt.overflow={overflow!r}: must be one of {', '.join(OVERFLOW)}")
    return task if cap is None else LimitedTask(task, formatter, cap, overflow)


def unwrapped(task: Any) -> Any:
    """The task a :class:`LimitedTask` limits (a part that plays a task of its own type checks this one)."""
    return task.task if isinstance(task, LimitedTask) else task


def played_task(task: Any, kind: type, refusal: str) -> Any:
    """The run's task as a part that plays a task of its own ``kind`` needs it (the task itself under
    the prompt limit); another task is a UserError, ``refusal`` with ``{name}`` as its name."""
    inner = unwrapped(task)
    if not isinstance(inner, kind):
        raise UserError(refusal.format(name=repr(inner.name)))
    return inner


class LimitedTask(TaskWrapper):
    """A task's items with prompts of at most ``cap`` tokens; ``counts`` says how many were dropped or
    truncated, per split (distinct problems)."""

    def __init__(self, task: Any, formatter: PromptFormatter, cap: int, overflow: str):
        super().__init__(task)
        self.formatter, self.cap, self.overflow = formatter, cap, overflow
        self.seen: dict[str, dict[str, set[str]]] = {}  # split -> "dropped" / "truncated" -> problem keys

    @property
    def counts(self) -> dict[str, dict[str, int]]:
        return {split: {k: len(v) for k, v in kinds.items()} for split, kinds in self.seen.items()}

    def report(self) -> dict[str, Any]:
        """What summary.json records of the limit."""
        return {
            "max_prompt_tokens": self.cap,
            "overflow": self.overflow,
            **{f"{split}_{kind}": n for split, kinds in self.counts.items() for kind, n in kinds.items()},
        }

    def iter_items(self, split: str, seed: int) -> Iterator[Item]:
        misses = 0
        for item in self.task.iter_items(split, seed):
            fitted = self.fit(item, split)
            if fitted is not None:
                misses = 0
                yield fitted
                continue
            misses += 1
            if misses >= MAX_MISSES:
                raise UserError(
                    f"task {self.name!r}: {misses} {split} prompts in a row are longer than {self.cap} "
                    "tokens (prompt.max_tokens, or the context length less max_new_tokens); raise the "
                    "limit or use prompt.overflow=truncate_left"
                )

    def fit(self, item: Item, split: str) -> Item | None:
        """``item`` as it is, truncated, or None (dropped), counted under ``split``."""
        n = self.formatter.n_tokens(item.prompt)
        if n <= self.cap:
            return item
        kinds = self.seen.setdefault(split, {"dropped": set(), "truncated": set()})
        if self.overflow == "drop":
            kinds["dropped"].add(item.key)
            return None
        kinds["truncated"].add(item.key)
        return dataclasses.replace(item, prompt=truncate_left(self.formatter, item.prompt, self.cap, item.key))


def _cut_turn(prompt: Any) -> int | None:
    """Which message loses tokens: the first after the system prompt (None: a string prompt)."""
    if not is_conversational(prompt):
        return None
    return next(i for i, m in enumerate(prompt) if m["role"] != "system")


def _with_text(prompt: Any, turn: int | None, text: str) -> Any:
    if turn is None:
        return text
    return [dict(m, content=text) if i == turn else dict(m) for i, m in enumerate(prompt)]


def truncate_left(formatter: PromptFormatter, prompt: Any, cap: int, key: str = "") -> Any:
    """``prompt`` with the first tokens of its text (a conversation's first turn after the system
    prompt) removed until the rendered prompt has at most ``cap`` tokens. Tokens are re-counted after
    each cut (text cut at a token boundary can tokenise differently), so a few rounds may be needed."""
    tok, turn = formatter.tok, _cut_turn(prompt)
    for _ in range(8):
        excess = formatter.n_tokens(prompt) - cap
        if excess <= 0:
            return prompt
        text = prompt if turn is None else prompt[turn]["content"]
        ids = tok(text, add_special_tokens=False)["input_ids"]
        if excess >= len(ids):
            break
        prompt = _with_text(prompt, turn, tok.decode(ids[excess:]))
    raise UserError(
        f"prompt {key or prompt_text(prompt)[:80]!r}: cannot be cut to {cap} tokens from the left (its "
        "template and other turns alone are longer); raise prompt.max_tokens or use prompt.overflow=drop"
    )


def prepare_prompts(
    task: Any, tok: Any, model: Any, prompt: Any, budget: int, name: str = "the model"
) -> tuple[PromptFormatter, Any]:
    """A run's prompt formatter (``prompt.format``, ``system_prompt``, ``chat_template_kwargs``) and its
    task limited to prompts that fit (``prompt.max_tokens``, ``prompt.overflow``, the context length);
    ``prompt``: a :class:`reasonrl.config.train.Prompting` or anything with its fields."""
    formatter = PromptFormatter.build(tok, model, prompt.format, prompt.system_prompt, prompt.chat_template_kwargs)
    cap = prompt_cap(prompt.max_tokens, budget, context_length(model), name)
    return formatter, limit_prompts(task, formatter, cap, prompt.overflow)
