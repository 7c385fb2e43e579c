"""A finite training pool with epochs (``data.pool=N``): what makes prompts recur for a selector.

The built-in tasks hand out an endless stream of fresh problems, so no prompt is seen twice and
per-prompt state learns nothing. With ``data.pool=N`` the run trains on the first N distinct
(by key) items of the task's train stream, cycled in a fresh seeded order each epoch; the item at
stream position ``i`` belongs to epoch ``i // N``. File tasks cycle their rows already: a pool of
their split's size is every row, reshuffled each epoch by this module instead.
"""

from __future__ import annotations

import random
from typing import Any, Iterator

from ..errors import UserError
from ..models.chat import prompt_text
from ..seeds import stable_seed

MAX_DRAWS_PER_ITEM = 200  # a task with fewer distinct problems than asked fails loudly, never spins


def take_pool(stream: Iterator[Any], n: int, where: str) -> list[Any]:
    """The first ``n`` items of ``stream`` distinct by ``.key``. A key met again with another
    prompt text is a collision (two problems would share one selector state): refused by name."""
    out: list[Any] = []
    seen: dict[str, Any] = {}
    for draws, item in enumerate(stream):
        if draws >= MAX_DRAWS_PER_ITEM * n + 1000:
            break
        if item.key in seen:
            if seen[item.key] != item.prompt:
                raise UserError(
                    f"{where}: prompt key collision: key {item.key!r} names two prompts, "
                    f"{prompt_text(seen[item.key])[:80]!r} and {prompt_text(item.prompt)[:80]!r}; give "
                    "each distinct prompt its "
                    "own key (file tasks: its 'key' column, or distinct prompts)"
                )
            continue
        seen[item.key] = item.prompt
        out.append(item)
        if len(out) == n:
            return out
    raise UserError(f"data.pool={n}: {where} has only {len(out)} distinct train problems; lower data.pool")


def pool_stream(items: list[Any], seed: int) -> Iterator[Any]:
    """Endless epochs over ``items``, each in a fresh order from a generator seeded by ``seed``."""
    rng = random.Random(stable_seed(seed, "data.pool"))
    while True:
        order = list(range(len(items)))
        rng.shuffle(order)
        yield from (items[i] for i in order)


def epoch_of(position: int, pool: int) -> int:
    """The epoch of stream position ``position`` (0-based) with a pool of ``pool`` items (0: none)."""
    return position // pool if pool else 0
