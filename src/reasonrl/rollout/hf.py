"""Rollouts with a plain transformers model: KV cache, left padding, n samples per prompt.

Each prompt is prefilled once and its cache repeated ``n`` times; rows that finish are dropped
from the batch (and the cache) at the host's looks every ``check_every`` steps, so a batch with a
few long completions does not pay for the short ones. The loop itself lives on the model's device
(:mod:`.decode`); ``static_cache`` / ``compile`` give it fixed shapes and CUDA graphs.
"""

from __future__ import annotations

from typing import Sequence

import torch

from .base import Rollouts, SamplingParams, concat_rollouts
from .decode import DecodeOpts, Decoded, decode
from .kvcache import StaticCaches
from ..models.chat import PromptFormatter, cache_kwarg, stop_ids
from ..seeds import stable_seed


def position_ids_from_mask(mask: torch.Tensor) -> torch.Tensor:
    """(R, L) left-padded attention mask -> (R, L) positions; real tokens count from 0."""
    return (mask.long().cumsum(-1) - 1).clamp(min=0)


class HFEngine:
    """Generator over any ``AutoModelForCausalLM``; ``max_rows`` bounds the rows decoded at once.
    Prompts are rendered by ``formatter`` (default: ``prompt.format=auto`` for this model and
    tokenizer; text it already rendered passes as it is), and a row ends at any of the model's end
    ids (:func:`reasonrl.models.chat.stop_ids`: ``generation_config.eos_token_id`` and the EOS)."""

    def __init__(
        self,
        model,
        tokenizer,
        *,
        max_rows: int = 512,
        compact_below: float | None = None,
        check_every: int | None = None,
        static_cache: bool = False,
        compile: bool = False,
        compile_backend: str = "inductor",
        formatter: PromptFormatter | None = None,
    ):
        if compile and not static_cache:
            raise ValueError(
                "HFEngine(compile=True) needs static_cache=True (rollout.static_cache=true): "
                "CUDA graphs need the fixed shapes of a static KV cache"
            )
        if check_every is not None and check_every < 1:
            raise ValueError(
                f"HFEngine(check_every={check_every}): must be >= 1 (steps between host looks), "
                "or None (1 on a CPU, 8 on a GPU)"
            )
        self.model, self.tok = model, tokenizer
        self.max_rows = max_rows
        self.device = next(model.parameters()).device
        if check_every is None:  # on a CPU a host look costs no copy, and dropping rows at once is faster
            check_every = 1 if self.device.type == "cpu" else 8
        if compact_below is None:  # a CPU's step time is linear in the rows: drop a finished row at the next look
            compact_below = 1.0 if self.device.type == "cpu" else 0.5
        self.opts = DecodeOpts(check_every, compact_below, static_cache, compile, compile_backend)
        self._cache_arg = cache_kwarg(model)
        self._compiled = None
        self.formatter = formatter or PromptFormatter.build(tokenizer, model)
        self.stop_ids = torch.tensor(stop_ids(model, tokenizer), device=self.device)  # (k,) ids that end a row
        # static KV caches kept between calls (reset in place): their memory stays held until free_caches()
        self.caches = StaticCaches()

    def free_caches(self) -> None:
        """Drop the kept static caches (the next call allocates, and a compiled step records, anew)."""
        self.caches.clear()

    @property
    def compact_below(self) -> float:
        return self.opts.compact_below

    @compact_below.setter
    def compact_below(self, value: float) -> None:  # steering keeps finished rows for a call (0)
        self.opts.compact_below = value

    def generate(
        self,
        prompts: Sequence[str | list[dict]],
        n: int,
        sampling: SamplingParams,
        generator: torch.Generator | None = None,
        seeds: Sequence[int] | None = None,
    ) -> Rollouts:
        """``prompts``: what task items carry (strings or chat messages) or text the run's formatter
        rendered; the rollouts keep the rendered text. ``seeds`` (one per prompt) key each row's
        randomness by its prompt and sample index (:func:`row_uniforms`), so the rollouts do not depend on
        how prompts are split into calls, chunks, ranks or workers; otherwise ``generator`` (a trainer's own
        RNG) wins over ``sampling.seed``, and with neither, torch's global RNG."""
        prompts = self.formatter.render_all(prompts)
        if seeds is not None and len(seeds) != len(prompts):
            raise ValueError(f"generate: {len(seeds)} seeds for {len(prompts)} prompts (one seed per prompt)")
        gen = generator
        if gen is None and sampling.seed is not None:
            gen = torch.Generator(device=self.device).manual_seed(sampling.seed)
        per_chunk = max(1, self.max_rows // n)
        parts = [
            self._chunk(
                prompts[i : i + per_chunk], n, sampling, gen, None if seeds is None else list(seeds[i : i + per_chunk])
            )
            for i in range(0, len(prompts), per_chunk)
        ]
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
        steps = st.ids.shape[1]
        comp_ids, comp_logp, comp_ent, comp_p2, comp_hidden = st.ids, st.logp, st.ent, st.sum_p2, st.hidden
        comp_mask = (torch.arange(steps)[None, :] < st.length[:, None]).long()
        texts = [_strip_stop(t, sp.stop) for t in self.tok.batch_decode(comp_ids, skip_special_tokens=True)]
        return Rollouts(
            prompts=[p for p in prompts for _ in range(n)],
            texts=texts,
            prompt_ids=ids.repeat_interleave(n, 0),
            prompt_mask=mask.repeat_interleave(n, 0),
            completion_ids=comp_ids,
            completion_mask=comp_mask,
            logprobs=comp_logp * comp_mask,
            finish_reasons=st.reason,
            n=n,
            entropies=comp_ent * comp_mask,
            sum_p2=comp_p2 * comp_mask,
            hidden_grad_norm=comp_hidden * comp_mask if sp.hidden_grad_norm else None,
        )

    def _decode(self, ids, mask, n: int, sp: SamplingParams, gen, u: torch.Tensor | None = None) -> Decoded:
        """Decode a left-padded (B, P) batch on the device, ``n`` rows per prompt (branching
        continues prefixes through it); host results."""
        return decode(self, ids, mask, position_ids_from_mask(mask), n, sp, gen, u, self.opts)

    def _step_fn(self, opts: DecodeOpts):
        """One decode forward: (rows, 1) tokens, mask, positions, cache -> (rows, V) logits. With
        ``compile``, torch.compile(mode="reduce-overhead") of it, built once per engine (CUDA graphs
        replay it; the logits are cloned because a replay overwrites its outputs). Under mixed
        precision the decoder's own forward enters autocast (models.memory.install_autocast), inside
        the traced region; on CUDA a TF32 output head (rollout.tf32_head) runs outside the graph,
        one graph break. The graph is traced once per (row bucket, width): the static caches are
        reused (rollout.kvcache), and dynamo's recompile limit (8 shapes by default) bounds how
        many buckets one engine compiles."""

        def step(token, attn, pos, cache):
            out = self.model(
                input_ids=token, attention_mask=attn, position_ids=pos, use_cache=True, **{self._cache_arg: cache}
            )
            return out.logits[:, -1].clone() if opts.compile else out.logits[:, -1]

        if not opts.compile:
            return step
        if self._compiled is None:
            inductor = opts.compile_backend == "inductor"  # a mode is inductor's option alone
            self._compiled = torch.compile(
                step, backend=opts.compile_backend, mode="reduce-overhead" if inductor else None
            )
        return self._compiled


def row_uniforms(seeds: Sequence[int], n: int, steps: int) -> torch.Tensor:  # -> (len(seeds) * n, steps)
    """One uniform per token position for sample ``j`` of each prompt, from a stream seeded by the
    prompt's seed and ``j`` alone (float64, so a draw is never rounded up to 1)."""
    rows = [
        torch.rand(steps, generator=torch.Generator().manual_seed(stable_seed(s, j)), dtype=torch.float64)
        for s in seeds
        for j in range(n)
    ]
    return torch.stack(rows) if rows else torch.zeros(0, steps, dtype=torch.float64)


def _strip_stop(text: str, stop: tuple[str, ...]) -> str:
    cuts = [text.find(s) for s in stop if s in text]
    return text[: min(cuts)] if cuts else text
