"""Rollouts with a plain transformers model: KV cache, left padding, n samples per prompt.

Each prompt is prefilled once and its cache repeated ``n`` times; rows that finish are dropped
from the batch (and the cache) as they go, so a batch with a few long completions does not pay
for the short ones.
"""
from __future__ import annotations

import inspect
from typing import Sequence

import torch
from transformers import DynamicCache

from .base import Rollouts, SamplingParams, concat_rollouts
from ..seeds import stable_seed
from .sampling import next_hidden_grad_norm, sample_next


def cache_kwarg(model) -> str:
    """transformers >= 5.2x names the KV-cache argument ``cache``; older releases ``past_key_values``.
    A peft model's forward takes ``**kwargs`` and passes them on: its base model's forward decides."""
    forward = model.get_base_model().forward if hasattr(model, "get_base_model") else model.forward
    return "cache" if "cache" in inspect.signature(forward).parameters else "past_key_values"


def position_ids_from_mask(mask: torch.Tensor) -> torch.Tensor:
    """(R, L) left-padded attention mask -> (R, L) positions; real tokens count from 0."""
    return (mask.long().cumsum(-1) - 1).clamp(min=0)


class _Decode:
    """Mutable state of one chunk's decoding loop (rows shrink as they finish)."""

    def __init__(self, rows: int, max_new: int, pad: int):
        self.alive = torch.arange(rows)  # current row -> original row
        self.ids = torch.full((rows, max_new), pad, dtype=torch.long)
        self.logp = torch.zeros(rows, max_new)
        self.ent = torch.zeros(rows, max_new)
        self.sum_p2 = torch.zeros(rows, max_new)
        self.hidden = torch.zeros(rows, max_new)  # CorR-PO's hidden-state gradient norm, when asked for
        self.length = torch.zeros(rows, dtype=torch.long)
        self.reason = ["length"] * rows


class HFEngine:
    """Generator over any ``AutoModelForCausalLM``; ``max_rows`` bounds the rows decoded at once."""

    def __init__(self, model, tokenizer, *, max_rows: int = 512, compact_below: float = 0.5):
        self.model, self.tok = model, tokenizer
        self.max_rows, self.compact_below = max_rows, compact_below
        self.device = next(model.parameters()).device
        self._cache_arg = cache_kwarg(model)

    def generate(self, prompts: Sequence[str], n: int, sampling: SamplingParams,
                 generator: torch.Generator | None = None, seeds: Sequence[int] | None = None) -> Rollouts:
        """``seeds`` (one per prompt) key each row's randomness by its prompt and sample index
        (:func:`row_uniforms`), so the rollouts do not depend on how prompts are split into calls,
        chunks, ranks or workers; otherwise ``generator`` (a trainer's own RNG) wins over
        ``sampling.seed``, and with neither, torch's global RNG."""
        prompts = list(prompts)
        if seeds is not None and len(seeds) != len(prompts):
            raise ValueError(f"generate: {len(seeds)} seeds for {len(prompts)} prompts (one seed per prompt)")
        gen = generator
        if gen is None and sampling.seed is not None:
            gen = torch.Generator(device=self.device).manual_seed(sampling.seed)
        per_chunk = max(1, self.max_rows // n)
        parts = [self._chunk(prompts[i:i + per_chunk], n, sampling, gen,
                             None if seeds is None else list(seeds[i:i + per_chunk]))
                 for i in range(0, len(prompts), per_chunk)]
        return concat_rollouts(parts, self.tok.pad_token_id)

    def encode_prompts(self, prompts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        enc = self.tok(list(prompts), return_tensors="pt", padding=True)
        if self.tok.padding_side != "left":
            raise ValueError("generation needs a left-padding tokenizer (tokenizer.padding_side = 'left')")
        return enc["input_ids"], enc["attention_mask"]

    @torch.inference_mode()
    def _chunk(self, prompts: list[str], n: int, sp: SamplingParams, gen, seeds: list[int] | None) -> Rollouts:
        ids, mask = self.encode_prompts(prompts)
        was_training = self.model.training
        self.model.eval()
        u = None if seeds is None else row_uniforms(seeds, n, sp.max_new_tokens).to(self.device)  # (R, T)
        try:
            st = self._decode(ids.to(self.device), mask.to(self.device), n, sp, gen, u)
        finally:
            self.model.train(was_training)
        steps = int(st.length.max()) if len(st.length) else 0
        comp_ids, comp_logp, comp_ent = st.ids[:, :steps], st.logp[:, :steps], st.ent[:, :steps]
        comp_p2, comp_hidden = st.sum_p2[:, :steps], st.hidden[:, :steps]
        comp_mask = (torch.arange(steps)[None, :] < st.length[:, None]).long()
        texts = [_strip_stop(t, sp.stop) for t in self.tok.batch_decode(comp_ids, skip_special_tokens=True)]
        return Rollouts(
            prompts=[p for p in prompts for _ in range(n)], texts=texts,
            prompt_ids=ids.repeat_interleave(n, 0), prompt_mask=mask.repeat_interleave(n, 0),
            completion_ids=comp_ids, completion_mask=comp_mask, logprobs=comp_logp * comp_mask,
            finish_reasons=st.reason, n=n, entropies=comp_ent * comp_mask, sum_p2=comp_p2 * comp_mask,
            hidden_grad_norm=comp_hidden * comp_mask if sp.hidden_grad_norm else None,
        )

    def _decode(self, ids, mask, n: int, sp: SamplingParams, gen, u: torch.Tensor | None = None) -> _Decode:
        cache = DynamicCache()
        pos = position_ids_from_mask(mask)
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, logits_to_keep=1,
                         **{self._cache_arg: cache})
        cache.batch_repeat_interleave(n)
        logits = out.logits[:, -1].repeat_interleave(n, 0)  # (R, V)
        attn, last_pos = mask.repeat_interleave(n, 0), pos[:, -1].repeat_interleave(n, 0)
        st = _Decode(len(logits), sp.max_new_tokens, self.tok.pad_token_id)
        active = torch.ones(len(logits), dtype=torch.bool)  # (rows,) current rows still generating
        # the sampler has the whole distribution at hand: the hidden-state gradient norm costs one
        # (rows, V) x (V, d) product there, instead of a second pass over the rollouts later
        unembed = self.model.get_output_embeddings().weight if sp.hidden_grad_norm else None  # (V, d)
        for t in range(sp.max_new_tokens):
            draw = None if u is None else u[st.alive.to(u.device), t]  # (rows,) each row's own uniform
            out = sample_next(logits, sp.temperature, sp.top_k, sp.top_p, gen, min_p=sp.min_p, uniform=draw)
            token = out.token.cpu().masked_fill(~active, self.tok.pad_token_id)
            rows = st.alive[active]
            st.ids[rows, t], st.logp[rows, t], st.length[rows] = token[active], out.logprob.cpu()[active], t + 1
            st.ent[rows, t], st.sum_p2[rows, t] = out.entropy.cpu()[active], out.sum_p2.cpu()[active]
            if unembed is not None:
                st.hidden[rows, t] = next_hidden_grad_norm(logits, out.token, sp.temperature, unembed).cpu()[active]
            active &= ~self._newly_done(st, token, active, t, sp.stop)
            if not active.any():
                break
            if active.sum() < self.compact_below * len(active):  # drop finished rows from the batch
                keep = active.nonzero().squeeze(-1)
                cache.batch_select_indices(keep.to(self.device))
                st.alive, token, attn, last_pos, active = st.alive[keep], token[keep], attn[keep], last_pos[keep], active[keep]
            if t == sp.max_new_tokens - 1:
                break
            attn = torch.cat([attn, torch.ones_like(attn[:, :1])], dim=1)
            last_pos = last_pos + 1
            out = self.model(input_ids=token[:, None].to(self.device), attention_mask=attn,
                             position_ids=last_pos[:, None], use_cache=True, **{self._cache_arg: cache})
            logits = out.logits[:, -1]
        return st

    def _newly_done(self, st: _Decode, token, active, t: int, stop: tuple[str, ...]) -> torch.Tensor:
        """(rows,) bool: active rows that end at step ``t`` (EOS sampled, or a stop string appeared)."""
        done = active & (token == self.tok.eos_token_id)
        for i in done.nonzero().squeeze(-1).tolist():
            st.reason[int(st.alive[i])] = "eos"
        if stop:
            window = max(len(s) for s in stop) + 4  # a stop string spans at most that many tokens
            for i in (active & ~done).nonzero().squeeze(-1).tolist():
                r = int(st.alive[i])
                tail = self.tok.decode(st.ids[r, max(0, t + 1 - window):t + 1], skip_special_tokens=True)
                if any(s in tail for s in stop):
                    st.reason[r], done[i] = "stop", True
        return done


def row_uniforms(seeds: Sequence[int], n: int, steps: int) -> torch.Tensor:  # -> (len(seeds) * n, steps)
    """One uniform per token position for sample ``j`` of each prompt, from a stream seeded by the
    prompt's seed and ``j`` alone (float64, so a draw is never rounded up to 1)."""
    rows = [torch.rand(steps, generator=torch.Generator().manual_seed(stable_seed(s, j)), dtype=torch.float64)
            for s in seeds for j in range(n)]
    return torch.stack(rows) if rows else torch.zeros(0, steps, dtype=torch.float64)


def _strip_stop(text: str, stop: tuple[str, ...]) -> str:
    cuts = [text.find(s) for s in stop if s in text]
    return text[: min(cuts)] if cuts else text
