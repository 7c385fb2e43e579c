"""The decoding loop of :class:`~reasonrl.rollout.hf.HFEngine`, resident on the model's device.

Every per-token output (token, log-prob, entropy, sum p^2, hidden gradient norm) is written into
preallocated (R, T) device tensors, the attention mask is preallocated at full width (R, P+T) and
sliced, EOS is detected on the device, and stop strings whose tokens are fixed are matched as
token-id suffixes on the device. The host looks at the batch only every ``check_every`` steps: it
decodes the tails of the steps since its last look to find stop strings the device cannot see
(any other tokenisation of them), cuts each such row at the first step whose decoded tail holds
one (exactly where a per-token text check ends it), and drops finished rows (``compact_below``).
Each look is one device-to-host read (everything it needs, packed into one tensor), and the end
of a chunk two more: with a static cache, the host reads the device once per ``check_every``
tokens (``tests/test_decode.py`` counts the reads). The measured cost of the per-token host loop on a GPU is in
``../shared/gpu/README.md`` (372 ms of CPU time against 55 ms of GPU time per 16 tokens).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Sequence

import torch

from .kvcache import DecodeCache, bucket_rows, static_width
from .sampling import next_hidden_grad_norm, sample_next

REASONS = ("length", "eos", "stop")  # device codes of finish reasons
LENGTH, EOS, STOP = range(3)


@dataclass
class DecodeOpts:
    check_every: int = 8  # steps between host looks (stop-string text check, dropping finished rows)
    compact_below: float = 0.5  # drop finished rows when fewer than this fraction are still going
    static_cache: bool = False  # transformers' StaticCache: fixed shapes, no row dropping
    compile: bool = False  # torch.compile(mode="reduce-overhead") of the decode step (needs static_cache)
    # torch.compile's backend: "inductor" (with mode reduce-overhead: CUDA graphs on a GPU); the CPU
    # tests trace the same graphs with "aot_eager" (inductor's C++ code generation is slow on 2 cores)
    compile_backend: str = "inductor"


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
        ids[j, width - len(e) :], valid[j, width - len(e) :] = torch.tensor(e), True
    return ids.to(device), valid.to(device)


def suffix_hits(hist: torch.Tensor, t: int, seqs: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """(rows, T) token history, step ``t``, (S, L) right-aligned sequences and validity -> (rows,)
    bool: the tokens at steps ``.. t`` end with one of the sequences (one no longer than t + 1)."""
    w = min(seqs.shape[1], t + 1)
    tail = hist[:, t + 1 - w : t + 1]  # (rows, w)
    s, v = seqs[:, -w:], valid[:, -w:]  # (S, w)
    fits = ~valid[:, : seqs.shape[1] - w].any(-1)  # (S,) the sequence is no longer than the history
    match = ((tail[:, None, :] == s[None]) | ~v[None]).all(-1) & fits[None]  # (rows, S)
    return match.any(-1)


def first_text_stop(
    tok, ids: list[list[int]], starts: list[int], ends: list[int], offset: int, stop: Sequence[str]
) -> list[int | None]:
    """For each row, the first step ``s`` in ``[start, end]`` whose decoded tail (the last
    :func:`window_tokens` tokens up to ``s``) holds a stop string, or None. ``ids[i][j]`` is row i's
    token at step ``offset + j`` (``offset <= start + 1 - window`` or 0, so every tail is there);
    all tails are decoded in one batched call."""
    w = window_tokens(stop)
    spans = [(i, s) for i in range(len(ids)) for s in range(starts[i], ends[i] + 1)]
    tails = [ids[i][max(0, s + 1 - w) - offset : s + 1 - offset] for i, s in spans]
    texts = tok.batch_decode(tails, skip_special_tokens=True) if tails else []
    found: list[int | None] = [None] * len(ids)
    for (i, s), text in zip(spans, texts):
        if found[i] is None and any(x in text for x in stop):
            found[i] = s
    return found


def _split(xs: list, sizes: tuple[int, ...]) -> list[list]:
    """Consecutive pieces of ``xs`` of the given sizes."""
    ends = list(itertools.accumulate(sizes))
    return [xs[e - n : e] for n, e in zip(sizes, ends)]


class Loop:
    """One chunk's decoding state: device buffers indexed by original row, ``alive`` maps the
    current batch rows (which shrink when finished rows are dropped) to original rows. The host
    keeps, as Python lists, what it read at its last look (:meth:`look`), its only read of the state."""

    def __init__(self, R: int, T: int, pad: int, device, stop: tuple[str, ...]):
        self.ids = torch.full((R, T), pad, dtype=torch.long, device=device)
        self.floats = torch.zeros(4, R, T, device=device)  # one tensor, so the result is one copy to the host
        self.logp, self.ent, self.p2, self.hidden = self.floats.unbind(0)  # (R, T) views
        self.length = torch.zeros(R, dtype=torch.long, device=device)
        self.reason = torch.zeros(R, dtype=torch.long, device=device)  # REASONS codes
        self.alive = torch.arange(R, device=device)
        self.active = torch.ones(R, dtype=torch.bool, device=device)  # current rows still going
        # host, as of the last look: original rows going, current rows going, lengths and reasons
        self.live, self.host_active = [True] * R, [True] * R
        self.host_length, self.host_reason = [0] * R, [LENGTH] * R
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

    @property
    def going(self) -> bool:
        """Some current row was still going at the last look."""
        return any(self.host_active)

    def look(self, tok, t: int) -> None:
        """The host look after step ``t``: one read of the device state (current rows, lengths,
        reasons and, with stop strings, the token tails of the steps since the last look), then
        settle steps ``checked .. t`` (text stops)."""
        lo = max(0, self.checked + 1 - window_tokens(self.stop)) if self.stop else t + 1
        R, a, w = len(self.length), len(self.alive), t + 1 - lo
        packed = torch.cat(
            [self.alive, self.active.long(), self.length, self.reason, self.ids[:, lo : t + 1].flatten()]
        )
        alive, active, self.host_length, self.host_reason, tails = _split(packed.tolist(), (a, a, R, R, R * w))
        self.host_active = [bool(x) for x in active]  # packed.tolist(): the look's one device-to-host read
        if self.stop:
            self._text_stops(tok, t, lo, [tails[r * w : (r + 1) * w] for r in range(R)], alive)
        self.checked = t + 1
        self.live = [False] * R
        for r, going in zip(alive, self.host_active):
            self.live[r] = going

    def _text_stops(self, tok, t: int, lo: int, ids: list[list[int]], alive: list[int]) -> None:
        """``ids[r]``: original row r's tokens at steps ``lo .. t``; host lists as read by :meth:`look`."""
        length, reason = self.host_length, self.host_reason
        rows = [r for r, going in enumerate(self.live) if going]  # original rows going when steps checked.. began
        ends = [length[r] - 1 if reason[r] != LENGTH else t for r in rows]
        # an EOS step is not text-checked (EOS wins at its own step, as a per-token check has it)
        last = [e - 1 if reason[r] == EOS else e for r, e in zip(rows, ends)]
        found = first_text_stop(tok, [ids[r] for r in rows], [self.checked] * len(rows), last, lo, self.stop)
        cuts = {}
        for r, e, s in zip(rows, ends, found):
            if reason[r] == STOP and s is None:
                raise RuntimeError(
                    f"stop strings {self.stop!r}: a row's tokens matched one on the device but its "
                    "decoded text does not hold it (the tokenizer decodes it differently in context); "
                    "write the stop string without leading/trailing spaces"
                )
            if s is not None and not (reason[r] == STOP and s == e):
                cuts[r] = s
        if cuts:
            self._cut(cuts, alive)

    def _cut(self, cuts: dict[int, int], alive: list[int]) -> None:
        """End original rows ``r`` at steps ``cuts[r]`` with reason stop (tokens after it become
        padding), on the device and in the host's lists."""
        dev = self.ids.device
        rows, at = torch.tensor(list(cuts), device=dev), torch.tensor(list(cuts.values()), device=dev)
        steps = torch.arange(self.ids.shape[1], device=dev)
        self.ids[rows] = self.ids[rows].masked_fill(steps[None] > at[:, None], self.pad)
        self.length[rows], self.reason[rows] = at + 1, STOP
        current = torch.zeros(len(self.length), dtype=torch.bool, device=dev)
        current[rows] = True
        self.active &= ~current[self.alive]
        for r, s in cuts.items():
            self.host_length[r], self.host_reason[r] = s + 1, STOP
        self.host_active = [going and r not in cuts for r, going in zip(alive, self.host_active)]

    def result(self) -> Decoded:
        """Two copies to the host (ids, and the four float tensors at once); values past each row's
        length zeroed (ids: padding). Lengths and reasons are the last look's (the loop ends on one)."""
        steps = max(self.host_length, default=0)
        keep = torch.arange(steps, device=self.ids.device)[None] < self.length[:, None]  # (R, T')
        ids = torch.where(keep, self.ids[:, :steps], self.pad).cpu()
        logp, ent, p2, hidden = torch.where(keep, self.floats[:, :, :steps], 0).cpu().unbind(0)
        return Decoded(
            ids,
            logp,
            ent,
            p2,
            hidden,
            torch.tensor(self.host_length, dtype=torch.long),
            [REASONS[c] for c in self.host_reason],
        )


def prefill(model, cache_arg: str, ids, mask, pos, n: int, capacity: int | None = None):
    """Prefill the prompts once, repeat each prompt's cache ``n`` times; (cache, (R, V) logits).
    ``capacity``: positions to reserve in every layer (prompt + new tokens), so that decoding writes
    in place (:class:`~reasonrl.rollout.kvcache.GrowingLayer`); None: transformers' concatenating layers."""
    cache = DecodeCache()
    out = model(
        input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, logits_to_keep=1, **{cache_arg: cache}
    )
    if capacity is not None:
        cache.reserve(capacity)
    cache.batch_repeat_interleave(n)
    return cache, out.logits[:, -1].repeat_interleave(n, 0)


@dataclass
class Inputs:
    """The model-side inputs of a chunk: the cache, the (rows, width) attention mask, (rows,) last
    positions and tokens fed. With a static cache ``rows`` is the row bucket (>= R): rows past R are
    fillers whose outputs are discarded."""

    cache: object
    attn: torch.Tensor  # (rows, width)
    last_pos: torch.Tensor  # (rows,)
    feed: torch.Tensor  # (rows,) the tokens fed at the next step
    width: int


def start(engine, ids, mask, pos, n: int, T: int, opts: DecodeOpts) -> tuple[Inputs, torch.Tensor]:
    """Prefill and lay out the chunk's model inputs; (inputs, (R, V) first logits)."""
    P = mask.shape[1]
    dense, logits = prefill(engine.model, engine._cache_arg, ids, mask, pos, n, None if opts.static_cache else P + T)
    R = len(logits)
    rows, width = (bucket_rows(R, engine.max_rows), static_width(P + T)) if opts.static_cache else (R, P + T)
    cache = engine.caches.filled(engine.model.config, dense, rows, width) if opts.static_cache else dense
    attn = torch.zeros(rows, width, dtype=mask.dtype, device=ids.device)  # (rows, P+T) filled as tokens are fed
    attn[:R, :P] = mask.repeat_interleave(n, 0)
    attn[R:, :P] = attn[0, :P]  # filler rows attend as row 0 does (their cache repeats row 0's)
    last_pos = pos[:, -1].repeat_interleave(n, 0)
    last_pos = torch.cat([last_pos, last_pos[:1].expand(rows - R)])
    feed = torch.full((rows,), engine.tok.pad_token_id, dtype=torch.long, device=ids.device)
    return Inputs(cache, attn, last_pos, feed, width), logits


def decode(engine, ids, mask, pos, n: int, sp, gen, u, opts: DecodeOpts) -> Decoded:
    """Decode one chunk (see the module docstring); ``u`` (R, T): each row's uniforms, or None."""
    T, P = sp.max_new_tokens, mask.shape[1]
    model, tok, dev = engine.model, engine.tok, ids.device
    b, logits = start(engine, ids, mask, pos, n, T, opts)
    st = Loop(len(logits), T, tok.pad_token_id, dev, tuple(sp.stop))
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
        if t == T - 1 or (t + 1 - st.checked) >= every:
            st.look(tok, t)
            if t == T - 1 or not st.going:
                break
            if not opts.static_cache and sum(st.host_active) < opts.compact_below * len(st.host_active):
                keep = torch.tensor([i for i, going in enumerate(st.host_active) if going], device=dev)
                b.cache.batch_select_indices(keep)  # drop finished rows from the batch
                st.alive, st.active, b.attn = st.alive[keep], st.active[keep], b.attn[keep]
                b.last_pos = b.last_pos[keep]
                st.host_active, b.feed, token = [True] * len(keep), b.feed[keep], token[keep]
        b.attn[:, P + t] = 1
        b.last_pos = b.last_pos + 1
        b.feed[: len(token)] = token
        width = b.width if opts.static_cache else P + t + 1  # a static cache sees every position, masked
        logits = step(b.feed[:, None], b.attn[:, :width], b.last_pos[:, None], b.cache)[: len(token)]
    return st.result()
