"""Shared test helpers (not fixtures)."""

import torch

from reasonrl.rollout import Rollouts


def text_rollouts(prompts, texts, n, finish_reasons=None) -> Rollouts:
    """Rollouts for scripted completion texts: one token per character, no model involved."""
    R = len(texts)
    lengths = torch.tensor([len(t) for t in texts])
    mask = (torch.arange(int(lengths.max()))[None] < lengths[:, None]).long()
    return Rollouts(
        prompts=[p for p in prompts for _ in range(n)],
        texts=list(texts),
        prompt_ids=torch.ones(R, 1, dtype=torch.long),
        prompt_mask=torch.ones(R, 1, dtype=torch.long),
        completion_ids=mask.clone(),
        completion_mask=mask,
        logprobs=torch.zeros(mask.shape),
        finish_reasons=list(finish_reasons or ["eos"] * R),
        n=n,
        entropies=torch.zeros(mask.shape),
    )


def round_context(
    batch,
    *,
    task,
    sample=None,
    reward=None,
    state=None,
    seed=0,
    position=0,
    group_size=None,
    step=0,
    pool=None,
    tok=None,
    score_under=None,
    advantage=None,
    policy=None,
    in_process=True,
    cache=None,
    branch=None,
    reference=None,
    micro=64,
    sampling=None,
    device="cpu",
    formatter=None,
):
    """A RoundContext for a part's ``extend`` / ``before_step`` in a test, scripted by the callables given
    (what a BatchMaker would bind); ``state`` is the part's own state dict (or selector state)."""
    from types import SimpleNamespace

    from reasonrl.models.chat import PLAIN
    from reasonrl.parts.protocol import RoundContext

    def refuse(*_, **__):
        raise AssertionError("this test's part was not expected to call that")

    G = group_size or (batch.rewards.shape[1] if batch is not None else 1)
    return RoundContext(
        batch=batch,
        task=task,
        tok=tok or SimpleNamespace(pad_token_id=0),
        seed=seed,
        step=step,
        position=position,
        group_size=G,
        pool=pool,
        state={} if state is None else state,
        cache={} if cache is None else cache,
        sampling=sampling,
        micro=micro,
        policy=policy,
        in_process=in_process,
        device=device,
        sample=sample or refuse,
        branch=branch or refuse,
        reward=reward or refuse,
        score_under=score_under or refuse,
        advantage=advantage or refuse,
        reference=reference,
        formatter=formatter or PLAIN,
    )


def loss_context(
    *,
    logp,
    batch,
    rows,
    mask=None,
    model=None,
    tok=None,
    temperature=1.0,
    extra_logp=None,
    train_step=1,
    agg="seq-mean-token-mean",
    norm_len=1,
    n_tokens=1.0,
    n_seqs=1,
    data=None,
    state=None,
    kind=-1,
    reference=None,
):
    """A LossContext for a part's ``loss_term`` in a test. ``n_seqs`` is the minibatch's trained-row count:
    give the batch's own (rows with a loss token) for a minibatch that is the whole batch."""
    from reasonrl.parts.protocol import Channel, LossContext

    return LossContext(
        logp=logp,
        mask=mask,
        rows=rows,
        batch=batch,
        model=model,
        tok=tok,
        temperature=temperature,
        extra_logp=extra_logp,
        train_step=train_step,
        agg=agg,
        norm_len=norm_len,
        n_tokens=n_tokens,
        n_seqs=n_seqs,
        data=Channel() if data is None else data,
        state={} if state is None else state,
        kind=kind,
        reference=reference,
    )


def batch_context(**fields):
    """A BatchContext for ``score_batch`` / ``shape_advantages`` in a test: the fields a part reads, the rest
    None (reading one it was not given fails loudly in the part)."""
    import dataclasses

    from reasonrl.models.chat import PLAIN
    from reasonrl.parts.protocol import BatchContext, Channel

    base = {f.name: None for f in dataclasses.fields(BatchContext)}
    base.update(data=Channel(), channels={}, step=0, temperature=1.0, formatter=PLAIN)
    base.update(fields)
    return BatchContext(**base)
