"""CodeThinker's dynamic beam sampling (arXiv 2605.17958; the algorithm is inferred, see the spec).

Under a budget of G completions per prompt: sample ``B0`` independently, let the task find in each
where its reasoning first goes wrong (or a random step boundary when it never does) and how good
the prefix before that point is, then spend the other ``G - B0`` completions as continuations
branched from the ``k`` best prefixes, evenly. The group is the B0 originals plus the branches:
exactly G completions, never more. Branches share their prefix tokens (and its behaviour
log-probs) with their source but are separate samples of the group.
"""

from __future__ import annotations

import random
from typing import Any, Sequence

import torch

from ..tasks.protocols import Branching, require
from .base import Rollouts, SamplingParams, concat_rollouts, select_rows
from .branch import branch, char_to_token, token_char_offsets


def pick_branches(scores: Sequence[float], n_branches: int, k: int) -> list[int]:
    """Indices of the sources of ``n_branches`` branches: the ``k`` best scores (ties: the earlier
    sample), taken round-robin so the branches split evenly."""
    best = sorted(range(len(scores)), key=lambda j: (-scores[j], j))[:k]
    return [best[b % len(best)] for b in range(n_branches)]


def _cut_tokens(engine, ro: Rollouts, r: int, cut_char: int) -> int:
    """The token index where character ``cut_char`` of row ``r``'s text starts, kept inside the completion."""
    n = int(ro.lengths[r])
    return min(char_to_token(token_char_offsets(engine.tok, ro.completion_ids[r, :n]), cut_char), n - 1)


def beam_rollout(
    engine,
    task,
    items: Sequence[Any],
    group_size: int,
    sp: SamplingParams,
    plan: tuple[int, int],
    generator: torch.Generator | None,
    rng: random.Random,
) -> Rollouts:
    """G completions per item (task items: ``.prompt``, ``.meta``) by dynamic beam sampling, ``plan`` =
    (B0 independent samples, k prefixes to branch from); ``extras["metrics"]`` describes the branching."""
    require(task, Branching, "beam sampling", "try --task code")
    b0, k = plan
    first = engine.generate([it.prompt for it in items], b0, sp, generator=generator)
    n_br, rows, cuts = group_size - b0, [], []
    for i, item in enumerate(items):
        found = [task.branch_point(first.texts[i * b0 + j], item.meta, rng) for j in range(b0)]  # (char, score)
        for j in pick_branches([score for _, score in found], n_br, k):
            rows.append(i * b0 + j)
            cuts.append(_cut_tokens(engine, first, i * b0 + j, found[j][0]))
    if n_br == 0:
        return first
    both = concat_rollouts([first, branch(engine, first, rows, cuts, sp, generator)], engine.tok.pad_token_id)
    r0 = len(first.texts)
    order = [
        r for i in range(len(items)) for r in [i * b0 + j for j in range(b0)] + [r0 + i * n_br + b for b in range(n_br)]
    ]
    out = select_rows(both, order)
    out.n = group_size
    assert len(out.texts) == group_size * len(items), "beam sampling exceeded its budget"
    out.extras["metrics"] = _metrics(cuts, first, rows, len(items), group_size)
    return out


def _metrics(cuts: list[int], first: Rollouts, rows: list[int], n_items: int, group_size: int) -> dict[str, Any]:
    src_len = first.lengths[torch.as_tensor(rows)].float()
    return {
        "beam/branches": float(len(rows)),
        "beam/completions_per_prompt": len(rows) / n_items + first.n,
        "beam/prefix_tokens_mean": float(sum(cuts)) / max(len(cuts), 1),
        "beam/prefix_frac_mean": float((torch.tensor(cuts, dtype=torch.float32) / src_len).mean()),
        "beam/budget": float(group_size),
    }
