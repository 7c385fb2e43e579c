"""STRIDE's redirection round (arXiv 2605.18851; the maths is [inferred], spec section 7 of
shared/specs/distill-and-data.md): failed first-round rollouts are critiqued (the first wrong step
``k_hat`` named), the steps before ``k_hat`` are kept and ``n_r`` continuations are regenerated from
there under prompt + critique, then trained *without* the critique on their suffix tokens only.

A redirected suffix gets the harmless advantage ``max(r(y') - b, 0)`` (``b`` = its prompt's
first-round mean reward), so a wrong critique can only fail to help. With ``ratio=True`` the suffix
carries the detached sequence weight ``clamp(pi(suffix | x, s_<k) / pi(suffix | x, crit, s_<k), 0, c)``
and its behaviour log-probs become the no-critique re-score, so the PPO ratio starts at 1.

The critic is the task's exact critique (``critic="task"``) or the same model in a verifier role
(``critic="model"``): ``n_v`` critiques per failed trajectory, rewarded ``1[verdict agrees] +
eta * 1[its redirect succeeded]`` and trained with group-relative advantages over each trajectory's
``n_v`` critiques.

Groups hold G rows of one prompt: ``G // n_r`` redirections (or ``G // n_v`` critiqued trajectories)
each; a prompt's redirections that do not fill a group are dropped (counted in ``stride/dropped``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Sequence

import torch

from ..advantages.subgroups import harmless_advantage, parse_first_error, parse_verdict, verifier_reward
from ..rollout import concat_rollouts
from ..rollout.branch import char_to_token, token_char_offsets
from ..config.rules import Rule, above, at_least, one_of
from ..seeds import stable_seed
from ..tasks import guidance
from ..tasks.protocols import WithCritiques
from .protocol import RoundContext, register_part
from .strategy import Groups

CRITICS = ("task", "model")


def pack_round_robin(counts: Sequence[int], chunk: int, cap: int) -> tuple[list[int], int]:
    """How many units of each prompt to take, ``chunk`` at a time, prompts in turn, at most ``cap``
    units in all (rounded down to whole chunks, at least one chunk): (taken per prompt, units dropped
    because they cannot fill a chunk). Units the cap leaves out are not "dropped" (never asked for)."""
    taken, full = [0] * len(counts), [c - c % chunk for c in counts]
    budget, moved = max(cap - cap % chunk, chunk), True  # a cap below one chunk still allows one group
    while moved and budget >= chunk:
        moved = False
        for i in range(len(counts)):
            if taken[i] < full[i] and budget >= chunk:
                taken[i], budget, moved = taken[i] + chunk, budget - chunk, True
    return taken, sum(c % chunk for c in counts)


def suffix_is_weight(
    logp_plain: torch.Tensor, logp_behaviour: torch.Tensor, mask: torch.Tensor, clip: float
) -> torch.Tensor:
    """(N, T), (N, T), (N, T) -> (N,): ``clamp(exp(sum_t mask (logp_plain - logp_behaviour)), 0, clip)``,
    the suffix's sequence importance ratio pi(.|x, prefix) / pi(.|x, critique, prefix), detached."""
    log_ratio = ((logp_plain.float() - logp_behaviour.float()) * mask.float()).sum(-1)  # (N,)
    return log_ratio.clamp(max=80.0).exp().clamp(0.0, clip).detach()  # exp(80) ~ 5e34: no inf before the clip


@dataclass
class _Unit:
    """One redirection: first-round group ``group``, source row ``row``, the critique and its cut."""

    group: int
    row: int
    critique: str
    cut: int  # completion tokens kept
    vrow: int = -1  # the verifier row that wrote the critique (critic="model")


@register_part("redirect")
@dataclass(frozen=True)
class Redirect:
    """STRIDE redirection round (a :class:`~reasonrl.parts.strategy.Round`). Every field but ``critic``
    is an [inferred] choice with the spec's default where it has one."""

    critic: str = "task"  # task: the task's exact critique; model: the policy as verifier
    n_r: int = 4  # continuations per redirected trajectory (spec: 4)
    n_v: int = 4  # critiques per failed trajectory (critic=model; not fixed by the spec)
    harmless: bool = True  # clip negative redirect advantages to 0 (spec default)
    ratio: bool = True  # importance ratio no-critique / critique on the suffix (spec: on, clip c)
    clip: float = 5.0  # c
    lambda_r: float = 1.0  # weight of the redirected-suffix term (spec: 1)
    eta: float = 0.5  # verifier reward for a useful localisation (spec: 0.5)
    max_redirects: int | None = None  # redirections per step; None: the number of first-round prompts
    template: str = "{critique}\n"  # how the critique sits between the prompt and the kept prefix

    needs: ClassVar[frozenset[str]] = frozenset({"in_process", "branch"})  # continuations branch on the trainer's model

    @property
    def task_needs(self) -> tuple[type, ...]:
        return (WithCritiques,) if self.critic == "task" else ()  # critic=task: the task's exact critique

    RULES: ClassVar[dict[str, Rule]] = {
        "critic": one_of(CRITICS),
        # a group packs group_size // n_r redirections (group_size // n_v critiques)
        "n_r": Rule(
            lambda v, c: v >= 1 and c.get("group_size", v) % v == 0,
            lambda c: f"a divisor of group_size = {c.get('group_size')} (>= 1)",
        ),
        "n_v": Rule(
            lambda v, c: v >= 1 and c.get("group_size", v) % v == 0,
            lambda c: f"a divisor of group_size = {c.get('group_size')} (>= 1)",
        ),
        "clip": above(0),
        "lambda_r": at_least(0),
        "eta": at_least(0),
        "max_redirects": Rule(lambda v, _: v >= 1, ">= 1, or null for the number of prompts per step"),
        "template": Rule(lambda v, _: "{critique}" in v, "text containing {critique}"),
    }

    def extend(self, ctx: RoundContext) -> tuple[Groups | None, dict[str, float]]:
        batch, G = ctx.batch, ctx.group_size
        firsts = (batch.group_kinds() == 0).nonzero().squeeze(-1).tolist()
        cap = self.max_redirects or len(firsts)
        failed = {i: [i * G + j for j in range(G) if not batch.correct[i, j]] for i in firsts}
        metrics = {"stride/unparsed": 0.0, "stride/dropped": 0.0}
        if self.critic == "task":
            units, vgroups = self._task_units(ctx, batch, failed, metrics), None
        else:
            units, vgroups = self._model_units(ctx, batch, failed, cap, metrics)
        units = self._pack(units, G // self.n_r, cap if self.critic == "task" else len(units), metrics)
        redirected = self._redirect(ctx, batch, units, metrics) if units else None
        verifier = None if vgroups is None else self._verifier_groups(ctx, units, redirected, vgroups, metrics)
        parts = [p for p in (redirected, verifier) if p is not None]
        for key in ("stride/redirects", "stride/success_rate", "stride/zero_pass_prompts_helped"):
            metrics.setdefault(key, 0.0)
        if not parts:  # nothing redirected: no groups, the counts still reported
            return None, metrics
        return _join(parts, ctx.tok.pad_token_id), metrics

    # ------------------------------------------------------------------ critiques
    def _cut(self, ctx: RoundContext, batch: Any, row: int, k_hat: int) -> int | None:
        """Completion tokens kept before step ``k_hat`` of ``row`` (the task's step splitting), or None
        when the step does not exist."""
        text, n = batch.ro.texts[row], int(batch.ro.lengths[row])
        try:
            _, chars = guidance.prefix_before_step(ctx.task, text, k_hat)
        except ValueError:  # a step the completion does not have: the critique is unusable
            return None
        spans = token_char_offsets(ctx.tok, batch.ro.completion_ids[row, :n])
        return min(char_to_token(spans, chars), n - 1)  # a whole-text prefix still regenerates the last token

    def _task_units(self, ctx: RoundContext, batch: Any, failed: dict[int, list[int]], metrics: dict) -> list[_Unit]:
        units = []
        for i, rows in failed.items():
            for r in rows:
                crit = guidance.critique(ctx.task, batch.items[i], batch.ro.texts[r])
                cut = None if crit.first_error is None else self._cut(ctx, batch, r, crit.first_error)
                if cut is None:
                    metrics["stride/unparsed"] += 1
                    continue
                units.append(_Unit(i, r, crit.text, cut))
        return units

    def _model_units(
        self, ctx: RoundContext, batch: Any, failed: dict[int, list[int]], cap: int, metrics: dict
    ) -> tuple[list[_Unit], dict]:
        """The policy critiques failed trajectories (``G // n_v`` per prompt at a time, about
        ``cap / n_v`` in all, so redirections stay near ``cap``); every parseable critique is a unit."""
        G = ctx.group_size
        kv = G // self.n_v
        counts, _ = pack_round_robin([len(r) for r in failed.values()], kv, max(kv, cap // self.n_v))
        chosen = [(i, r) for (i, rows), c in zip(failed.items(), counts) for r in rows[:c]]
        if not chosen:
            return [], {"items": [], "ro": None}
        items = [batch.items[i] for i, _ in chosen]
        prompts = [
            ctx.formatter.rewrite(
                batch.items[i].prompt,
                lambda p: guidance.critique_prompt(
                    ctx.task,
                    dataclasses.replace(batch.items[i], prompt=p),  # noqa: B023 - rewrite() calls the edit at once
                    batch.ro.texts[r],  # noqa: B023 - (and so in this iteration)
                ),
            )
            for i, r in chosen
        ]
        ro_v = ctx.sample(items, prompts, "stride-verify", ctx.position, n=self.n_v)
        units = []
        for t, (i, r) in enumerate(chosen):
            for j in range(self.n_v):
                v = t * self.n_v + j
                k_hat = parse_first_error(ro_v.texts[v])
                cut = None if k_hat is None else self._cut(ctx, batch, r, k_hat)
                if cut is None:
                    metrics["stride/unparsed"] += 1
                    continue
                units.append(_Unit(i, r, ro_v.texts[v].strip(), cut, vrow=v))
        return units, {"items": items, "ro": ro_v}

    def _pack(self, units: list[_Unit], chunk: int, cap: int, metrics: dict) -> list[_Unit]:
        """Units regrouped prompt by prompt into whole groups (``chunk`` units each), at most ``cap``."""
        by_group: dict[int, list[_Unit]] = {}
        for u in units:
            by_group.setdefault(u.group, []).append(u)
        taken, dropped = pack_round_robin([len(us) for us in by_group.values()], chunk, cap)
        metrics["stride/dropped"] += dropped
        return [u for us, c in zip(by_group.values(), taken) for u in us[:c]]

    # ------------------------------------------------------------------ redirection
    def _redirect(self, ctx: RoundContext, batch: Any, units: list[_Unit], metrics: dict) -> Groups:
        """``n_r`` continuations per unit from its kept prefix under prompt + critique, rewarded,
        with harmless advantages and (optionally) importance weights."""
        G, n_r = ctx.group_size, self.n_r
        rows = [u.row for u in units for _ in range(n_r)]
        cuts = [u.cut for u in units for _ in range(n_r)]
        contexts = [
            ctx.formatter.rewrite(batch.ro.prompts[u.row], lambda p: p + self.template.format(critique=u.critique))  # noqa: B023 - rewrite() calls the edit at once, in this iteration
            for u in units
            for _ in range(n_r)
        ]
        gen = torch.Generator(ctx.device).manual_seed(stable_seed(ctx.seed, "stride", ctx.position))
        ro = ctx.branch(batch.ro, rows, cuts, gen, contexts=contexts)
        per = G // n_r  # units per group
        items = [batch.items[units[g * per].group] for g in range(len(units) // per)]
        rewards, correct, _ = ctx.reward(items, ro)  # (B', G): every group holds one prompt's units
        flat = rewards.view(-1)  # (N,) unit-major, n_r rows per unit
        preset = torch.cat(
            [
                harmless_advantage(flat[k * n_r : (k + 1) * n_r], float(batch.rewards[u.group].mean()), self.harmless)
                for k, u in enumerate(units)
            ]
        ).view(-1, G)  # (B', G)
        suffix = ro.train_mask.bool()  # (N, T)
        plain = ctx.score_under(list(ro.prompts), ro, torch.arange(len(rows))).logprobs.to(ro.logprobs)  # (N, T)
        w = suffix_is_weight(plain, ro.logprobs, suffix, self.clip) if self.ratio else torch.ones(len(rows))
        ro.logprobs = torch.where(suffix, plain, ro.logprobs)  # the loss's old policy: no critique, ratio 1 at first
        ok = correct.view(-1)
        helped = {u.group for k, u in enumerate(units) if ok[k * n_r : (k + 1) * n_r].any()}
        zero = {u.group for u in units if not batch.correct[u.group].any()}
        metrics.update(
            {
                "stride/redirects": float(len(units)),
                "stride/success_rate": float(ok.float().mean()),
                "stride/zero_pass_prompts_helped": float(len(helped & zero)),
                "stride/is_weight_mean": float(w.mean()),
                "stride/advantage_mean": float(preset.mean()),
            }
        )
        return Groups(items, ro, rewards, correct, preset=preset, weight=self.lambda_r * w)

    # ------------------------------------------------------------------ verifier
    def _verifier_groups(
        self, ctx: RoundContext, units: list[_Unit], redirected: Groups | None, v: dict, metrics: dict
    ) -> Groups | None:
        """The critiques as groups: reward = agreement with the outcome verifier (every critiqued
        trajectory failed) + eta x its redirection succeeded; advantages group-relative over each
        trajectory's ``n_v`` critiques (the recipe's estimator on (trajectories, n_v))."""
        ro_v = v["ro"]
        if ro_v is None:
            return None
        G, n_v = ctx.group_size, self.n_v
        success = (
            {
                u.vrow: bool(redirected.correct.view(-1)[k * self.n_r : (k + 1) * self.n_r].any())
                for k, u in enumerate(units)
            }
            if redirected is not None
            else {}
        )
        verdicts = [parse_verdict(t) for t in ro_v.texts]
        r = torch.tensor([verifier_reward(vd, False, success.get(k, False), self.eta) for k, vd in enumerate(verdicts)])
        agree = torch.tensor([float(vd == "incorrect") for vd in verdicts])
        per = G // n_v  # critiqued trajectories per group, all of one prompt
        preset = ctx.advantage(r.view(-1, n_v)).reshape(-1, G)  # (B', G)
        metrics["stride/verifier_reward_mean"] = float(r.mean())
        metrics["stride/verifier_groups"] = float(len(r) // G)
        metrics["stride/verdict_agreement"] = float(agree.mean())
        return Groups(v["items"][::per], ro_v, r.view(-1, G), agree.view(-1, G), preset=preset)


def _join(parts: list[Groups], pad_id: int) -> Groups:
    R = [len(p.ro.texts) for p in parts]
    weight = torch.cat([p.weight if p.weight is not None else torch.ones(n) for p, n in zip(parts, R)])
    return Groups(
        sum((p.items for p in parts), []),
        concat_rollouts([p.ro for p in parts], pad_id),
        torch.cat([p.rewards for p in parts]),
        torch.cat([p.correct for p in parts]),
        preset=torch.cat([p.preset for p in parts]),
        weight=weight,
    )
