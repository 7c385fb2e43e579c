"""The decoding loop of :class:`~reasonrl.rollout.hf.HFEngine`, resident on the model's device.

Every per-token output (token, log-prob, entropy, sum p^2, hidden gradient norm) is written into
preallocated (R, T) device tensors, the attention mask is preallocated at full width (R, P+T) and
sliced, EOS is detected on the device, and stop strings whose tokens are fixed are matched as
token-id suffixes on the device. The host looks at the batch only every ``check_every`` steps: it
decodes the tails of the steps since its last look to find stop strings the device cannot see
(any other tokenisation of them), cuts each such row at the first step whose decoded tail holds
one (exactly where a per-token text check ends it), and drops finished rows (``compact_below``).
One copy to the host at the end. The measured cost of the per-token host loop on a GPU is in
``../shared/gpu/README.md`` (372 ms of CPU time against 55 ms of GPU time per 16 tokens).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
from transformers import DynamicCache, StaticCache

from .sampling import next_hidden_grad_norm, sample_next

REASONS = ("length", "eos", "stop")  # device codes of finish reasons
LENGTH, EOS, STOP = range(3)


@dataclass
class DecodeOpts:
    check_every: int = 8  # steps between host looks (stop-string text check, dropping finished rows)
    compact_below: float = 0.5  # drop finished rows when fewer than this fraction are still going
    static_cache: bool = False  # transformers' StaticCache: fixed shapes, no row dropping
    compile: bool = False  # torch.compile(mode="reduce-overhead") of the decode step (needs static_cache)


@dataclass
class Decoded:
    """Host results of one chunk: (R, T') tensors, zero (pad for ids) past each row's length."""
    ids: torch.Tensor
    logp: torch.Tensor
    ent: torch.Tensor
    sum_p2: torch.Tensor
    hidden: torch.Tensor
    length: torch.Tensor  # (R,)
    reason: list[str]  # (R,)


def window_tokens(stop: Sequence[str]) -> int:
    """Tokens of the decoded tail searched for a stop string (a stop string spans at most that many)."""
    return max(len(s) for s in stop) + 4


def device_stop_seqs(tok, stop: Sequence[str], device) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Stop strings whose token encoding decodes back to themselves, right-aligned: (S, L) ids and
    (S, L) validity; None when there are none. Others are left to the host text check."""
    seqs = []
    for s in stop:
        enc = tok.encode(s, add_special_tokens=False)
        if enc and len(enc) <= window_tokens(stop) and tok.decode(enc, skip_special_tokens=True) == s:
            seqs.append(enc)
    if not seqs:
        return None
    width = max(len(e) for e in seqs)
    ids = torch.zeros(len(seqs), width, dtype=torch.long)
    valid = torch.zeros(len(seqs), width, dtype=torch.bool)
    for j, e in enumerate(seqs):
        ids[j, width - len(e):], valid[j, width - len(e):] = torch.tensor(e), True
    return ids.to(device), valid.to(device)


def suffix_hits(hist: torch.Tensor, t: int, seqs: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """(rows, T) token history, step ``t``, (S, L) right-aligned sequences and validity -> (rows,)
    bool: the tokens at steps ``.. t`` end with one of the sequences (one no longer than t + 1)."""
    w = min(seqs.shape[1], t + 1)
    tail = hist[:, t + 1 - w:t + 1]  # (rows, w)
    s, v = seqs[:, -w:], valid[:, -w:]  # (S, w)
    fits = ~valid[:, :seqs.shape[1] - w].any(-1)  # (S,) the sequence is no longer than the history
    match = ((tail[:, None, :] == s[None]) | ~v[None]).all(-1) & fits[None]  # (rows, S)
    return match.any(-1)


def first_text_stop(tok, ids: list[list[int]], starts: list[int], ends: list[int], offset: int,
                    stop: Sequence[str]) -> list[int | None]:
    """For each row, the first step ``s`` in ``[start, end]`` whose decoded tail (the last
    :func:`window_tokens` tokens up to ``s``) holds a stop string, or None. ``ids[i][j]`` is row i's
    token at step ``offset + j`` (``offset <= start + 1 - window`` or 0, so every tail is there);
    all tails are decoded in one batched call."""
    w = window_tokens(stop)
    spans = [(i, s) for i in range(len(ids)) for s in range(starts[i], ends[i] + 1)]
    tails = [ids[i][max(0, s + 1 - w) - offset:s + 1 - offset] for i, s in spans]
    texts = tok.batch_decode(tails, skip_special_tokens=True) if tails else []
    found: list[int | None] = [None] * len(ids)
    for (i, s), text in zip(spans, texts):
        if found[i] is None and any(x in text for x in stop):
            found[i] = s
    return found


class Loop:
    """One chunk's decoding state: device buffers indexed by original row, ``alive`` maps the
    current batch rows (which shrink when finished rows are dropped) to original rows."""

    def __init__(self, R: int, T: int, pad: int, device, stop: tuple[str, ...]):
        self.ids = torch.full((R, T), pad, dtype=torch.long, device=device)
        self.logp, self.ent, self.p2, self.hidden = (torch.zeros(R, T, device=device) for _ in range(4))
        self.length = torch.zeros(R, dtype=torch.long, device=device)
        self.reason = torch.zeros(R, dtype=torch.long, device=device)  # REASONS codes
        self.alive = torch.arange(R, device=device)
        self.active = torch.ones(R, dtype=torch.bool, device=device)  # current rows still going
        self.live = torch.ones(R, dtype=torch.bool)  # host: original rows going at the last look
        self.pad, self.stop, self.checked = pad, stop, 0  # checked: steps before it are settled

    def record(self, t: int, out, hidden: torch.Tensor | None, eos: torch.Tensor | int) -> torch.Tensor:
        """Write step ``t`` of the current rows; returns the (rows,) tokens to feed next."""
        a, act = self.alive, self.active
        token = out.token.masked_fill(~act, self.pad)
        self.ids[a, t], self.logp[a, t], self.ent[a, t], self.p2[a, t] = token, out.logprob, out.entropy, out.sum_p2
        if hidden is not None:
            self.hidden[a, t] = hidden
        self.length[a] = torch.where(act, t + 1, self.length[a])
        ended = act & torch.isin(token, eos)  # eos: every end id of the model (<|im_end|> and <|endoftext|>)
        self.reason[a] = torch.where(ended, EOS, self.reason[a])
        self.active = act & ~ended
        return token

    def device_stops(self, t: int, seqs) -> None:
        hit = self.active & suffix_hits(self.ids[self.alive], t, *seqs)
        self.reason[self.alive] = torch.where(hit, STOP, self.reason[self.alive])
        self.active &= ~hit

    def look(self, tok, t: int) -> None:
        """The host look after step ``t``: settle steps ``checked .. t`` (text stops) and sync."""
        if self.stop:
            self._text_stops(tok, t)
        self.checked = t + 1
        alive, active = self.alive.cpu(), self.active.cpu()
        self.live = torch.zeros_like(self.live)
        self.live[alive[active]] = True

    def _text_stops(self, tok, t: int) -> None:
        rows = self.live.nonzero().squeeze(-1)  # original rows going when steps checked.. began
        lo = max(0, self.checked + 1 - window_tokens(self.stop))
        ids = self.ids[:, lo:t + 1].cpu()[rows].tolist()
        length, reason = self.length.cpu()[rows], self.reason.cpu()[rows]
        ends = [int(n) - 1 if int(c) != LENGTH else t for n, c in zip(length, reason)]
        # an EOS step is not text-checked (EOS wins at its own step, as a per-token check has it)
        last = [e - 1 if int(c) == EOS else e for e, c in zip(ends, reason)]
        found = first_text_stop(tok, ids, [self.checked] * len(rows), last, lo, self.stop)
        cut_rows, cut_at = [], []
        for i, s in enumerate(found):
            if int(reason[i]) == STOP and s is None:
                raise RuntimeError(f"stop strings {self.stop!r}: a row's tokens matched one on the device but its "
                                   "decoded text does not hold it (the tokenizer decodes it differently in context); "
                                   "write the stop string without leading/trailing spaces")
            if s is not None and not (int(reason[i]) == STOP and s == ends[i]):
                cut_rows.append(int(rows[i])), cut_at.append(s)
        if cut_rows:
            self._cut(torch.tensor(cut_rows, device=self.ids.device), torch.tensor(cut_at, device=self.ids.device))

    def _cut(self, rows: torch.Tensor, at: torch.Tensor) -> None:
        """End original ``rows`` at steps ``at`` with reason stop (tokens after it become padding)."""
        steps = torch.arange(self.ids.shape[1], device=self.ids.device)
        self.ids[rows] = self.ids[rows].masked_fill(steps[None] > at[:, None], self.pad)
        self.length[rows], self.reason[rows] = at + 1, STOP
        current = torch.zeros(len(self.length), dtype=torch.bool, device=self.ids.device)
        current[rows] = True
        self.active &= ~current[self.alive]

    def result(self) -> Decoded:
        """One copy to the host; values past each row's length zeroed (ids: padding)."""
        steps = int(self.length.max()) if len(self.length) else 0
        keep = torch.arange(steps, device=self.ids.device)[None] < self.length[:, None]  # (R, T')
        cut = lambda x, fill=0: torch.where(keep, x[:, :steps], fill).cpu()  # noqa: E731
        return Decoded(cut(self.ids, self.pad), cut(self.logp), cut(self.ent), cut(self.p2), cut(self.hidden),
                       self.length.cpu(), [REASONS[int(c)] for c in self.reason.cpu()])


def prefill(model, cache_arg: str, ids, mask, pos, n: int, width: int, static: bool):
    """Prefill the prompts once, repeat each prompt's cache ``n`` times; (cache, (R, V) logits).
    With ``static``, the repeated keys/values are copied into a StaticCache of ``width`` positions."""
    cache = DynamicCache()
    out = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, logits_to_keep=1,
                **{cache_arg: cache})
    cache.batch_repeat_interleave(n)
    if static:
        dense = cache
        cache = StaticCache(config=model.config, max_cache_len=width)
        for layer, src in zip(cache.layers, dense.layers):
            layer.lazy_initialization(src.keys, src.values)
            layer.update(src.keys, src.values)
    return cache, out.logits[:, -1].repeat_interleave(n, 0)


def decode(engine, ids, mask, pos, n: int, sp, gen, u, opts: DecodeOpts) -> Decoded:
    """Decode one chunk (see the module docstring); ``u`` (R, T): each row's uniforms, or None."""
    T, P = sp.max_new_tokens, mask.shape[1]
    model, tok, dev = engine.model, engine.tok, ids.device
    # a static cache's width is rounded up to a multiple of 64 positions, so that batches whose
    # prompts differ a little in length share one compiled graph (extra positions stay masked)
    full = -(-(P + T) // 64) * 64 if opts.static_cache else P + T
    cache, logits = prefill(model, engine._cache_arg, ids, mask, pos, n, full, opts.static_cache)
    R = len(logits)
    attn = torch.zeros(R, full, dtype=mask.dtype, device=dev)  # (R, P+T) filled as tokens are fed
    attn[:, :P] = mask.repeat_interleave(n, 0)
    last_pos = pos[:, -1].repeat_interleave(n, 0)
    st = Loop(R, T, tok.pad_token_id, dev, tuple(sp.stop))
    seqs = device_stop_seqs(tok, sp.stop, dev) if sp.stop else None
    # with a shared stream (a generator or torch's global RNG), which rows share the batch decides
    # every row's draw (torch.multinomial draws for the whole batch at once): the host looks
    # (and drops rows) at every step, as the per-token loop did, so the samples stay the same
    every = 1 if (u is None and sp.temperature > 0) else max(1, opts.check_every)
    step = engine._step_fn(opts)
    unembed = model.get_output_embeddings().weight if sp.hidden_grad_norm else None  # (V, d)
    for t in range(T):
        draw = None if u is None else u[st.alive, t]  # (rows,) each row's own uniform
        out = sample_next(logits, sp.temperature, sp.top_k, sp.top_p, gen, min_p=sp.min_p, uniform=draw)
        hidden = None if unembed is None else next_hidden_grad_norm(logits, out.token, sp.temperature, unembed)
        token = st.record(t, out, hidden, getattr(engine, "stop_ids", tok.eos_token_id))
        if seqs is not None:
            st.device_stops(t, seqs)
        if t == T - 1:
            st.look(tok, t)
            break
        if (t + 1 - st.checked) >= every:
            st.look(tok, t)
            if not st.active.any():
                break
            if not opts.static_cache and st.active.sum() < opts.compact_below * len(st.active):
                keep = st.active.nonzero().squeeze(-1)  # drop finished rows from the batch
                cache.batch_select_indices(keep)
                st.alive, st.active, attn, last_pos = st.alive[keep], st.active[keep], attn[keep], last_pos[keep]
                token = token[keep]
        attn[:, P + t] = 1
        last_pos = last_pos + 1
        width = full if opts.static_cache else P + t + 1  # a static cache sees every position, masked
        logits = step(token[:, None], attn[:, :width], last_pos[:, None], cache)
    return st.result()
