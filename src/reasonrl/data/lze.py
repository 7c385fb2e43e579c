"""LZE: Learning-Zone Energy data selection (arXiv 2605.17003; spec distill-and-data.md section 10).

Pure maths first (shapes in comments), then the recipe part :class:`LZE` and its run state
:class:`LZEState` (a :class:`~reasonrl.data.selector.SelectorState`). The energy of a prompt group
with pass rate p is ``d_init * 4p(1-p) * (1 + alpha * m)``: how hard the prompt was when first
seen, the normalised Bernoulli variance (proportional to the expected GRPO gradient magnitude) and
how far p moved from its running mean. Only top-energy groups reach the update (from epoch 1 on),
and prompts solved in consecutive epochs are pruned before rollout, a random 10% replayed each epoch.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any, ClassVar, Sequence

import torch

from ..config.rules import Rule, at_least, within
from ..seeds import stable_seed
from .selector import (
    GEN_FLOPS_PER_TOKEN_PARAM,
    SelectContext,
    check_known_keys,
    check_same_prompt,
    prompt_hash,
    quantiles,
    savings,
)

FLOOR_EPS = 1e-9  # floor(n * ratio) of a ratio like 0.29 must not lose one to binary rounding (28.999...)


def first_sight(p0: torch.Tensor, d_min: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(n,) first pass rates -> (n,) difficulty anchors max(1 - p0, d_min), (n,) EMA start p0."""
    return (1 - p0).clamp(min=d_min), p0.clone()


def energy(d_init: torch.Tensor, p: torch.Tensor, ema: torch.Tensor, alpha: float) -> torch.Tensor:
    """(n,) anchors, pass rates, running means -> (n,) E = d_init * 4p(1-p) * (1 + alpha * m),
    m = min(2|p - ema|, 1), with the EMA *before* this observation's update (spec 10b)."""
    m = (2 * (p - ema).abs()).clamp(max=1.0)
    return d_init * 4 * p * (1 - p) * (1 + alpha * m)


def ema_update(ema: torch.Tensor, p: torch.Tensor, decay: float) -> torch.Tensor:
    """(n,), (n,) -> (n,) decay * ema + (1 - decay) * p."""
    return decay * ema + (1 - decay) * p


def select_count(n: int, ratio: float, min_ratio: float) -> int:
    """Groups to keep of ``n``: min(n, max(max(1, floor(n*ratio)), max(1, floor(n*min_ratio))))."""
    lo = max(1, math.floor(n * min_ratio + FLOOR_EPS))
    return min(n, max(max(1, math.floor(n * ratio + FLOOR_EPS)), lo))


def warmup_ratio(target: float, epoch: int, warmup_epochs: int) -> float:
    """The ratio at ``epoch`` (selection starts at epoch 1): linear from 1.0 down to ``target``,
    reached at epoch ``warmup_epochs`` (0: the target at once). Inferred: the spec gives the ends."""
    if warmup_epochs <= 0:
        return target
    return 1.0 + (target - 1.0) * min(1.0, epoch / warmup_epochs)


def top_k_jitter(e: torch.Tensor, k: int, sigma_frac: float, gen: torch.Generator) -> torch.Tensor:
    """(n,) energies -> (n,) bool: the top min(k, n_active) of the active groups (E > 0) by
    E + Gumbel(0, sigma), sigma = sigma_frac * max(E_max - E_min over active, 0.01). k >= n keeps all."""
    n = len(e)
    if k >= n:
        return torch.ones(n, dtype=torch.bool)
    active = e > 0
    keep = torch.zeros(n, dtype=torch.bool)
    if not active.any():
        return keep
    ea = e[active].double()
    sigma = sigma_frac * max(float(ea.max() - ea.min()), 0.01)
    u = torch.rand(len(ea), generator=gen, dtype=torch.float64).clamp(1e-12, 1 - 1e-12)
    noisy = ea + sigma * -torch.log(-torch.log(u))  # Gumbel(0, sigma) by inverse CDF
    top = noisy.topk(min(k, len(ea))).indices
    keep[active.nonzero().squeeze(-1)[top]] = True
    return keep


def round_down(keep: torch.Tensor, multiple: int, gen: torch.Generator) -> torch.Tensor:
    """(n,) bool -> (n,) bool with the kept count rounded down to a multiple of ``multiple`` by a
    random subsample (spec: the count is a multiple of the mini-batch, in groups)."""
    idx = keep.nonzero().squeeze(-1)
    n_keep = len(idx) // multiple * multiple
    if n_keep == len(idx):
        return keep
    out = torch.zeros_like(keep)
    out[idx[torch.randperm(len(idx), generator=gen)[:n_keep]]] = True
    return out


def zero_advantage_groups(adv: torch.Tensor) -> torch.Tensor:
    """(B, G) or (B, G, T) advantages -> (B,) bool: every advantage of the group is 0."""
    return (adv.flatten(1) == 0).all(-1)  # flatten, not reshape(B, -1): an empty batch has B = 0


def replay_count(n_pruned: int, frac: float) -> int:
    """Pruned prompts replayed per epoch: max(1, floor(frac * |pruned|)), 0 with none pruned."""
    return max(1, math.floor(frac * n_pruned + FLOOR_EPS)) if n_pruned else 0


@dataclass(frozen=True)
class LZE:
    """The selector part; defaults are the spec's class defaults (the ``lze`` recipe sets the
    example scripts' ``selection_ratio=0.4, warmup_transition_epochs=0``)."""

    selection_ratio: float = 0.7
    min_selection_ratio: float = 0.3
    ema_decay: float = 0.9
    alpha: float = 0.3  # momentum weight
    d_min: float = 0.05  # floor of the difficulty anchor
    jitter: float = 0.05  # Gumbel scale as a fraction of the active energy range
    warmup_transition_epochs: int = 3
    round_to: int = 0  # kept groups rounded down to a multiple of this (0: optim.minibatches)
    prune: bool = True  # forward prune-replay
    prune_streak: int = 2  # consecutive all-correct epochs before a prompt is pruned
    replay_frac: float = 0.1
    replay_seed: int = 0  # the spec's replay sampler is seeded 0 whatever the run seed
    needs: ClassVar[frozenset[str]] = frozenset({"pool"})  # LZE's state is useless without recurring prompts

    RULES: ClassVar[dict[str, Rule]] = {
        "selection_ratio": within(0, 1, open_lo=True),
        "min_selection_ratio": within(0, 1, open_lo=True),
        "ema_decay": within(0, 1, open_hi=True),
        "d_min": within(0, 1),
        "alpha": at_least(0),
        "jitter": at_least(0),
        "round_to": Rule(lambda v, _: v >= 0, ">= 0 (0: optim.minibatches)"),
        "warmup_transition_epochs": at_least(0),
        "prune_streak": at_least(1),
        "replay_frac": within(0, 1, open_lo=True),
    }

    def build(self, seed: int) -> "LZEState":
        return LZEState(self, seed)


class LZEState:
    """Per-prompt state (key -> [d_init, ema, streak, pruned, prompt digest]), the epoch, the
    replay set and two RNGs (Gumbel/subsample: torch; replay: Python), all in ``state_dict()``."""

    def __init__(self, cfg: LZE, seed: int):
        self.cfg = cfg
        self.prompts: dict[str, list[Any]] = {}
        self.epoch, self.replay = -1, set()  # -1: no item admitted yet
        self.gen = torch.Generator().manual_seed(stable_seed(seed, "lze"))
        self.replay_rng = random.Random(cfg.replay_seed)
        self.pending = {"skipped": 0, "reactivated": 0}  # counts since the last select()
        self.totals = {
            "update_tokens_saved": 0.0,
            "update_flops_saved": 0.0,
            "gen_tokens_saved_est": 0.0,
            "skipped": 0.0,
        }

    # ------------------------------------------------------------ pre-rollout
    def admit(self, item: Any, epoch: int) -> bool:
        if epoch > self.epoch:
            self._new_epoch(epoch)
        rec = self.prompts.get(item.key)
        if rec is not None:
            check_same_prompt(item.key, item.prompt, rec[4])
        if rec is None or not rec[3] or item.key in self.replay:
            return True
        self.pending["skipped"] += 1
        return False

    def _new_epoch(self, epoch: int) -> None:
        """At each epoch start: a fresh replay sample of the pruned pool (spec 10b)."""
        self.epoch = epoch
        pruned = sorted(k for k, r in self.prompts.items() if r[3])
        self.replay = set(self.replay_rng.sample(pruned, replay_count(len(pruned), self.cfg.replay_frac)))

    # ------------------------------------------------------------ after rewards
    def observe(self, items: Sequence[Any], correct: torch.Tensor) -> torch.Tensor:
        """(B, G) correctness -> (B,) energies; the anchors and EMAs updated, streaks and pruning."""
        p = correct.double().mean(-1)  # (B,)
        energies = torch.empty(len(items), dtype=torch.float64)
        for i, (item, pi) in enumerate(zip(items, p.tolist())):
            energies[i] = self._observe_one(item, pi)
        return energies

    def _observe_one(self, item: Any, p: float) -> float:
        c, rec = self.cfg, self.prompts.get(item.key)
        if rec is None:
            d, ema = first_sight(torch.tensor([p], dtype=torch.float64), c.d_min)
            rec = self.prompts[item.key] = [float(d), float(ema), 0, False, prompt_hash(item.prompt)]
        pt, d, ema = (torch.tensor([v], dtype=torch.float64) for v in (p, rec[0], rec[1]))
        e = float(energy(d, pt, ema, c.alpha))
        rec[1] = float(ema_update(ema, pt, c.ema_decay))
        rec[2] = rec[2] + 1 if p == 1.0 else 0
        if c.prune and rec[3] and p < 1.0:  # a replayed prompt that is no longer solved comes back
            rec[3], rec[2] = False, 0
            self.pending["reactivated"] += 1
        elif c.prune and rec[2] >= c.prune_streak:
            rec[3] = True
        return e

    # ------------------------------------------------------------ after advantages
    def select(self, ctx: SelectContext) -> tuple[torch.Tensor, dict[str, float]]:
        c, n = self.cfg, len(ctx.items)
        e = torch.nan_to_num(ctx.scores.double(), nan=0.0)  # (B,)
        first = ctx.kinds == 0
        keep = torch.ones(n, dtype=torch.bool)
        ratio, k = warmup_ratio(c.selection_ratio, self.epoch, c.warmup_transition_epochs), n
        if self.epoch > 0 and first.any():  # epoch 0 only records the anchors
            k = select_count(int(first.sum()), ratio, c.min_selection_ratio)
            keep[first] = top_k_jitter(e[first], k, c.jitter, self.gen)
        zero = zero_advantage_groups(ctx.advantages)
        keep &= ~zero
        keep = round_down(keep, c.round_to or ctx.minibatches, self.gen)
        return keep, self._metrics(ctx, keep, zero, e[first], ratio, k)

    def _metrics(self, ctx: SelectContext, keep, zero, e_first, ratio: float, k: int) -> dict[str, float]:
        sav = savings(ctx, keep)
        skipped = self.pending["skipped"]
        per_group = float(ctx.tokens.double().mean()) if len(ctx.tokens) else 0.0
        gen_est = (
            skipped * per_group
        )  # completion tokens the skipped prompts' groups would have cost, at this batch's mean
        self.totals["update_tokens_saved"] += sav["select/update_tokens_saved"]
        self.totals["update_flops_saved"] += sav["select/update_flops_saved"]
        self.totals["gen_tokens_saved_est"] += gen_est
        self.totals["skipped"] += skipped
        out = {
            **sav,
            "select/epoch": float(self.epoch),
            "select/groups": float(len(keep)),
            "select/kept": float(keep.sum()),
            "select/kept_frac": float(keep.float().mean()) if len(keep) else 0.0,
            "select/k": float(k),
            "select/ratio": ratio,
            "select/active": float((e_first > 0).sum()),
            "select/dropped_zero_adv": float(zero.sum()),
            "select/pruned": float(sum(r[3] for r in self.prompts.values())),
            "select/replay": float(len(self.replay)),
            "select/known": float(len(self.prompts)),
            "select/skipped": float(skipped),
            "select/reactivated": float(self.pending["reactivated"]),
            "select/gen_tokens_saved_est": gen_est,
            "select/gen_flops_saved_est": GEN_FLOPS_PER_TOKEN_PARAM * ctx.n_params * gen_est,
            **{f"select/total/{k2}": v for k2, v in self.totals.items()},
            **quantiles(e_first, (0.25, 0.5, 0.75), "select/energy"),
        }
        self.pending = {"skipped": 0, "reactivated": 0}
        return out

    # ------------------------------------------------------------ checkpoint
    def state_dict(self) -> dict[str, Any]:
        return {
            "prompts": {k: list(v) for k, v in self.prompts.items()},
            "epoch": self.epoch,
            "replay": sorted(self.replay),
            "gen": self.gen.get_state(),
            "replay_rng": self.replay_rng.getstate(),
            "pending": dict(self.pending),
            "totals": dict(self.totals),
        }

    def load_state_dict(self, state: dict[str, Any], known: dict[str, str] | None) -> None:
        check_known_keys(list(state["prompts"]), known, {k: v[4] for k, v in state["prompts"].items()})
        self.prompts = {k: list(v) for k, v in state["prompts"].items()}
        self.epoch, self.replay = state["epoch"], set(state["replay"])
        self.gen.set_state(state["gen"])
        self.replay_rng.setstate(state["replay_rng"])
        self.pending, self.totals = dict(state["pending"]), dict(state["totals"])
