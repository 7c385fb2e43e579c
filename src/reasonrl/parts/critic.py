"""PPO's critic as one recipe part: a learned value model, GAE advantages and the clipped value loss.

Spec: shared/specs/envs-selfplay-eval.md section 8 (GRLO runs verl's PPO with ``adv_estimator=gae``,
gamma = lam = 1, a separate critic from the actor's base, critic lr 10x the actor's). Each step:

1. ``score_batch``: the critic's values V(s_t) of every completion token, no grad (the values the
   advantages are computed from and the value clip is centred on), into the part's channel rows.
2. ``shape_advantages``: the sequence reward (B, G) goes on each row's last trainable token,
   :func:`reasonrl.advantages.gae` turns it into per-token advantages and returns, masked positions
   (tool observations) carried through; ``whiten`` normalises the advantages over the batch's
   tokens (verl always whitens GAE advantages). The estimator's (B, G) output is replaced: the critic
   is the baseline, so a group of one works (``rollout.n = 1``, as GRLO).
3. ``loss_term``: ``vf_coef * 0.5 * max((V - R)^2, (clip(V, V_old +- value_clip) - R)^2)``, token
   mean over the minibatch's global token count (verl ``compute_value_loss``).

The critic (``model``) is ``policy`` (a separate model copied from the policy at the start, GRLO's
"initialised from the same base"), a directory (a causal LM, with ``value_head.safetensors`` when it
has a trained head), or ``head`` (a value head on the policy's own last hidden states, sharing its
forward: ``needs`` "hidden"; the value loss then also trains the shared backbone, as a shared-
network PPO). It is a :class:`~reasonrl.parts.protocol.PartModule`: its own AdamW group (``lr``,
``weight_decay``), its own gradient clip, checkpointed beside the policy and restored bit-exactly.

``warmup_steps`` (verl's ``critic_warmup``): for that many first steps the actor's advantages are 0,
so the policy loss has no gradient and, with ``optim.weight_decay = 0``, AdamW leaves the actor's
weights exactly as they were (its moments stay 0) while the critic learns; a value head reads
detached hidden states then, so the shared backbone does not move either.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import torch
from torch import Tensor

from ..advantages.gae import gae, last_token_rewards, masked_whiten
from ..losses.value import value_loss
from ..models.critic import ValueHead, critic_from_policy, load_critic, policy_hidden
from ..models.scoring import trim_padding
from ..rollout.base import trained_tokens
from ..config.rules import Rule, above, at_least, within
from ..seeds import stable_seed
from .protocol import BatchContext, LossContext, ModelSetup, PartModule, register_part

SOURCES = ("policy", "head")  # or a directory


@register_part("critic")
@dataclass(frozen=True)
class Critic:
    """A learned value model with GAE. Defaults are verl's (gamma 1, lam 1, value clip 0.5, whitened
    advantages) with the tiny reasoner's critic lr (10x grpo's actor lr 5e-5, GRLO's ratio)."""

    PHASE = "estimate"  # its GAE replaces the estimator: every later part shapes its advantages

    model: str = "policy"  # policy (a separate copy) | head (on the policy) | an HF directory
    lr: float = 5e-4
    gamma: float = 1.0
    lam: float = 1.0
    whiten: bool = True
    value_clip: float | None = 0.5
    vf_coef: float = 1.0
    warmup_steps: int = 0  # first steps that train the critic alone (verl critic_warmup)
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0  # the critic's own clip (the actor keeps optim.max_grad_norm)

    RULES: ClassVar[dict[str, Rule]] = {
        "model": Rule(
            lambda v, _: v in SOURCES or (Path(v) / "config.json").is_file(),
            "policy, head, or an HF model directory (a folder with config.json)",
        ),
        "lr": above(0),
        "gamma": within(0, 1),
        "lam": within(0, 1),
        "value_clip": Rule(lambda v, _: v > 0, "> 0 (verl: 0.5), or null for no clip"),
        "vf_coef": above(0),
        "warmup_steps": Rule(
            lambda v, c: v >= 0 and (v == 0 or not c.get("optim.weight_decay")),
            ">= 0; > 0 needs optim.weight_decay = 0 (decay would move the waiting actor)",
        ),
        "weight_decay": at_least(0),
        "max_grad_norm": above(0),
    }

    @property
    def needs(self) -> frozenset[str]:
        return frozenset({"hidden"}) if self.model == "head" else frozenset()

    # ---------------------------------------------------------------- the module
    def setup_modules(self, ctx: ModelSetup) -> tuple[dict[str, PartModule], dict[str, float]]:
        seed = stable_seed(ctx.seed, "critic-head")
        device = next(ctx.model.parameters()).device
        if self.model == "head":
            module = ValueHead(ctx.model.config.hidden_size, seed).to(device)
        elif self.model == "policy":
            module = critic_from_policy(ctx.model, seed)
        else:
            module = load_critic(self.model, seed, device)
        value = PartModule(module, lr=self.lr, weight_decay=self.weight_decay, max_grad_norm=self.max_grad_norm)
        return {"value": value}, {}

    def values(self, module, policy, ro, rows: Tensor, grad: bool = False, hidden: Tensor | None = None) -> Tensor:
        """(n, t) values of ``rows`` (completions trimmed to their longest row), from the policy's
        ``hidden`` states when given (a value head), else from a forward of the critic or the policy."""
        if hidden is not None:  # padding gets the head's bias: the loss's mask drops it
            return module(hidden)
        tokens = trim_padding(
            ro.prompt_ids[rows], ro.prompt_mask[rows], ro.completion_ids[rows], ro.completion_mask[rows]
        )
        with torch.set_grad_enabled(grad):
            if self.model == "head":
                return module(policy_hidden(policy, *tokens)) * tokens[3].to(module.linear.weight)
            return module(*tokens)

    # ---------------------------------------------------------------- the batch: values, GAE
    def score_batch(self, ctx: BatchContext) -> tuple[None, dict[str, float]]:
        ro, R = ctx.rollouts, len(ctx.rollouts.texts)
        out = torch.zeros(ro.completion_ids.shape)  # (R, T) V(s_t), 0 on padding
        for rows in torch.arange(R).split(max(ctx.micro, 1)):
            v = self.values(ctx.modules["value"], ctx.policy, ro, rows).float().cpu()  # (r, t)
            out[rows, : v.shape[1]] = v
        ctx.data.rows["values"] = out
        mask = train_mask(ro)
        return None, {"critic/values_mean": float((out * mask).sum() / mask.sum().clamp(min=1))}

    def shape_advantages(self, adv: Tensor, ctx: BatchContext) -> tuple[Tensor, dict[str, float]]:
        mask = train_mask(ctx.rollouts)  # (R, T)
        values = ctx.data.rows["values"]  # (R, T)
        rewards = last_token_rewards(ctx.rewards.reshape(-1).to(values.dtype), mask)  # (R, T)
        token_adv, returns = gae(rewards, values, mask, self.gamma, self.lam)  # (R, T) each
        ctx.data.rows["returns"] = returns
        metrics = gae_metrics(token_adv, returns, values, mask)
        if self.whiten:
            token_adv = masked_whiten(token_adv, mask)
        warming = ctx.step < self.warmup_steps
        if warming:  # the actor waits: no policy gradient while the critic warms up
            token_adv = torch.zeros_like(token_adv)
        metrics["critic/warmup"] = float(warming)
        return token_adv.view(*adv.shape[:2], -1), metrics

    # ---------------------------------------------------------------- the value loss
    def loss_term(self, ctx: LossContext) -> tuple[Tensor, dict[str, float]]:
        T = ctx.mask.shape[1]
        rows_cpu = ctx.rows.cpu()
        hidden = ctx.hidden
        if hidden is not None and ctx.train_step <= self.warmup_steps:
            hidden = hidden.detach()  # the shared backbone waits with the actor
        v = self.values(ctx.modules["value"], ctx.model, ctx.batch.ro, rows_cpu, grad=True, hidden=hidden)  # (n, T)
        dev = v.device
        old = ctx.data.rows["values"][rows_cpu, :T].to(dev)
        ret = ctx.data.rows["returns"][rows_cpu, :T].to(dev)
        loss, metrics = value_loss(
            v, old, ret, ctx.mask.to(dev, v.dtype), clip=self.value_clip, agg="token-mean", n_tokens=ctx.n_tokens
        )
        loss = self.vf_coef * loss
        return loss, {**metrics, "critic/value_loss_term": float(loss.detach())}


def train_mask(ro) -> Tensor:
    """(R, T) float: the tokens the policy produced and trains on (observation tokens of an episode are 0)."""
    return trained_tokens(ro).float()


@torch.no_grad()
def gae_metrics(adv: Tensor, returns: Tensor, values: Tensor, mask: Tensor) -> dict[str, float]:
    """Token means of the raw advantages, returns and values, and the critic's explained variance
    ``1 - Var(R - V) / Var(R)`` over the trainable tokens (1: perfect, 0: no better than a constant)."""
    n = mask.sum().clamp(min=1)
    mean = lambda x: float((x * mask).sum() / n)  # noqa: E731
    var = lambda x: float((((x - (x * mask).sum() / n) * mask) ** 2).sum() / n)  # noqa: E731
    var_r = var(returns)
    return {
        "critic/adv_mean": mean(adv),
        "critic/returns_mean": mean(returns),
        "critic/explained_var": 1.0 - var(returns - values) / var_r if var_r > 0 else 0.0,
    }
