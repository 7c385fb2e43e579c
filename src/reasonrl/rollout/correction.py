"""Where the trainer meets an engine with its own weights (issue 43): which old policy the loss uses and how
the engine's rollouts are weighted (:func:`reasonrl.losses.mismatch.engine_correction`).

The own engine samples on the trainer's model, so its behaviour log-probs are the trainer's and nothing
changes. For ``rollout.engine=vllm`` the policy loss's old log-probs are the trainer's own at sampling
time: on a batch's first optimiser step they are the training forward's own values, detached (no extra
pass); a batch trained over more optimiser steps (``optim.mu``, ``optim.minibatches``, a Mu-GRPO stage)
has them computed once, before its first update (:meth:`EngineCorrection.prepare`), as TRL computes
``old_per_token_logps`` whenever its vLLM correction is on.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..losses.mismatch import engine_correction
from ..models.scoring import score_rows


@dataclass(frozen=True)
class EngineCorrection:
    """``mode``: ``rollout.is_correction`` (tis | none), ``cap``: ``rollout.is_cap``; ``mode=None``: the own
    engine, whose behaviour log-probs are the trainer's (the loss takes them as they are)."""

    mode: str | None = None
    cap: float = 2.0

    @staticmethod
    def of(rollout_opts) -> "EngineCorrection":
        """The correction a run's ``rollout.*`` asks for (none to make for the own engine)."""
        if rollout_opts.engine == "hf":
            return EngineCorrection()
        return EngineCorrection(rollout_opts.is_correction, rollout_opts.is_cap)

    def apply(
        self,
        b,
        rows: torch.Tensor,
        logp: torch.Tensor,
        engine_logp: torch.Tensor,
        adv: torch.Tensor,
        mask: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
        """(old log-probs, advantages, metrics) for micro-batch ``rows`` of batch ``b``: (n, T) each, as
        the trainer's ``_micro_loss`` holds them (the behaviour log-probs and advantages as they are, for the
        own engine)."""
        if self.mode is None:
            return engine_logp, adv, {}
        learner = getattr(b, "learner_logp", None)
        learner = None if learner is None else learner[rows.cpu(), : logp.shape[1]].to(logp.device)
        return engine_correction(self.mode, self.cap, logp, engine_logp, learner, adv, mask)

    def prepare(self, b, trainer, minibatches: int) -> None:
        """Before ``trainer`` updates on ``b`` (``minibatches`` optimiser steps now; a Mu-GRPO stage's buffer
        is trained at later steps too): :meth:`learner_logprobs` when more than one step will use them."""
        several = minibatches > 1 or trainer.recipe.stages is not None
        if self.mode is None or not several or getattr(b, "learner_logp", None) is not None or not len(b.ro.texts):
            return
        self.learner_logprobs(
            b,
            trainer.model,
            temperature=trainer.recipe.sampling.temperature or 1.0,
            micro=int(trainer.cfg.micro_batch_size),
        )

    @torch.no_grad()
    def learner_logprobs(self, b, model, *, temperature: float, micro: int) -> None:
        """The trainer's log-probs of every row of ``b`` at the current weights, into ``b.learner_logp``
        (after a batch's first optimiser step the training forward no longer gives them)."""
        R, T = b.ro.completion_ids.shape
        out = torch.zeros(R, T)
        was = model.training
        model.eval()
        try:
            for s in range(0, R, max(1, micro)):
                rows = torch.arange(s, min(R, s + max(1, micro)))
                logp = score_rows(model, b.ro, rows, temperature=temperature)[0]  # (n, T') padding trimmed
                out[rows, : logp.shape[1]] = logp.float().cpu()
        finally:
            model.train(was)
        b.learner_logp = out
