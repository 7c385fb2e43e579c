"""FlowRL, DISA and TraFL as one recipe part: the trajectory-balance loss term (objectives spec 1.5, 7, 8).

``delta_i = log Z(x) + lbar_theta(y_i) - lbar_ref(y_i) - beta r_hat_i``, ``L = mean_i w_i delta_i^2``
(maths: :mod:`reasonrl.losses.balance`). The recipe's policy loss is off (``loss=None``); this
part's ``loss_term`` is the objective. Through the protocol's hooks:

* ``setup_modules`` -- ``log_z="head"`` (FlowRL, TraFL): FlowRL's 3-layer MLP on the mean-pooled prompt
  hidden state (:mod:`reasonrl.models.heads`), a part module in its own AdamW group
  (``z_lr``), checkpointed, never sent to the rollout engines. ``surrogate="elbo"`` needs a
  masked-diffusion policy.
* ``before_step`` -- ``log_z="table"`` without a ``table`` file (DISA run alone): the offline stage
  once, before the first update, over the run's pool with the initial policy (= the reference) as
  the proposal; the table lives in the part's state, frozen (a resume reads it back).
* ``score_batch`` -- the reference's side, without grad: its token log-probs (``surrogate="token"``:
  exact for a causal LM, d1's one-step estimate for a diffusion LM) or its ELBO under masks drawn
  here once per batch and kept in the channel, so the policy sees the *same* masks (TraFL's coupled
  sampling) and any micro-batch split the same noise; DISA's ``log Z_hat`` looked up per prompt.
* ``loss_term`` -- the policy's side with grad, ``w`` (FlowRL's clipped sequence ratio), the loss.
* ``after_step`` -- with a table: each prompt's mean residual so far (the frozen Z's diagnostic).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ClassVar

import torch
from torch import Tensor

from ..data.partition import (
    ZRow,
    ZTable,
    estimate_rows,
    mismatches,
    missing_error,
    read_header,
    read_table,
    sequence_scores,
    summary,
)
from ..errors import UserError
from ..losses.balance import WEIGHTS, draw_masks, elbo_estimate, sequence_weight, trajectory_balance
from ..models.diffusion import is_diffusion
from ..models.heads import LogZHead, pooled_prompt_hidden
from ..models.scoring import score_completions, trim_padding
from ..rollout.base import policy_tokens
from ..config.rules import Rule, above, at_least, one_of, within
from ..seeds import stable_seed
from .protocol import BatchContext, LossContext, ModelSetup, PartModule, RoundContext, UpdateContext, register_part

HEAD = "log_z"  # the part module's name (ctx.modules)
SOURCES = ("head", "table")
SURROGATES = ("token", "elbo")
REWARDS = ("group", "raw")
MISSING = ("error", "skip")


def _table_problem(path: str, c) -> str:
    """What is wrong with ``balance.table`` for this run before anything loads ("" if nothing): it must be a
    table file whose header has the run's beta, convention and sampling temperature (``ZTable.check``)."""
    if c.get("log_z") != "table":
        return f"null: log_z={c.get('log_z')} reads no table"
    header = read_header(path) if Path(path).is_file() else None
    if header is None:
        return (
            "a table file that exists (reasonrl disa estimate --out FILE), or null to estimate one over the run's pool"
        )
    bad = mismatches(header, c.get("beta"), c.get("length_norm"), c.get("sampling.temperature") or 1.0)
    return f"a table of this run's settings ({'; '.join(bad)}): re-estimate it or match them" if bad else ""


@register_part("balance")
@dataclass(frozen=True)
class TrajectoryBalance:
    """The trajectory-balance objective; each field is FlowRL's / the spec's default unless marked."""

    PHASE = "objective"  # the hook order (parts/registry.py)

    beta: float = 15.0  # FlowRL's hard-coded beta (FlowRLActor.flowrl_beta_coef)
    reward: str = "group"  # r_hat: the recipe's group-normalised advantage (FlowRL) or the raw reward (DISA)
    length_norm: bool = True  # lbar = the token mean (FlowRL); false: sequence sums (DISA's exact variant)
    weight: str = "clip"  # w: clip | cap | none | one (losses.balance.WEIGHTS)
    clip_low: float = 0.2  # the spec's eps = 0.2 (FlowRL's code: 0.2 / 0.28)
    clip_high: float = 0.2
    cap: float = 10.0  # weight=cap: FlowRL's TIS variant
    log_z: str = "head"  # head (FlowRL, TraFL) | table (DISA)
    z_lr: float = 1e-3  # [inferred] the fresh head's own lr (FlowRL: the policy's, 1e-6 at 7B)
    z_layers: int = 3
    z_dropout: float = 0.1
    z_detach: bool = False  # false: the backbone gets gradient through log Z too, as FlowRL's shared forward
    table: str | None = None  # DISA: `reasonrl disa estimate` output; None: estimate over the pool at the start
    proposals: int = 8  # DISA's N (spec: 8) when the part estimates the table itself
    missing: str = "error"  # DISA: a prompt without a row is an error, or its rows leave the loss (skip)
    surrogate: str = "token"  # token: the trainer's log-probs | elbo: TraFL's masked-diffusion ELBO
    mc: int = 1  # elbo: K_mc mask draws per update (spec: 1)
    mask_t: float | None = None  # elbo: None draws t ~ U(t_min, 1] (LLaDA); a number fixes t (d1's style)
    t_min: float = 1e-3  # LLaDA's eps

    RULES: ClassVar[dict[str, Rule]] = {
        "beta": above(0),
        "reward": one_of(REWARDS),
        "weight": one_of(WEIGHTS),
        "clip_low": within(0, 1, open_hi=True),
        "clip_high": at_least(0),
        "cap": above(0),
        "log_z": one_of(SOURCES),
        "z_lr": above(0),
        "z_layers": at_least(1),
        "z_dropout": within(0, 1, open_hi=True),
        "proposals": at_least(1),
        "missing": one_of(MISSING),
        "table": Rule(lambda v, c: v is None or not _table_problem(v, c), lambda c: _table_problem(c.get("table"), c)),
        "surrogate": Rule(
            lambda v, c: v in SURROGATES and (v == "token" or c.get("log_z") == "head"),
            lambda c: (
                f"one of {', '.join(SURROGATES)}; elbo needs log_z=head (here log_z="
                f"{c.get('log_z')}: a table is estimated with token scores)"
            ),
        ),
        "mc": at_least(1),
        "mask_t": within(0, 1, open_lo=True),
        "t_min": within(0, 1, open_lo=True),
    }

    @property
    def needs(self) -> frozenset[str]:
        """The reference always (lbar_ref); a finite pool when the table is estimated in the run."""
        own_table = self.log_z == "table" and self.table is None
        table = {"exclude_rows"} if self.log_z == "table" else set()  # rows of prompts the table lacks leave the loss
        return frozenset({"reference", "pool", *table} if own_table else {"reference", *table})

    # ------------------------------------------------------------------ setup: the log Z head
    def setup_modules(self, ctx: ModelSetup) -> tuple[dict[str, PartModule], dict[str, float]]:
        """FlowRL's log Z head (``log_z="head"``), in its own AdamW group at ``z_lr`` on the recipe's LR
        schedule (the head trains beside the policy, as verl's recipe puts it in the actor's optimiser)."""
        model = ctx.model
        if self.surrogate == "elbo" and not is_diffusion(model):
            raise UserError(
                "balance.surrogate=elbo (TraFL) needs a masked-diffusion policy: --model builtin:diffusion "
                "(or a folder `reasonrl pretrain --arch diffusion` wrote)"
            )
        if self.log_z != "head":
            return {}, {}
        device = next(model.parameters()).device
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            torch.manual_seed(stable_seed(ctx.seed, "log-z-head"))
            head = LogZHead(model.config.hidden_size, self.z_layers, self.z_dropout).to(device)
        return {HEAD: PartModule(head, lr=self.z_lr, schedule=True)}, {}

    # ------------------------------------------------------------------ DISA's offline stage, in the run
    def before_step(self, ctx: RoundContext) -> tuple[None, dict[str, float]]:
        if self.log_z != "table" or "table" in ctx.state:
            return None, {}
        if self.table is not None:
            table = read_table(self.table)
        else:  # proposals of the initial policy
            table = ZTable.of(
                self.table_header(ctx, "the initial policy", "the initial policy"), self.offline_rows(ctx)
            )
        table.check(self.beta, self.length_norm, ctx.sampling.temperature or 1.0)  # the residual's scoring temperature
        ctx.state["table"] = table.state()
        ctx.state["table_summary"] = summary(list(table.rows.values()))
        return None, {}

    def table_header(self, ctx: RoundContext, proposal: str, reference: str) -> dict:
        """A table's settings: what the residual must share with it (``ZTable.check``), and its models."""
        return {
            "beta": self.beta,
            "length_norm": self.length_norm,
            "proposals": self.proposals,
            "temperature": ctx.sampling.temperature or 1.0,
            "proposal": proposal,
            "reference": reference,
        }

    def offline_rows(self, ctx: RoundContext, on_chunk: Callable[[int], None] = lambda k: None) -> list[ZRow]:
        """DISA's offline stage over the run's pool: one table row per prompt at ``self.beta``."""
        return estimate_rows(list(ctx.pool), *self.offline_scores(ctx, on_chunk), self.beta)

    def offline_scores(self, ctx: RoundContext, on_chunk: Callable[[int], None] = lambda k: None) -> tuple[Tensor, ...]:
        """(P, N) lbar_ref, lbar_mu and rewards of ``proposals`` samples per prompt of the run's pool, in chunks of
        32: sampled by ``ctx.sample`` (the run's formatter, budget and temperature, seeded by task position; the
        run's policy, or `reasonrl disa estimate --proposal`'s model), rewarded by ``ctx.reward`` (the recipe's
        reward) and scored under ``ctx.reference()`` with the residual's convention. Everything log Z_hat needs,
        for any beta."""
        if not ctx.pool:
            raise UserError("DISA's offline stage estimates log Z over the run's pool: set data.pool (e.g. 128)")
        out = []
        for s in range(0, len(ctx.pool), 32):
            out.append(self._scores(ctx, list(ctx.pool[s : s + 32]), s))
            on_chunk(len(ctx.pool[s : s + 32]))
        return tuple(torch.cat([o[i] for o in out]) for i in range(3))

    def _scores(self, ctx: RoundContext, items: list, first: int) -> tuple[Tensor, Tensor, Tensor]:
        n, temp = self.proposals, ctx.sampling.temperature or 1.0
        ro = ctx.sample(items, [it.prompt for it in items], tag="disa", first=first, n=n)
        rewards, _, _ = ctx.reward(items, ro)  # (B, N) the recipe's rewards (raw: no group normalisation)
        with torch.no_grad(), ctx.reference() as ref:
            lp, _ = score_completions(
                ref,
                ro.prompt_ids,
                ro.prompt_mask,
                ro.completion_ids,
                ro.completion_mask,
                temperature=temp,
                chunk_rows=ctx.micro,
                entropies=False,
            )
        own = policy_tokens(ro)  # (R, T) the sequence is the policy's tokens (an episode's observations are not)
        lbar_ref = sequence_scores(lp.cpu(), own, self.length_norm).view(-1, n)
        lbar_mu = sequence_scores(ro.logprobs, own, self.length_norm).view(-1, n)
        return lbar_ref, lbar_mu, rewards

    # ------------------------------------------------------------------ the reference's side, once per batch
    def score_batch(self, ctx: BatchContext) -> tuple[None, dict[str, float]]:
        if ctx.reference is None:
            raise RuntimeError("the balance part needs the run's reference model (its needs include 'reference')")
        ro, rows, metrics = ctx.rollouts, ctx.data.rows, {}
        with torch.no_grad(), ctx.reference() as ref:
            if self.surrogate == "elbo":
                rows.update(self._reference_elbo(ctx, ref))
            else:
                lp, _ = score_completions(
                    ref,
                    ro.prompt_ids,
                    ro.prompt_mask,
                    ro.completion_ids,
                    ro.completion_mask,
                    temperature=ctx.temperature,
                    chunk_rows=ctx.micro,
                    entropies=False,
                )
                rows["ref_logp"] = lp.cpu()  # (R, T)
        if self.log_z == "table":
            metrics.update(self._table_rows(ctx))
        return None, metrics

    def _reference_elbo(self, ctx: BatchContext, ref) -> dict[str, Tensor]:
        """TraFL's masks for the batch, (R, K) levels and (R, K, L) masks, and the reference's (R,) ELBO under them."""
        ro, L = ctx.rollouts, ctx.policy.config.canvas
        gen = torch.Generator().manual_seed(stable_seed(ctx.seed, "balance-elbo", ctx.step))
        t, masks = draw_masks(len(ro.texts), self.mc, L, gen, self.mask_t, self.t_min)
        lbar = torch.cat(
            [
                self._elbo(ref, ro, idx, t[idx], masks[idx], ctx.temperature).cpu()
                for idx in torch.arange(len(ro.texts)).split(ctx.micro)
            ]
        )
        return {"elbo_t": t, "elbo_mask": masks, "lbar_ref": lbar}

    def _elbo(self, model, ro, idx: Tensor, t: Tensor, masks: Tensor, temperature: float) -> Tensor:
        """(n,) the ELBO surrogate of rows ``idx`` under ``model`` (grad as the caller's mode)."""
        p_ids, p_mask = trim_padding(ro.prompt_ids[idx], ro.prompt_mask[idx])
        c_ids, c_mask = ro.completion_ids[idx], ro.completion_mask[idx]
        logp = model.masked_token_logp(p_ids, p_mask, c_ids, c_mask, masks, temperature)  # (n, K, L)
        scored = torch.zeros(len(idx), masks.shape[-1])
        scored[:, : c_mask.shape[1]] = c_mask  # the response's positions on the canvas
        lbar = elbo_estimate(logp, masks.to(logp.device), t.to(logp.device), scored.to(logp.device))
        return lbar if self.length_norm else lbar * scored.sum(-1).to(lbar)

    def _table_rows(self, ctx: BatchContext) -> dict[str, float]:
        """(R,) log Z_hat of every row from the frozen table; missing prompts fail or leave the loss."""
        table = ZTable.from_state(ctx.state["table"])
        values, missing = table.lookup(ctx.items)
        G = ctx.rewards.shape[1]
        if missing and self.missing == "error":
            raise missing_error(ctx.items, missing, table.source)
        if missing:  # skip: those rows leave the loss mask, so the loss and its normalisers leave them out
            ctx.exclude_rows(torch.tensor([i * G + j for i in missing for j in range(G)], dtype=torch.long))
        ctx.data.rows["log_z"] = torch.nan_to_num(values, nan=0.0).repeat_interleave(G)  # (R,)
        known = values[~values.isnan()]
        st = ctx.state["table_summary"]
        return {
            "disa/missing": float(len(missing)),
            "disa/log_z_batch": float(known.mean()) if len(known) else 0.0,
            "disa/ess_mean": st["ess_mean"],
            "disa/ess_min": st["ess_min"],
            "disa/ess_tilted_mean": st["ess_tilted_mean"],
        }

    # ------------------------------------------------------------------ the policy's side, per micro-batch
    def loss_term(self, ctx: LossContext) -> tuple[Tensor, dict[str, float]]:
        b, rows, dev = ctx.batch, ctx.rows, ctx.logp.device
        T = ctx.logp.shape[1]
        data = ctx.data.rows
        if self.surrogate == "elbo":
            lbar = self._elbo(ctx.model, b.ro, rows, data["elbo_t"][rows], data["elbo_mask"][rows], ctx.temperature)
            lbar_ref = data["lbar_ref"][rows].to(dev)
        else:
            lbar = sequence_scores(ctx.logp, ctx.mask, self.length_norm)  # (n,)
            lbar_ref = sequence_scores(data["ref_logp"][rows, :T].to(dev), ctx.mask, self.length_norm)
        w = sequence_weight(
            ctx.logp, b.ro.logprobs[rows, :T].to(dev), ctx.mask, self.weight, self.clip_low, self.clip_high, self.cap
        )
        log_z, reward = self._log_z(ctx, rows), self._reward(ctx, rows, T)
        loss, metrics = trajectory_balance(log_z, lbar, lbar_ref, reward, w, self.beta, ctx.n_seqs)
        if self.log_z == "table":  # the frozen Z's diagnostic: each prompt's residual
            self._record_residuals(ctx, rows, (log_z + lbar - lbar_ref - self.beta * reward).detach().cpu())
        return loss, metrics

    def _log_z(self, ctx: LossContext, rows: Tensor) -> Tensor:
        """(n,) log Z: the head on the rows' prompts (with grad), or the frozen table's values."""
        if self.log_z == "table":
            return ctx.data.rows["log_z"][rows].to(ctx.logp.device)
        p_ids, p_mask = trim_padding(ctx.batch.ro.prompt_ids[rows], ctx.batch.ro.prompt_mask[rows])
        dev = next(ctx.model.parameters()).device
        with torch.set_grad_enabled(not self.z_detach):
            pooled = pooled_prompt_hidden(ctx.model, p_ids.to(dev), p_mask.to(dev))  # (n, H)
        return ctx.modules[HEAD](pooled).to(ctx.logp.device)

    def _reward(self, ctx: LossContext, rows: Tensor, T: int) -> Tensor:
        """(n,) r_hat: the recipe's advantage (token-level ones averaged over the mask) or the raw reward."""
        b = ctx.batch
        if self.reward == "raw":
            return b.rewards.reshape(-1)[rows].to(ctx.logp)
        adv = b.advantages[rows]
        if adv.dim() == 2:
            return sequence_scores(adv[:, :T].to(ctx.logp), ctx.mask, True)
        return adv.to(ctx.logp)

    def _record_residuals(self, ctx: LossContext, rows: Tensor, delta: Tensor) -> None:
        """Each prompt's running residual sum and count (state["residual"]: key -> [sum, n])."""
        G = ctx.batch.rewards.shape[1]
        acc = ctx.state.setdefault("residual", {})
        for r, d in zip(rows.tolist(), delta.tolist()):
            entry = acc.setdefault(ctx.batch.items[r // G].key, [0.0, 0])
            entry[0] += d
            entry[1] += 1

    def after_step(self, ctx: UpdateContext) -> tuple[None, dict[str, float]]:
        acc = ctx.state.get("residual")
        if not acc:
            return None, {}
        means = torch.tensor([s / n for s, n in acc.values()])
        return None, {
            "disa/residual_prompts": float(len(means)),
            "disa/residual_prompt_mean": float(means.mean()),
            "disa/residual_prompt_abs": float(means.abs().mean()),
        }
