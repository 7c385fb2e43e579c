"""SU-01's refine and replay buffers as pure bookkeeping (layer 2; spec distill-and-data section 13).

Refined RL mixes two kinds of extra groups into each batch: self-refinement prompts built from
recent wrong answers (SU-01's ``_collect_self_refine_samples``) and replayed past successes
(ExGRPO-style). What goes into each buffer, what comes out, and how many groups each kind gets are
decided here from plain numbers; :class:`reasonrl.parts.su01.RefineReplay` does the generation.
Both buffers are keyed by the item's stable key (``Item.key``), never by the step.
"""

from __future__ import annotations

from typing import Any, Sequence


def refine_candidates(
    rewards: Sequence[float], is_self_refine: bool, mean_below: float = 0.5, sample_below: float = 0.9
) -> list[int]:
    """Rows of one group that go to the refine buffer: none if the group is itself a refine group
    (``_is_self_refine``: a refine sample is never re-collected) or its mean reward is at least
    ``mean_below``; otherwise every row whose reward is below ``sample_below``."""
    if is_self_refine or not rewards or sum(rewards) / len(rewards) >= mean_below:
        return []
    return [j for j, r in enumerate(rewards) if r < sample_below]


def extra_group_counts(n_main: int, refine_share: float, replay_share: float) -> tuple[int, int]:
    """(refine groups, replay groups) so that each makes up its share of the final batch of
    ``n_main`` ordinary groups plus both extras: ``n_total = n_main / (1 - refine - replay)``, each
    count ``round(share * n_total)`` (halves up). The ordinary groups stay ``prompts_per_step``."""
    if refine_share < 0 or replay_share < 0 or refine_share + replay_share >= 1:
        raise ValueError(f"refine_share + replay_share must lie in [0, 1), got {refine_share} + {replay_share}")
    total = n_main / (1.0 - refine_share - replay_share)
    return int(refine_share * total + 0.5 + 1e-9), int(replay_share * total + 0.5 + 1e-9)


def push_refine(
    buffer: list[dict[str, Any]], refined: dict[str, bool], entries: list[dict[str, Any]], capacity: int
) -> int:
    """Append ``entries`` (each with a ``key``) whose question has not had its refine attempt yet;
    beyond ``capacity`` the oldest entries go. Returns how many were dropped for space."""
    buffer.extend(e for e in entries if e["key"] not in refined)
    dropped = max(0, len(buffer) - capacity)
    del buffer[:dropped]
    return dropped


def pop_refine(
    buffer: list[dict[str, Any]], refined: dict[str, bool], n: int, exclude: set[str] = frozenset()
) -> list[dict[str, Any]]:
    """Up to ``n`` entries for this batch's refine prompts, newest first ("recent wrong answers"), one
    per question (each question gets at most one refine attempt: its key goes to ``refined`` and
    its other buffered samples leave the buffer). Keys in ``exclude`` wait for a later batch."""
    out: list[dict[str, Any]] = []
    for e in reversed(buffer):
        if len(out) == n:
            break
        if e["key"] not in refined and e["key"] not in exclude:
            refined[e["key"]] = True
            out.append(e)
    buffer[:] = [e for e in buffer if e["key"] not in refined]
    return out


def pick_replay_row(
    correct: Sequence[float], rewards: Sequence[float], entropy: Sequence[float] | None, min_reward: float = 0.0
) -> int | None:
    """The row of a group kept for replay (ExGRPO): a correct row with reward above ``min_reward``,
    the one of lowest mean token entropy (ties and no entropies: the first); None when the group
    has no such row or is entirely correct (a fully solved question is retired, not replayed)."""
    ok = [j for j, (c, r) in enumerate(zip(correct, rewards)) if c > 0 and r > min_reward]
    if not ok or all(c > 0 for c in correct):
        return None
    return min(ok, key=lambda j: (entropy[j] if entropy is not None else 0.0, j))
