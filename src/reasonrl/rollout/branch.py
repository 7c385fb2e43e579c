"""Generation continued from a prefix of an earlier rollout, and token <-> character offsets.

CodeThinker's dynamic beam sampling (arXiv 2605.17958) branches new completions from the
consistent prefix of earlier ones. A branch is the prompt plus the first ``cut`` completion
tokens of a source row, decoded onwards by the same engine: the prefix tokens keep the source
row's behaviour log-probs and statistics (same policy, same temperature), the new tokens get
their own, so the whole row is an ordinary sample of the behaviour policy for the loss.

STRIDE's redirection (arXiv 2605.18851) decodes the continuation under another prompt (``contexts``:
the prompt with a critique, built by the run's prompt formatter) followed by the kept prefix: the
row that comes back still holds its original prompt, so the loss trains it without the critique,
and its ``train_mask`` covers the new suffix tokens only (their behaviour log-probs are those under
the critique; the prefix keeps the source's).
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import torch

from .base import Rollouts, SamplingParams, concat_rollouts


def _one_row(
    ro: Rollouts,
    r: int,
    cut: int,
    new_ids,
    new_logp,
    new_ent,
    new_p2,
    n_new: int,
    reason: str,
    tok,
    stop: tuple[str, ...],
    new_hidden=None,
    suffix_only: bool = False,
) -> Rollouts:
    """Row ``r``'s prompt, its first ``cut`` completion tokens and ``n_new`` new ones, as a 1-row Rollouts."""

    def join(old: torch.Tensor | None, new: torch.Tensor) -> torch.Tensor | None:
        return None if old is None else torch.cat([old[r, :cut], new[:n_new]])[None]  # (1, cut + n_new)

    ids = join(ro.completion_ids, new_ids)
    text = tok.decode(ids[0], skip_special_tokens=True)
    cuts = [text.find(s) for s in stop if s in text]
    return Rollouts(
        prompts=[ro.prompts[r]],
        texts=[text[: min(cuts)] if cuts else text],
        prompt_ids=ro.prompt_ids[r : r + 1],
        prompt_mask=ro.prompt_mask[r : r + 1],
        completion_ids=ids,
        completion_mask=torch.ones_like(ids),
        logprobs=join(ro.logprobs, new_logp),
        finish_reasons=[reason],
        n=1,
        entropies=join(ro.entropies, new_ent),
        sum_p2=join(ro.sum_p2, new_p2),
        hidden_grad_norm=None if new_hidden is None else join(ro.hidden_grad_norm, new_hidden),
        train_mask=_suffix_mask(cut, n_new) if suffix_only else None,
    )


def _suffix_mask(cut: int, n_new: int) -> torch.Tensor:  # -> (1, cut + n_new): the regenerated tokens only
    return torch.cat([torch.zeros(cut, dtype=torch.long), torch.ones(n_new, dtype=torch.long)])[None]


@torch.inference_mode()
def branch(
    engine,
    ro: Rollouts,
    rows: Sequence[int],
    cuts: Sequence[int],
    sampling: SamplingParams,
    generator: torch.Generator | None = None,
    contexts: Sequence[str] | None = None,
) -> Rollouts:
    """One new completion per (row, cut): ``ro``'s row continued after its first ``cut`` tokens.

    ``contexts`` (one rendered prompt per row, e.g. the prompt with STRIDE's critique): decoded as
    context + prefix, returned as the row's own prompt + prefix + new tokens with ``train_mask`` on
    the new tokens only. Without it the rows are whole samples (no ``train_mask``), as beam sampling
    wants.

    ``sampling.max_new_tokens`` is the budget of the *whole* completion (prefix included), so a
    branch is never longer than an ordinary sample. Rows come back in the order given.
    """
    rows, cuts = list(rows), list(cuts)
    if len(rows) != len(cuts) or not rows:
        raise ValueError(f"branch needs one cut per row and at least one row, got {len(rows)} rows, {len(cuts)} cuts")
    for r, c in zip(rows, cuts):
        if not 0 <= c < int(ro.lengths[r]) or c >= sampling.max_new_tokens:
            raise ValueError(
                f"cut {c} of row {r} must lie inside its completion (length {int(ro.lengths[r])}) "
                f"and below the budget {sampling.max_new_tokens}"
            )
    if contexts is not None and len(contexts) != len(rows):
        raise ValueError(f"branch: {len(contexts)} contexts for {len(rows)} rows (one context text per row)")
    pad = engine.tok.pad_token_id
    # the prompt each row is decoded under: its own, or its context encoded as the engine encodes prompts
    heads = (
        [ro.prompt_ids[r][ro.prompt_mask[r].bool()] for r in rows]
        if contexts is None
        else [torch.tensor(engine.tok(c)["input_ids"], dtype=torch.long) for c in contexts]
    )
    seqs = [torch.cat([h.to(ro.prompt_ids), ro.completion_ids[r, :c]]) for r, c, h in zip(rows, cuts, heads)]
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad, dtype=torch.long)  # (N, L) left-padded prompt + prefix
    mask = torch.zeros_like(ids)
    for i, s in enumerate(seqs):
        ids[i, width - len(s) :], mask[i, width - len(s) :] = s, 1
    remaining = sampling.max_new_tokens - min(cuts)
    was_training = engine.model.training
    engine.model.eval()
    try:
        st = engine._decode(
            ids.to(engine.device),
            mask.to(engine.device),
            1,
            dataclasses.replace(sampling, max_new_tokens=remaining),
            generator,
        )
    finally:
        engine.model.train(was_training)
    out = []
    for i, (r, c) in enumerate(zip(rows, cuts)):
        room = sampling.max_new_tokens - c  # this row's own share of the budget
        n_new = min(int(st.length[i]), room)
        reason = st.reason[i] if int(st.length[i]) <= room else "length"
        out.append(
            _one_row(
                ro,
                r,
                c,
                st.ids[i],
                st.logp[i],
                st.ent[i],
                st.sum_p2[i],
                n_new,
                reason,
                engine.tok,
                sampling.stop,
                st.hidden[i] if sampling.hidden_grad_norm else None,
                suffix_only=contexts is not None,
            )
        )
    return concat_rollouts(out, pad) if len(out) > 1 else out[0]


def token_char_offsets(tok, ids: Sequence[int]) -> list[tuple[int, int]]:
    """(start, end) character span of each token in ``tok.decode(ids, skip_special_tokens=True)``.

    Pieces are decoded one token at a time; when they do not add up to the whole text (a byte-level
    tokenizer splitting a character), the spans are taken from decoded prefixes instead, which is
    exact for any tokenizer. Special tokens get an empty span.
    """
    ids = [int(i) for i in ids]
    full = tok.decode(ids, skip_special_tokens=True)
    pieces = [tok.decode([i], skip_special_tokens=True) for i in ids]
    if "".join(pieces) != full:
        ends = [len(tok.decode(ids[: k + 1], skip_special_tokens=True)) for k in range(len(ids))]
        return [(ends[k - 1] if k else 0, e) for k, e in enumerate(ends)]
    spans, pos = [], 0
    for p in pieces:
        spans.append((pos, pos + len(p)))
        pos += len(p)
    return spans


def char_to_token(spans: Sequence[tuple[int, int]], char: int) -> int:
    """Index of the first token that ends after character ``char`` (the token holding it); the
    number of tokens when ``char`` is at or past the end."""
    for k, (_, end) in enumerate(spans):
        if end > char:
            return k
    return len(spans)
