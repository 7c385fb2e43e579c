"""The Selector stage: which prompts get rollouts, and which whole groups reach the update.

A recipe's ``selector`` part is frozen configuration (like every part); ``build(seed)`` gives the
run its mutable :class:`SelectorState`, which the batch maker calls at three points:

1. ``admit(item, epoch) -> bool`` before rollout, once per item drawn from the task stream, in
   stream order (a False skips the item: no rollout; ``epoch`` is the pass over the finite pool,
   ``data.pool``). Adding prompts (replay) is admitting items the selector would otherwise skip.
2. ``observe(items, correct) -> (B,) scores`` right after a round's rewards, for *every* generated
   group, before dynamic sampling drops any (so a filtered all-correct group still counts).
3. ``select(ctx) -> (B,) bool`` after the advantages: the groups that go to the update; the others
   leave the batch (the loss normalisers then count only the kept groups, as in verl).

Per-prompt state is keyed by ``Item.key`` (never the step), saved by ``state_dict()`` in the
trainer's checkpoint with any RNG the selector uses, and restored by ``load_state_dict(state,
known)``, which refuses keys the run's pool does not hold. With data-parallel ranks every rank
holds the whole (gathered) batch and calls the same hooks with the same state and RNG: the state
is replicated, not sharded, and rank 0 writes it (``dist.group``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Protocol, Sequence, runtime_checkable

import torch

from ..errors import UserError
from ..models.chat import prompt_text

# FLOPs estimates (Kaplan et al. 2020, arXiv 2001.08361): a forward pass costs ~2 x params per
# token and forward + backward ~6 x params per token; generation is forward passes only.
GEN_FLOPS_PER_TOKEN_PARAM, UPDATE_FLOPS_PER_TOKEN_PARAM = 2, 6


@dataclass
class SelectContext:
    """What the post-advantage hook sees of one batch (groups in batch order)."""

    items: list[Any]  # (B,) items with .key and .prompt
    correct: torch.Tensor  # (B, G) raw task correctness, 0/1
    advantages: torch.Tensor  # (B, G) or (B, G, T) after the shapers
    scores: torch.Tensor  # (B,) what observe() returned for each group (NaN: not observed, e.g. a second round)
    kinds: torch.Tensor  # (B,) 0: a first-round group, k: added by the recipe's k-th round
    tokens: torch.Tensor  # (B,) completion tokens of each group's G rows
    n_params: int  # the policy's parameter count (for the FLOPs estimates)
    minibatches: int  # optim.minibatches: what "round the kept groups" rounds to by default


@runtime_checkable
class SelectorState(Protocol):
    def admit(self, item: Any, epoch: int) -> bool: ...

    def observe(self, items: Sequence[Any], correct: torch.Tensor) -> torch.Tensor: ...

    def select(self, ctx: SelectContext) -> tuple[torch.Tensor, dict[str, float]]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any], known: dict[str, str] | None) -> None: ...


@runtime_checkable
class Selector(Protocol):
    """The recipe part; its state is made by ``build(seed)``. A selector that keeps per-prompt state
    across epochs declares ``needs = frozenset({"pool"})`` (prompts that recur: ``data.pool=N``)."""

    def build(self, seed: int) -> SelectorState: ...


def prompt_hash(prompt: Any) -> str:
    """A short digest of a prompt (a conversation's canonical JSON): the state remembers which text a
    key stood for, not the text."""
    return hashlib.sha256(prompt_text(prompt).encode()).hexdigest()[:16]


def check_same_prompt(key: str, prompt: Any, seen: str | None) -> None:
    """Two prompts under one key would share one per-prompt state: refused, naming the key."""
    if seen is not None and seen != prompt_hash(prompt):
        raise UserError(
            f"prompt key collision: key {key!r} names two different prompts (this one: "
            f"{prompt_text(prompt)[:80]!r}); "
            "a selector keeps one state per key, so give every distinct prompt its own key"
        )


def check_known_keys(keys: Sequence[str], known: dict[str, str] | None, hashes: dict[str, str]) -> None:
    """A checkpoint's selector state must describe this run's pool: every key in it, same prompt."""
    if known is None:
        return
    unknown = [k for k in keys if k not in known]
    if unknown:
        raise UserError(
            f"the checkpoint's selector state holds {len(unknown)} prompt key(s) this run's pool does not "
            f"(e.g. {unknown[:3]}): it was written for another dataset (task, task_options, data.pool or "
            "seed differ); resume with the run's own settings or start a new run"
        )
    changed = [k for k in keys if hashes.get(k) not in (None, known[k])]
    if changed:
        raise UserError(
            f"the checkpoint's selector state has other prompt texts under {len(changed)} key(s) "
            f"(e.g. {changed[:3]}): it was written for another dataset; start a new run"
        )


def group_tokens(completion_mask: torch.Tensor, G: int) -> torch.Tensor:
    """(R, T) completion mask -> (B,) completion tokens per group: what ``tokens/generated`` counts,
    so the estimates compare with any run's log (prompt tokens are left out of both estimates)."""
    return completion_mask.sum(-1).view(-1, G).sum(-1)


def savings(ctx: SelectContext, keep: torch.Tensor) -> dict[str, float]:
    """Update tokens and FLOPs this selection saves against training on every group (the paper's
    GRPO): 6 x params x the dropped groups' completion tokens (forward + backward)."""
    dropped = float(ctx.tokens[~keep].sum())
    return {
        "select/update_tokens": float(ctx.tokens[keep].sum()),
        "select/update_tokens_saved": dropped,
        "select/update_flops_saved": UPDATE_FLOPS_PER_TOKEN_PARAM * ctx.n_params * dropped,
    }


def quantiles(x: torch.Tensor, qs: Sequence[float], prefix: str) -> dict[str, float]:
    """(n,) values -> {prefix_qNN: value}; nothing for an empty tensor."""
    if not len(x):
        return {}
    vals = torch.quantile(x.double(), torch.tensor(list(qs), dtype=torch.float64))
    return {f"{prefix}_q{round(q * 100):02d}": float(v) for q, v in zip(qs, vals)}
