"""Rollouts of a masked-diffusion LM behind the same :class:`~reasonrl.rollout.base.Generator` protocol.

LLaDA's sampler (Nie et al. 2025, arXiv 2502.09992, section 2.4 and its ``generate.py``): the
completion is a canvas of ``L`` masked positions after the prompt, cut into blocks decoded left to
right (semi-autoregressive); within a block, each of a fixed number of steps predicts every masked
position at once and commits the ``k`` most confident predictions (``low_confidence`` remasking:
confidence = the token's probability under the untempered prediction; ``random``: a uniform draw),
``k`` from LLaDA's schedule (the block's size split evenly over its steps, the remainder first). A
finished canvas holds no mask (every position is committed once, and the model never predicts the
mask token). The text is the canvas up to its first EOS.

Randomness is keyed as :class:`~reasonrl.rollout.hf.HFEngine`'s: row ``j`` of prompt ``i`` draws its
uniforms (one per step and position for the token, one for random remasking) from a stream seeded by
``(seeds[i], j)`` alone, so a call reproduces itself and does not depend on how prompts are split.

Behaviour log-probs are d1's one-step estimate (arXiv 2504.12216): log p(y_j | x, canvas fully
masked) under the tempered, untruncated distribution -- the first step's forward, and what
:func:`reasonrl.models.scoring.score_completions` returns for the model, so the ratio is 1 on-policy.
The model object supplies ``canvas_logits`` and its config the canvas and sampler settings
(:mod:`reasonrl.models.diffusion`); this module only schedules.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from ..errors import UserError
from ..models.chat import PromptFormatter
from .base import Rollouts, SamplingParams, concat_rollouts
from .hf import HFEngine, _strip_stop, row_uniforms
from .sampling import filter_top_k_top_p, inverse_cdf

REMASKING = ("low_confidence", "random")


@dataclass(frozen=True)
class SamplerOpts:
    canvas: int  # L positions
    block: int  # positions per block (L % block == 0)
    per_block: int  # steps per block

    @property
    def steps(self) -> int:
        return self.per_block * (self.canvas // self.block)


def sampler_opts(config) -> SamplerOpts:
    """The sampler's schedule from a diffusion model's config (``canvas``, ``block_length``, ``steps``)."""
    L, block, steps = int(config.canvas), int(config.block_length), int(config.steps)
    if block < 1 or L % block or steps < 1 or getattr(config, "remasking", "low_confidence") not in REMASKING:
        raise UserError(
            f"diffusion sampler: canvas {L} must be a multiple of block_length {block}, steps {steps} "
            f">= 1 and remasking one of {', '.join(REMASKING)} (got {config.remasking!r})"
        )
    return SamplerOpts(L, block, max(1, steps // (L // block)))


def transfer_counts(block: int, steps: int) -> list[int]:
    """LLaDA's ``get_num_transfer_tokens``: positions committed at each of a block's ``steps`` steps."""
    base, extra = divmod(block, steps)
    return [base + (1 if s < extra else 0) for s in range(steps)]


def commit(
    logits: torch.Tensor,
    canvas: torch.Tensor,
    open_: torch.Tensor,
    k: int,
    u_tok: torch.Tensor | None,
    u_conf: torch.Tensor | None,
    sp: SamplingParams,
) -> torch.Tensor:
    """One step: (R, L, V) logits, (R, L) canvas, (R, L) bool positions still masked in the current
    block, k positions to commit per row, (R, L) uniforms -> the new (R, L) canvas."""
    R, L, V = logits.shape
    if sp.temperature == 0 or u_tok is None:
        x0 = logits.argmax(-1)  # (R, L)
    else:
        flat = filter_top_k_top_p(logits.reshape(R * L, V) / sp.temperature, sp.top_k, sp.top_p, sp.min_p)
        x0 = inverse_cdf(flat.softmax(-1), u_tok.reshape(-1)).view(R, L)
    if u_conf is None:  # low_confidence: the untempered probability of the prediction (LLaDA)
        conf = logits.softmax(-1).gather(-1, x0[..., None]).squeeze(-1)  # (R, L)
    else:
        conf = u_conf.to(logits)
    conf = conf.masked_fill(~open_, float("-inf"))
    picked = torch.zeros_like(open_)
    picked.scatter_(1, conf.topk(min(k, L), dim=-1).indices, True)
    picked &= open_  # a row with fewer open positions than k commits them all
    return torch.where(picked, x0, canvas)


class DiffusionEngine:
    """Generator over a masked-diffusion LM; ``max_rows`` bounds the rows denoised at once. Prompts are
    rendered by ``formatter`` as the HF engine's are (default: ``prompt.format=auto`` for this model)."""

    def __init__(self, model, tokenizer, *, max_rows: int = 512, formatter: PromptFormatter | None = None):
        self.model, self.tok, self.max_rows = model, tokenizer, max_rows
        self.device = next(model.parameters()).device
        self.formatter = formatter or PromptFormatter.build(tokenizer, model)

    def generate(
        self,
        prompts: Sequence[str],
        n: int,
        sampling: SamplingParams,
        generator: torch.Generator | None = None,
        seeds: Sequence[int] | None = None,
    ) -> Rollouts:
        prompts = self.formatter.render_all(list(prompts))
        if seeds is not None and len(seeds) != len(prompts):
            raise ValueError(f"generate: {len(seeds)} seeds for {len(prompts)} prompts (one seed per prompt)")
        opts = sampler_opts(self.model.config)
        if sampling.max_new_tokens > opts.canvas:
            raise UserError(
                f"max_new_tokens {sampling.max_new_tokens} exceeds the diffusion model's canvas of "
                f"{opts.canvas} positions: lower it, or pretrain with a longer canvas"
            )
        if sampling.hidden_grad_norm:
            raise UserError("a masked-diffusion model records no hidden gradient norms (CorR-PO's 'hidden' norm)")
        gen = generator
        if gen is None and sampling.seed is not None:
            gen = torch.Generator().manual_seed(sampling.seed)
        per_chunk = max(1, self.max_rows // n)
        parts = [
            self._chunk(
                prompts[i : i + per_chunk],
                n,
                sampling,
                opts,
                gen,
                None if seeds is None else list(seeds[i : i + per_chunk]),
            )
            for i in range(0, len(prompts), per_chunk)
        ]
        return concat_rollouts(parts, self.tok.pad_token_id)

    def _uniforms(self, rows: int, n: int, opts: SamplerOpts, gen, seeds) -> torch.Tensor:  # (R, 2, steps, L)
        width = 2 * opts.steps * opts.canvas
        u = (
            row_uniforms(seeds, n, width)
            if seeds is not None
            else torch.rand(rows, width, generator=gen, dtype=torch.float64)
        )
        return u.view(rows, 2, opts.steps, opts.canvas)

    def _chunk(self, prompts: list[str], n: int, sp: SamplingParams, opts: SamplerOpts, gen, seeds) -> Rollouts:
        enc = self.tok(prompts, return_tensors="pt", padding=True)
        ids, mask = enc["input_ids"].repeat_interleave(n, 0), enc["attention_mask"].repeat_interleave(n, 0)
        u = self._uniforms(len(ids), n, opts, gen, seeds).to(self.device)
        canvas, first = self._denoise(ids, mask, u, sp, opts)
        # clones made outside inference mode: the trainer's scoring may gather at these ids with grad
        return self._rollouts(prompts, n, ids, mask, canvas.cpu().clone(), first.cpu().clone(), sp)

    @torch.inference_mode()
    def _denoise(self, ids, mask, u, sp: SamplingParams, opts: SamplerOpts) -> tuple[torch.Tensor, torch.Tensor]:
        """(R, P) prompts, (R, 2, steps, L) uniforms -> the (R, L) final canvas and the first step's
        (R, L, V) logits (the fully masked canvas)."""
        R, model, was = len(ids), self.model, self.model.training
        random_remask = getattr(model.config, "remasking", "low_confidence") == "random"
        canvas = torch.full((R, opts.canvas), model.config.mask_token_id, dtype=torch.long, device=self.device)
        model.eval()
        try:
            first, step = None, 0
            for b in range(opts.canvas // opts.block):
                window = torch.zeros(opts.canvas, dtype=torch.bool, device=self.device)
                window[b * opts.block : (b + 1) * opts.block] = True
                for k in transfer_counts(opts.block, opts.per_block):
                    logits = model.canvas_logits(ids, mask, canvas)  # (R, L, V)
                    first = logits if first is None else first  # the fully masked canvas: the one-step estimate
                    open_ = (canvas == model.config.mask_token_id) & window
                    canvas = commit(
                        logits, canvas, open_, k, u[:, 0, step], u[:, 1, step] if random_remask else None, sp
                    )
                    step += 1
        finally:
            model.train(was)
        return canvas, first

    def _rollouts(self, prompts, n, ids, mask, canvas, first, sp: SamplingParams) -> Rollouts:
        """The canvases as Rollouts: each cut after its first EOS (or a stop string, or the budget)."""
        eos, R = self.tok.eos_token_id, len(canvas)
        lengths, reasons = [], []
        for r in range(R):
            hits = (canvas[r, : sp.max_new_tokens] == eos).nonzero()
            length, reason = (int(hits[0]) + 1, "eos") if len(hits) else (sp.max_new_tokens, "length")
            length, reason = _stop_cut(self.tok, canvas[r, :length], sp.stop, length, reason)
            lengths.append(length)
            reasons.append(reason)
        T = max(lengths)
        cmask = (torch.arange(T)[None] < torch.tensor(lengths)[:, None]).long()  # (R, T)
        comp = torch.where(cmask.bool(), canvas[:, :T], self.tok.pad_token_id)
        logp_all = (first[:, :T] / (sp.temperature or 1.0)).log_softmax(-1)  # (R, T, V) tempered, untruncated
        logp = logp_all.gather(-1, comp.clamp(max=logp_all.shape[-1] - 1)[..., None]).squeeze(-1)
        p = logp_all.exp()
        texts = [_strip_stop(t, sp.stop) for t in self.tok.batch_decode(comp, skip_special_tokens=True)]
        return Rollouts(
            prompts=[p_ for p_ in prompts for _ in range(n)],
            texts=texts,
            prompt_ids=ids,
            prompt_mask=mask,
            completion_ids=comp,
            completion_mask=cmask,
            logprobs=logp * cmask,
            finish_reasons=reasons,
            n=n,
            entropies=-(p * logp_all).sum(-1) * cmask,
            sum_p2=(p * p).sum(-1) * cmask,
        )


def _stop_cut(tok, row: torch.Tensor, stop: tuple[str, ...], length: int, reason: str) -> tuple[int, str]:
    """The row's length cut after the first token at which its text holds a stop string."""
    if not stop or not any(s in tok.decode(row[:length], skip_special_tokens=True) for s in stop):
        return length, reason
    for t in range(1, length + 1):
        if any(s in tok.decode(row[:t], skip_special_tokens=True) for s in stop):
            return t, "stop"
    return length, reason


def is_diffusion(model) -> bool:
    """A masked-diffusion LM (its config says so: :mod:`reasonrl.models.diffusion`)."""
    return bool(getattr(getattr(model, "config", None), "is_masked_diffusion", False))


def engine_for(model, tokenizer, *, max_rows: int = 512, formatter: PromptFormatter | None = None, **hf_options):
    """The in-process Generator for ``model``: the diffusion sampler for a masked-diffusion LM, else
    :class:`~reasonrl.rollout.hf.HFEngine` with ``hf_options`` (its KV-cache and compile settings);
    both render prompts with ``formatter``."""
    if is_diffusion(model):
        return DiffusionEngine(model, tokenizer, max_rows=max_rows, formatter=formatter)
    return HFEngine(model, tokenizer, max_rows=max_rows, formatter=formatter, **hf_options)
