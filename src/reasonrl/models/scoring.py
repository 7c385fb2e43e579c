"""Score (prompt, completion) batches: per-token log-probs and entropies under a model.

Used for the policy's log-probs in the loss (with gradients), for reference / teacher scoring
(without), and by methods that need token entropies (CorR-PO, SAGE, EGRSD). Rows are processed
in chunks so the (rows, T, V) logits of a large-vocabulary model never exist all at once, and
within a chunk the float32 log-softmax runs over slices of at most :data:`LOGIT_CHUNK_ELEMENTS`
logits, each recomputed in the backward pass (activation checkpointing) instead of kept: the
float32 copies of the whole (rows, T, V) block never exist at once, and the gradient is exact.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch
from torch.utils.checkpoint import checkpoint
from transformers import DynamicCache

from .chat import cache_kwarg
from .lora import base_model, score_by_adapter

LOGIT_CHUNK_ELEMENTS = 2**26  # logits per float32 log-softmax slice: 256 MB a float32 copy


def _positions(mask: torch.Tensor) -> torch.Tensor:
    return (mask.long().cumsum(-1) - 1).clamp(min=0)


def logprobs_and_entropy(
    logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0, extra: torch.Tensor | None = None
):
    """(R, T, V) logits, (R, T) targets -> (R, T) log p(target), (R, T) entropy of the distribution;
    with ``extra`` (R, T) ids also (R, T) log p(extra) from the same log-softmax (TGPO's teacher ids)."""
    t = temperature or 1.0
    scaled = logits.float() if t == 1 else logits.float() / t  # x / 1 is x: no (R, T, V) copy for nothing
    logp_all = scaled.log_softmax(-1)  # (R, T, V)
    logp = logp_all.gather(-1, targets[..., None]).squeeze(-1)  # (R, T)
    entropy = -(logp_all.exp() * logp_all).sum(-1)  # (R, T)
    if extra is None:
        return logp, entropy
    return logp, entropy, logp_all.gather(-1, extra[..., None]).squeeze(-1)  # (R, T) second label set


def chunked_logprobs_and_entropy(
    logits: torch.Tensor,
    targets: torch.Tensor,
    temperature: float = 1.0,
    max_elements: int | None = None,
    extra: torch.Tensor | None = None,
):
    """:func:`logprobs_and_entropy` over time slices of at most ``max_elements`` logits (default
    :data:`LOGIT_CHUNK_ELEMENTS`; one time step at least). With gradients each slice is
    checkpointed: its float32 log-softmax, exp and product are recomputed in the backward instead
    of kept, so the memory they need is one slice's, while the values and the gradient are those of
    the unsliced computation. A block that fits in one slice is computed as it is. ``extra``: a
    second (R, T) label set, whose log-probs come third (:func:`logprobs_and_entropy`)."""
    R, T, V = logits.shape
    step = max(1, (max_elements or LOGIT_CHUNK_ELEMENTS) // max(1, R * V))  # time steps per slice
    if extra is not None:
        return _chunked_with_extra(logits, targets, extra, temperature, step)
    if step >= T:
        return logprobs_and_entropy(logits, targets, temperature)
    no_grad = not (torch.is_grad_enabled() and logits.requires_grad)  # nothing to keep for a backward
    parts = [
        logprobs_and_entropy(lg, tg, temperature)
        if no_grad
        else checkpoint(logprobs_and_entropy, lg, tg, temperature, use_reentrant=False)
        for lg, tg in zip(logits.split(step, 1), targets.split(step, 1))
    ]  # (R, <=step, V) each
    return torch.cat([p[0] for p in parts], 1), torch.cat([p[1] for p in parts], 1)  # (R, T) twice


def _chunked_with_extra(logits, targets, extra, temperature: float, step: int):
    """:func:`chunked_logprobs_and_entropy` with a second label set: three (R, T) tensors."""
    if step >= logits.shape[1]:
        return logprobs_and_entropy(logits, targets, temperature, extra)
    no_grad = not (torch.is_grad_enabled() and logits.requires_grad)
    parts = [
        logprobs_and_entropy(lg, tg, temperature, ex)
        if no_grad
        else checkpoint(logprobs_and_entropy, lg, tg, temperature, ex, use_reentrant=False)
        for lg, tg, ex in zip(logits.split(step, 1), targets.split(step, 1), extra.split(step, 1))
    ]
    return tuple(torch.cat([p[i] for p in parts], 1) for i in range(3))  # (R, T) each


def score_completions(
    model,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    *,
    temperature: float = 1.0,
    chunk_rows: int = 64,
    entropies: bool = True,
    extra_labels: torch.Tensor | None = None,
    hidden: bool = False,
):
    """(R, P) left-padded prompts + (R, T) right-padded completions -> (R, T) log-probs and (R, T)
    entropies (None if not asked), zero on padding. Gradients flow if grad mode is on.

    ``extra_labels`` (R, T) ids: a third output, the (R, T) log-probs of those ids at the same
    positions from the same forward (TGPO: the student's log-prob of the teacher's greedy token).
    ``hidden``: a last output, the (R, T, H) final hidden states (after the decoder's last norm) at
    the positions whose logits score each completion token, i.e. the state s_t before token t (a
    value head's input, :mod:`reasonrl.models.critic`), zero on padding, from the same forward.

    A model that scores its own completions (a masked-diffusion LM, :mod:`reasonrl.models.diffusion`:
    d1's one-step estimate) is asked to, with the same arguments."""
    own = getattr(model, "score_completions", None)
    if own is not None:
        if hidden:
            raise ValueError(
                "a model that scores its own completions (a masked-diffusion LM) gives no hidden states "
                "(hidden=True: a value head needs a causal LM)"
            )
        return own(
            prompt_ids,
            prompt_mask,
            completion_ids,
            completion_mask,
            temperature=temperature,
            chunk_rows=chunk_rows,
            entropies=entropies,
            extra_labels=extra_labels,
        )
    T = completion_ids.shape[1]
    if extra_labels is not None and extra_labels.shape != completion_ids.shape:
        raise ValueError(
            f"extra_labels must have the completions' shape {tuple(completion_ids.shape)}, "
            f"got {tuple(extra_labels.shape)}"
        )
    device = next(model.parameters()).device
    out: list[list[torch.Tensor]] = []
    for s in range(0, len(prompt_ids), chunk_rows):
        ids = torch.cat([prompt_ids[s : s + chunk_rows], completion_ids[s : s + chunk_rows]], 1).to(device)
        mask = torch.cat([prompt_mask[s : s + chunk_rows], completion_mask[s : s + chunk_rows]], 1).to(device)
        P = ids.shape[1] - T
        logits = None if hidden else shared_prefix_logits(model, ids[:, :P], mask[:, :P], ids[:, P:], mask[:, P:])
        with capture_last_hidden(model, on=hidden) as seen:
            if logits is None:  # every row its own prompt (or hidden states asked for): one forward of each row
                logits = model(
                    input_ids=ids,
                    attention_mask=mask,
                    position_ids=_positions(mask),
                    use_cache=False,
                    logits_to_keep=T + 1,
                ).logits[:, :-1]  # (r, T, V): position p predicts token p+1
        extra = None if extra_labels is None else extra_labels[s : s + chunk_rows].to(device)  # (r, T)
        cm = mask[:, -T:]  # (r, T)
        row = [x * cm.to(x.dtype) for x in chunked_logprobs_and_entropy(logits, ids[:, -T:], temperature, extra=extra)]
        if hidden:  # (r, P + T, H) -> (r, T, H) at the positions of the logits above
            h = seen[0][:, -(T + 1) : -1]
            row.append(h * cm[..., None].to(h.dtype))
        out.append(row)
    cols = [torch.cat([o[i] for o in out]) for i in range(len(out[0]))]  # (R, T) log-probs, entropies, ...
    if not entropies:
        cols[1] = None
    return tuple(cols)


def shared_prefix_logits(
    model,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
) -> torch.Tensor | None:
    """(r, T, V) logits predicting each completion token, each distinct prompt run through the model once.

    A GRPO batch holds G completions of each prompt; one forward of every (prompt, completion) row
    computes each prompt G times, in the forward and again in the backward. Here the distinct
    prompts are prefilled once (with gradients), their KV cache is indexed out to the rows (the
    backward sums each row's gradient into its prompt's), and the completions run on top of it: the
    same logits as the per-row forward up to float rounding (``tests/test_scoring_prefix.py``), for
    (distinct prompts x P + r x T) positions instead of r x (P + T). The first logit of a row is the
    prompt's last position. None when no two rows share a prompt, when the model cannot keep a cache in
    training (activation checkpointing), or under FSDP (one forward per chunk on every rank): the caller
    runs the per-row forward."""
    keys = torch.cat([prompt_ids, prompt_mask], 1)  # a prompt is its ids and its padding
    unique, inverse = torch.unique(keys, dim=0, return_inverse=True)  # (u, 2P), (r,)
    if (
        len(unique) == len(keys)
        or completion_ids.shape[1] == 0
        or prompt_ids.shape[1] == 0
        or _checkpointing(model)
        or _sharded(model)
    ):
        return None
    P, arg = prompt_ids.shape[1], cache_kwarg(model)
    u_ids, u_mask = unique[:, :P], unique[:, P:]
    cache = DynamicCache()
    first = model(
        input_ids=u_ids,
        attention_mask=u_mask,
        position_ids=_positions(u_mask),
        use_cache=True,
        logits_to_keep=1,
        **{arg: cache},
    ).logits[:, -1]  # (u, V): each prompt's last position
    cache.batch_select_indices(inverse)  # (u, ...) -> (r, ...) per layer, differentiable
    mask = torch.cat([prompt_mask, completion_mask], 1)  # (r, P + T)
    rest = model(
        input_ids=completion_ids,
        attention_mask=mask,
        position_ids=_positions(mask)[:, P:],
        use_cache=True,
        **{arg: cache},
    ).logits[:, :-1]  # (r, T - 1, V): completion token t predicts t + 1
    return torch.cat([first[inverse, None], rest], 1)  # (r, T, V)


def _sharded(model) -> bool:
    """Whether the model is sharded by FSDP2: then every rank must run the same forwards (each one all-gathers
    the layers' parameters), and whether a chunk's rows share a prompt is each rank's own data, so the
    two-forward path would leave ranks waiting on each other (a deadlock: the dapo FSDP test)."""
    import torch.distributed.fsdp as fsdp

    return any(isinstance(m, fsdp.FSDPModule) for m in model.modules())


def _checkpointing(model) -> bool:
    """Whether the model recomputes its layers in the backward (then transformers keeps no cache in training)."""
    hf = base_model(model)
    on = getattr(hf, "is_activation_checkpointing", None)  # renamed in transformers 5.2x
    return bool(getattr(hf, "is_gradient_checkpointing", False) if on is None else on)


@contextmanager
def capture_last_hidden(model, on: bool = True) -> Iterator[list[torch.Tensor]]:
    """Inside the block, the decoder's output (the last hidden state, after its final norm) of each
    forward of ``model`` is appended to the yielded list (a forward hook on the HF decoder under any
    adapters; nothing is captured with ``on=False``). The CausalLM's own forward runs unchanged, so
    logit scaling or soft-capping of any architecture stays as the model defines it."""
    seen: list[torch.Tensor] = []
    if not on:
        yield seen
        return
    decoder = base_model(model).get_decoder()

    def hook(_module, _args, output):
        seen.append(output.last_hidden_state if hasattr(output, "last_hidden_state") else output[0])

    handle = decoder.register_forward_hook(hook)
    try:
        yield seen
    finally:
        handle.remove()


def trim_padding(
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor | None = None,
    completion_mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, ...]:
    """Rows cut to the columns some row uses: prompts are left-padded (N, P) -> (N, p), completions
    right-padded (N, T) -> (N, t), p and t the longest row's; less padding to run through the model.
    Returns the prompt pair, and the completion pair when given."""
    p = int(prompt_mask.sum(-1).max()) if len(prompt_mask) else 0
    P = prompt_ids.shape[1]
    out = (prompt_ids[:, P - p :], prompt_mask[:, P - p :])
    if completion_ids is None:
        return out
    c = int(completion_mask.sum(-1).max()) if len(completion_mask) else 0
    return out + (completion_ids[:, :c], completion_mask[:, :c])


def score_rows(
    model, ro, rows: torch.Tensor, *, temperature: float, extra_labels: torch.Tensor | None = None, hidden: bool = False
) -> tuple[torch.Tensor, ...]:
    """The training forward of rollout rows ``rows`` (R,) of ``ro``, their padding columns trimmed
    (prompts are left-padded, completions right-padded): (R, T) log-probs, (R, T) entropies, then the
    (R, T) log-probs of ``extra_labels`` (R, T_all) when given and the (R, T, H) hidden states with
    ``hidden`` (:func:`score_completions`). Each row is scored under the adapter it was sampled with
    (``ro.adapters``: a population of adapters), else all under the active one."""
    tokens = trim_padding(ro.prompt_ids[rows], ro.prompt_mask[rows], ro.completion_ids[rows], ro.completion_mask[rows])
    extra = None if extra_labels is None else extra_labels[:, : tokens[2].shape[1]]  # (R, T)
    pick = lambda t, idx: t if idx is None or t is None else t[idx]  # noqa: E731
    adapters = None if ro.adapters is None else [ro.adapters[i] for i in rows.tolist()]
    return score_by_adapter(
        model,
        adapters,
        lambda idx: score_completions(
            model,
            *(pick(t, idx) for t in tokens),
            temperature=temperature,
            chunk_rows=len(rows),
            extra_labels=pick(extra, idx),
            hidden=hidden,
        ),
    )
