"""Rollouts from a colocated vLLM engine behind the :class:`~reasonrl.rollout.base.Generator` protocol (issue 43).

``rollout.engine=vllm``: vLLM runs in the trainer's process (TRL's colocate mode) on its own copy of the
weights, started from the trainer's model as it is (:mod:`.vllm_setup`) and sent the new weights after
every ``rollout.sync_every`` optimiser steps (:meth:`VLLMEngine.push_weights`: ``reload_weights`` from the
tensors, then the prefix cache reset, else a cached prompt keeps the old model's keys and values).

The contract (docs/generator.md) as vLLM keeps it:

- prompts go in as token ids (``TokensPrompt``), encoded as the own engine encodes them, never
  re-tokenised; continuations (branching, STRIDE's redirects, multi-turn turns) go in as the ids they
  continue (:meth:`sample_ids`);
- one request per row with ``seed = stable_seed(seeds[i], j)``: row (i, j) depends on its prompt's seed
  and j alone (vLLM draws each seeded request from its own generator), so any split over calls or ranks
  gives the same rows. Without seeds (beam branching hands a generator) the row seeds are drawn from the
  generator, or from torch's global RNG without one;
- behaviour log-probs are vLLM's ``processed_logprobs`` (after temperature): the tempered distribution,
  and with top-k / top-p / min-p put back on the untruncated one by the trainer's kept mass
  (:func:`reasonrl.losses.mismatch.kept_log_mass`, one scoring pass of the trainer's model); greedy rows
  get the temperature-1 log-probs, as the own engine's;
- finish reasons from vLLM's: ``length``; ``stop`` with a stop string -> ``"stop"``; otherwise an end id
  (EOS or another of :func:`~reasonrl.models.chat.stop_ids`, all passed as ``stop_token_ids``) -> ``"eos"``;
  the ids keep the end token, and the texts are decoded here from the ids (specials skipped, cut at the
  stop string) so texts and ids agree;
- entropies and sum p^2 are not recorded (None): recipes that read them are refused before loading
  (:mod:`.vllm_checks`), as are activation steering, adapters switched per row and the diffusion LM.
"""

from __future__ import annotations

import contextlib
import importlib
import time
from typing import Any, Sequence

import torch

from ..errors import UserError
from ..losses.mismatch import kept_log_mass
from ..models.chat import PromptFormatter, context_length, stop_ids
from ..seeds import stable_seed
from .base import Rollouts, SamplingParams
from .decode import Decoded
from .hf import _strip_stop
from .vllm_setup import (
    export_model,
    hf_weights,
    import_vllm,
    kept_process_state,
    llm_kwargs,
    remove_export,
    torch_threads,
    vllm_dtype,
)

_MASS_ELEMENTS = 2**25  # logits per slice of the kept-mass pass: 128 MB of float32
_LEFT_TO_EXIT: list = []  # engines of data-parallel ranks, closed with their process (VLLMEngine.close)


class VLLMEngine:
    """Generator over a vLLM engine in this process; ``model`` stays the trainer's (scoring, the kept mass,
    the batch maker's ``device`` and ``tok``). ``opts``: ``rollout.vllm`` (:class:`~reasonrl.config.sections.VLLMOpts`);
    ``max_rows``: requests vLLM schedules at once; ``seed``: the engine's own (every request carries one);
    ``sync_every``: optimiser steps between weight pushes (``rollout.sync_every``)."""

    def __init__(
        self,
        model,
        tokenizer,
        opts: Any,
        *,
        max_rows: int = 512,
        formatter: PromptFormatter | None = None,
        seed: int = 0,
        sync_every: int = 1,
    ):
        self.model, self.tok, self.opts, self.sync_every = model, tokenizer, opts, sync_every
        self.max_rows = max_rows
        self.device = next(model.parameters()).device
        self.formatter = formatter or PromptFormatter.build(tokenizer, model)
        self.stop_ids = stop_ids(model, tokenizer)
        self.version = 0  # the optimiser-step count of the weights the engine holds
        self.sync_seconds: list[float] = []  # pushes since the last generation (logged with it)
        self.vllm = import_vllm()
        # a data-parallel rank's process group (torchrun) exists before the engine: vLLM's shutdown would destroy it
        self.shared_dist = torch.distributed.is_available() and torch.distributed.is_initialized()
        self.tokens_prompt = importlib.import_module("vllm.inputs").TokensPrompt
        self.dir = export_model(model, tokenizer)
        ctx = opts.max_model_len or context_length(model) or 2048
        kw = llm_kwargs(
            opts,
            self.dir,
            dtype=vllm_dtype(opts, model),
            device=self.device.type,
            max_model_len=ctx,
            max_rows=max_rows,
            seed=seed,
        )
        try:
            with kept_process_state():
                self.llm = self.vllm.LLM(**kw)
        except Exception:
            remove_export(self.dir)
            raise
        self.asleep = False
        self.pushed = False  # the first push always loads (a resumed run's weights)

    # ------------------------------------------------------------ generation
    def generate(
        self,
        prompts: Sequence[str | list[dict]],
        n: int,
        sampling: SamplingParams,
        generator: torch.Generator | None = None,
        seeds: Sequence[int] | None = None,
    ) -> Rollouts:
        """``n`` rows per prompt (rendered by the run's formatter, encoded as the own engine encodes them)."""
        prompts = self.formatter.render_all(prompts)
        if seeds is not None and len(seeds) != len(prompts):
            raise ValueError(f"generate: {len(seeds)} seeds for {len(prompts)} prompts (one seed per prompt)")
        enc = self.tok(list(prompts), return_tensors="pt", padding=True)
        if self.tok.padding_side != "left":
            raise ValueError("generation needs a left-padding tokenizer (tokenizer.padding_side = 'left')")
        ids, mask = enc["input_ids"], enc["attention_mask"]  # (B, P) left-padded
        contexts = [row[m.bool()].tolist() for row, m in zip(ids, mask)]
        row_seeds = (
            [stable_seed(s, j) for s in seeds for j in range(n)]
            if seeds is not None
            else self._drawn_seeds(len(prompts) * n, generator)
        )
        st = self.sample_ids(contexts, n, sampling, row_seeds)
        steps = st.ids.shape[1]
        comp_mask = (torch.arange(steps)[None, :] < st.length[:, None]).long()
        texts = [_strip_stop(t, sampling.stop) for t in self.tok.batch_decode(st.ids, skip_special_tokens=True)]
        return Rollouts(
            prompts=[p for p in prompts for _ in range(n)],
            texts=texts,
            prompt_ids=ids.repeat_interleave(n, 0),
            prompt_mask=mask.repeat_interleave(n, 0),
            completion_ids=st.ids,
            completion_mask=comp_mask,
            logprobs=st.logp * comp_mask,
            finish_reasons=st.reason,
            n=n,
            extras={"weight_version": self.version, "metrics": self._metrics()},
        )

    def _metrics(self) -> dict[str, float]:
        """The weight version sampled with (the trainer logs the staleness) and the pushes since the last call."""
        pushes, self.sync_seconds = self.sync_seconds, []
        out = {"rollout/weight_version": float(self.version)}
        if pushes:
            out.update({"time/vllm_sync": sum(pushes) / len(pushes), "time/vllm_sync_max": max(pushes)})
        return out

    def _drawn_seeds(self, rows: int, generator: torch.Generator | None) -> list[int]:
        """Row seeds drawn from ``generator`` (beam branching's shared stream), else torch's global RNG."""
        return torch.randint(
            0, 2**31 - 1, (rows,), generator=generator, device="cpu" if generator is None else generator.device
        ).tolist()

    def _decode(
        self,
        ids: torch.Tensor,
        mask: torch.Tensor,
        n: int,
        sp: SamplingParams,
        gen: torch.Generator | None,
        u: torch.Tensor | None = None,
    ) -> Decoded:
        """Continue left-padded (B, L) ``ids`` (prompt + a kept prefix: :func:`~reasonrl.rollout.branch.branch`),
        ``n`` rows each, seeded from ``gen``. ``u`` (the own engine's per-row uniforms) has no meaning here."""
        if u is not None:
            raise ValueError("VLLMEngine draws each row from a seeded request: pass seeds (sample_ids), not uniforms")
        contexts = [row[m.bool()].tolist() for row, m in zip(ids.cpu(), mask.cpu())]
        return self.sample_ids(contexts, n, sp, self._drawn_seeds(len(contexts) * n, gen))

    @torch.inference_mode()
    def sample_ids(
        self, contexts: Sequence[list[int]], n: int, sp: SamplingParams, row_seeds: Sequence[int]
    ) -> Decoded:
        """``n`` completions of each context (token ids), row ``r`` seeded by ``row_seeds[r]``: host
        (R, T') ids (pad after each row's end), behaviour log-probs, lengths and finish reasons."""
        if sp.hidden_grad_norm:
            raise UserError(
                "rollout.engine=vllm records no hidden gradient norms (CorR-PO's 'hidden' norm): use rollout.engine=hf"
            )
        if len(row_seeds) != len(contexts) * n:
            raise ValueError(f"sample_ids: {len(row_seeds)} row seeds for {len(contexts)} contexts x n={n}")
        prompts = [self.tokens_prompt(prompt_token_ids=list(c)) for c in contexts for _ in range(n)]
        params = [self._params(sp, s) for s in row_seeds]
        self._wake()
        with torch_threads(self.opts.threads) if self.device.type == "cpu" else contextlib.nullcontext():
            outs = self.llm.generate(prompts, params, use_tqdm=False)
        self._sleep()
        st = self._collect(outs, len(prompts))
        if sp.temperature > 0 and (sp.top_k > 0 or sp.top_p < 1 or sp.min_p > 0):
            rows = [list(c) for c in contexts for _ in range(n)]
            st.logp = st.logp + self._kept_mass(rows, st, sp)
        return st

    def _params(self, sp: SamplingParams, seed: int):
        return self.vllm.SamplingParams(
            n=1,
            temperature=sp.temperature,
            top_p=sp.top_p,
            top_k=sp.top_k,
            min_p=sp.min_p,
            max_tokens=sp.max_new_tokens,
            stop=list(sp.stop) or None,
            stop_token_ids=list(self.stop_ids),
            logprobs=0,
            seed=seed,
            skip_special_tokens=True,
        )

    def _collect(self, outs, rows: int) -> Decoded:
        """vLLM's request outputs (in request order) as right-padded host tensors."""
        if len(outs) != rows:
            raise RuntimeError(f"vLLM returned {len(outs)} outputs for {rows} requests")
        ids, logps, reasons = [], [], []
        for out in outs:
            c = out.outputs[0]
            toks = list(c.token_ids)
            if c.logprobs is None or len(c.logprobs) != len(toks):
                raise RuntimeError("vLLM returned no log-prob for some sampled token (logprobs=0 was asked)")
            ids.append(toks)
            logps.append([step[t].logprob for t, step in zip(toks, c.logprobs)])
            reasons.append(_reason(c.finish_reason, c.stop_reason))
        T = max((len(t) for t in ids), default=0)
        out_ids = torch.full((rows, T), self.tok.pad_token_id, dtype=torch.long)
        out_logp = torch.zeros(rows, T)
        for r, (t, lp) in enumerate(zip(ids, logps)):
            out_ids[r, : len(t)], out_logp[r, : len(t)] = torch.tensor(t, dtype=torch.long), torch.tensor(lp)
        zeros = torch.zeros(rows, T)
        return Decoded(
            out_ids,
            out_logp,
            zeros,
            zeros.clone(),
            zeros.clone(),
            torch.tensor([len(t) for t in ids], dtype=torch.long),
            reasons,
        )

    def _kept_mass(self, contexts: list[list[int]], st: Decoded, sp: SamplingParams) -> torch.Tensor:  # -> (R, T)
        """``log S`` of every sampled token under the trainer's model: the tempered mass vLLM's truncation
        keeps, replayed on the trainer's logits (context + completion, one forward per slice of rows)."""
        R, T = st.ids.shape
        out = torch.zeros(R, T)
        vocab = self.model.get_output_embeddings().weight.shape[0]
        per = max(1, _MASS_ELEMENTS // max(1, T * vocab))
        was = self.model.training
        self.model.eval()
        try:
            for s in range(0, R, per):
                rows = range(s, min(R, s + per))
                seqs = [contexts[r] + st.ids[r, : int(st.length[r])].tolist() for r in rows]
                width = max(len(q) for q in seqs)
                ids = torch.full((len(seqs), width), self.tok.pad_token_id, dtype=torch.long)
                att = torch.zeros_like(ids)
                for i, q in enumerate(seqs):  # left-padded, so every row's completion ends at the right edge
                    ids[i, width - len(q) :], att[i, width - len(q) :] = torch.tensor(q), 1
                pos = (att.cumsum(-1) - 1).clamp(min=0)
                logits = self.model(
                    input_ids=ids.to(self.device),
                    attention_mask=att.to(self.device),
                    position_ids=pos.to(self.device),
                    use_cache=False,
                ).logits  # (r, L, V)
                for i, r in enumerate(rows):
                    k = int(st.length[r])
                    if k:  # position p's logits predict token p + 1
                        out[r, :k] = kept_log_mass(
                            logits[i, width - k - 1 : width - 1], sp.temperature, sp.top_k, sp.top_p, sp.min_p
                        ).cpu()
        finally:
            self.model.train(was)
        return out

    # ------------------------------------------------------------ weights
    def push_weights(self, model, version: int) -> None:
        """Load the trainer's weights (LoRA merged, a tied head under its own name) into the engine in place,
        then reset its prefix cache; the time is logged with the next generation (``time/vllm_sync``).
        ``version``: the trainer's optimiser steps; pushed once ``sync_every`` of them passed since the
        engine's weights, and always on the first call (a resumed run's checkpoint weights)."""
        if self.pushed and 0 <= version - self.version < self.sync_every:
            return
        self.pushed = True
        t0 = time.perf_counter()
        self._wake()
        self.llm.collective_rpc(
            "reload_weights", kwargs={"weights_iterator": hf_weights(model), "is_checkpoint_format": True}
        )
        if not self.llm.reset_prefix_cache():
            raise RuntimeError("vLLM refused to reset its prefix cache after a weight push (requests still running)")
        self.version = version
        self.sync_seconds.append(time.perf_counter() - t0)

    def _wake(self) -> None:
        if self.asleep:
            self.llm.wake_up()
            self.asleep = False

    def _sleep(self) -> None:
        """GPU with ``rollout.vllm.sleep``: release the KV cache (and offload the weights) while the trainer
        updates, as TRL's ``vllm_enable_sleep_mode``; on a CPU vLLM has no sleep mode."""
        if self.opts.sleep and self.device.type == "cuda":
            self.llm.sleep(level=1)
            self.asleep = True

    def close(self) -> None:
        """Stop the engine and remove its model folder (idempotent). On a data-parallel rank the engine is left
        to the process's exit: vLLM's shutdown destroys the default process group, which is the trainer's."""
        llm, self.llm = getattr(self, "llm", None), None
        if llm is not None and getattr(self, "shared_dist", False):
            engine = getattr(llm, "llm_engine", None)
            for owner in (engine, getattr(engine, "engine_core", None)):  # vLLM's exit-time shutdown, detached
                finalizer = getattr(owner, "_finalizer", None)
                if finalizer is not None:
                    finalizer.detach()
            _LEFT_TO_EXIT.append(llm)  # and never garbage-collected: the process's exit frees it
        elif llm is not None:
            engine = getattr(llm, "llm_engine", None)
            shutdown = getattr(getattr(engine, "engine_core", None), "shutdown", None)
            if shutdown is not None:
                shutdown()
            del llm
        remove_export(getattr(self, "dir", None))
        self.dir = None


def _reason(finish: str | None, stop_reason: Any) -> str:
    """vLLM's finish reason -> the contract's: a stop string is "stop", an end id (EOS, a stop token) "eos"."""
    if finish == "length":
        return "length"
    if finish == "stop":
        return "stop" if isinstance(stop_reason, str) else "eos"
    raise RuntimeError(f"vLLM finished a request with reason {finish!r} (aborted?)")
