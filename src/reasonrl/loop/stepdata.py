"""One step's data: the pure operations on the :class:`~reasonrl.rollout.batch.Batch` of groups the
batch maker builds and the trainer updates on (join a round's groups, keep some groups, step statistics, metric
merging). No model, no method names."""

from __future__ import annotations

import math
import random
from typing import Any, Callable

import torch

from ..rollout import Rollouts, concat_rollouts, select_rows
from ..rollout.base import policy_tokens
from ..rollout.batch import Batch, Channel, Groups  # noqa: F401 - the step's data types (below the parts)
from ..seeds import stable_seed


def join_groups(b: Batch, g: Groups, kind: int, pad_id: int) -> Batch:
    """``b`` with a round's groups appended (group-major rows, as the first round's). Per-row channel
    data is attached after the rounds (``score_batch``), so no channel holds rows yet."""
    B, G, R = len(b.items), b.rewards.shape[1], len(b.ro.texts)
    if any(c.rows for c in b.parts.values()):
        raise RuntimeError("a round's groups joined a batch whose channels already hold per-row data")
    nan = lambda n: torch.full((n, G), float("nan"))  # noqa: E731
    ones = lambda n: torch.ones(n)  # noqa: E731
    return Batch(
        items=b.items + list(g.items),
        ro=concat_rollouts([b.ro, g.ro], pad_id),
        rewards=torch.cat([b.rewards, g.rewards]),
        correct=torch.cat([b.correct, g.correct]),
        metrics=dict(b.metrics),  # a round's own metrics are its extend hook's (BatchMaker.extend adds them)
        parts=b.parts,
        reward_terms={
            k: torch.cat([v, torch.full((len(g.ro.texts),), float("nan"))]) for k, v in b.reward_terms.items()
        },  # a round's rows: its own rewards only
        kinds=torch.cat([b.group_kinds(), torch.full((len(g.items),), kind, dtype=torch.long)]),
        preset=torch.cat(
            [nan(B) if b.preset is None else b.preset, nan(len(g.items)) if g.preset is None else g.preset]
        ),
        weight=torch.cat(
            [ones(R) if b.weight is None else b.weight, ones(len(g.ro.texts)) if g.weight is None else g.weight]
        ),
        # the selector's scores of the first groups; a round's groups have none (NaN)
        scores=None if b.scores is None else torch.cat([b.scores, torch.full((len(g.items),), float("nan"))]),
    )


def step_stats(rewards: torch.Tensor, correct: torch.Tensor, ro: Rollouts) -> dict[str, float]:
    """Reward, accuracy, zero-variance groups, completion shape and the sampling policy's mean token
    entropy (from the rollout, so it covers every row, trained or skipped). Lengths and token counts are
    the policy's own tokens (an episode's observations and turn markers are not its: issue 41)."""
    lengths, mask = ro.policy_lengths.float(), policy_tokens(ro).float()
    ent = {} if ro.entropies is None else {"entropy/mean": float((ro.entropies * mask).sum() / mask.sum().clamp(min=1))}
    return {
        **ent,
        "reward/mean": float(rewards.mean()),
        "reward/std": float(rewards.std()) if rewards.numel() > 1 else 0.0,
        "accuracy": float(correct.mean()),
        "frac_zero_var_groups": float((rewards.std(-1, unbiased=False) == 0).float().mean()),
        "length/mean": float(lengths.mean()),
        "length/max": float(lengths.max()),
        "truncation_rate": float(ro.truncated.float().mean()),
        "tokens/generated": float(lengths.sum()),
    }


def keep_groups(b: Batch, groups: list[int], G: int) -> Batch:
    """``b`` with only ``groups`` (whole groups, in order): every per-group and per-row field sliced."""
    rows = torch.tensor([g * G + j for g in groups for j in range(G)], dtype=torch.long)
    g = torch.tensor(groups, dtype=torch.long)
    pick = lambda x, idx: None if x is None else x[idx]  # noqa: E731
    return Batch(
        items=[b.items[i] for i in groups],
        ro=select_rows(b.ro, rows.tolist()),
        rewards=b.rewards[g],
        correct=b.correct[g],
        advantages=pick(b.advantages, rows),
        loss_mask=pick(b.loss_mask, rows),
        ref_logp=pick(b.ref_logp, rows),
        metrics=b.metrics,
        kinds=pick(b.kinds, g),
        preset=pick(b.preset, g),
        weight=pick(b.weight, rows),
        scores=pick(b.scores, g),
        extra_labels=pick(b.extra_labels, rows),
        reward_terms={k: v[rows] for k, v in b.reward_terms.items()},
        # per-row channel data (teacher scores) cut with the rows; the rest as it is (FEST's pairs find
        # their anchor rows from the sliced loss mask when they train)
        parts={k: Channel(rows={n: v[rows] for n, v in c.rows.items()}, values=c.values) for k, c in b.parts.items()},
    )


def merge_metrics(
    parts: list[tuple[float, dict[str, float]]], additive: Callable[[str], bool] = lambda key: False
) -> dict[str, float]:
    """Combine weighted metric dicts: ``additive`` keys add up, keys with 'max' take the maximum,
    everything else is a weighted mean (keys in sorted order, so logs are stable across runs)."""
    out: dict[str, float] = {}
    total = sum(w for w, _ in parts) or 1.0
    for key in sorted({k for _, m in parts for k in m}):
        vals = [(w, m[key]) for w, m in parts if key in m]
        if additive(key):
            out[key] = sum(v for _, v in vals)
        elif "max" in key:
            out[key] = max(v for _, v in vals)
        else:
            out[key] = sum(w * v for w, v in vals) / total
    return out


def additive_metric(key: str) -> bool:
    """Loss terms are normalised by the minibatch's global counts, so their micro-batch values add up."""
    return key == "loss/policy" or key.endswith("_term")


def completion_count(rate: float, n_rows: int) -> int:
    """Rows ``log_completions`` logs of a step with ``n_rows``: a number >= 1 is a count (capped at
    ``n_rows``), one in (0, 1) a fraction of the rows rounded up, 0 none."""
    return min(n_rows, int(rate)) if rate >= 1 else math.ceil(rate * n_rows)


def chosen_rows(rate: float, n_rows: int, seed: int, step: int) -> list[int]:
    """Which rows of step ``step`` are logged (ascending): a seeded choice of its own, keyed by the run's
    seed and the step, so it draws nothing from the training RNG and a resumed run picks the same rows."""
    k = completion_count(rate, n_rows)
    return sorted(random.Random(stable_seed(seed, "completions", step)).sample(range(n_rows), k))


def completion_rows(step: int, b: Batch, decode: Callable[[list[int]], str], rows: list[int]) -> list[dict[str, Any]]:
    """``completions.jsonl``'s records of ``rows`` of a step's batch (TRL's ``log_completions``): the
    prompt as the model saw it (its token ids decoded, template and special tokens included), the
    completion text, the total reward, each reward's own value by name (None: declined), the advantage
    (a per-token advantage: its mean over the tokens the loss sees), group, finish reason."""
    G = b.rewards.shape[1] if b.rewards.dim() == 2 else 1
    kinds, out = b.group_kinds(), []
    for r in rows:
        g = r // G
        ids = b.ro.prompt_ids[r][b.ro.prompt_mask[r].bool()].tolist()
        terms = {name: None if math.isnan(v[r]) else float(v[r]) for name, v in b.reward_terms.items()}
        out.append(
            {
                "step": step,
                "group": g,
                "sample": r % G,
                "kind": int(kinds[g]),
                "key": b.items[g].key,
                "prompt": decode(ids),
                "completion": b.ro.texts[r],
                "answer": b.items[g].answer,
                "reward": float(b.rewards[g, r % G]),
                "rewards": terms,
                "correct": bool(b.correct[g, r % G]),
                "advantage": row_advantage(b, r),
                "length": int(b.ro.policy_lengths[r]),  # the policy's tokens
                "finish": b.ro.finish_reasons[r],
            }
        )
    return out


def row_advantage(b: Batch, r: int) -> float | None:
    """Row ``r``'s advantage: the value (sequence-level), or the mean over the tokens the loss sees
    (token-level; over its completion tokens when the loss sees none). None before ``prepare``."""
    if b.advantages is None:
        return None
    adv = b.advantages[r]
    if adv.dim() == 0:
        return float(adv)
    mask = b.loss_mask[r, : adv.shape[0]] if b.loss_mask is not None else b.ro.completion_mask[r, : adv.shape[0]]
    if not mask.any():
        mask = b.ro.completion_mask[r, : adv.shape[0]]
    return float((adv * mask).sum() / mask.sum().clamp(min=1))
