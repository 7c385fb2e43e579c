"""Scoring with shared prompts (models.scoring.shared_prefix_logits): each distinct prompt is run once,
its KV cache indexed out to its rows, the completions run on top. Log-probs, entropies and every
gradient must equal the per-row forward's (float rounding apart), with left-padded prompts of
different lengths, right-padded completions, LoRA adapters and a full model."""

import pytest
import torch

from reasonrl.config.train import Lora
from reasonrl.models import build_tiny
from reasonrl.models.lora import apply_lora
from reasonrl.models.scoring import score_completions, shared_prefix_logits


def batch(vocab, pad):
    """6 rows: prompt A (3 tokens) x 3, prompt B (5 tokens, its first one the pad id) x 2, prompt C x 1;
    completions of 4, 2, 1, 4, 3, 2 tokens (right-padded to 4), prompts left-padded to 5."""
    g = torch.Generator().manual_seed(0)
    a, b, c = (torch.randint(3, vocab, (n,), generator=g) for n in (3, 5, 4))
    b[0] = pad  # a real token that equals the pad id: the mask, not the id, tells them apart
    prompts = [a, a, a, b, b, c]
    ids = torch.full((6, 5), pad)
    mask = torch.zeros(6, 5, dtype=torch.long)
    for r, p in enumerate(prompts):
        ids[r, 5 - len(p) :], mask[r, 5 - len(p) :] = p, 1
    lengths = torch.tensor([4, 2, 1, 4, 3, 2])
    cmask = (torch.arange(4)[None] < lengths[:, None]).long()
    cids = torch.randint(3, vocab, (6, 4), generator=g).masked_fill(cmask == 0, pad)
    return ids, mask, cids, cmask


def grads_of(model, ids, mask, cids, cmask, share: bool, monkeypatch):
    import reasonrl.models.scoring as scoring

    if not share:
        monkeypatch.setattr(scoring, "shared_prefix_logits", lambda *a, **k: None)
    model.zero_grad()
    logp, ent = score_completions(model, ids, mask, cids, cmask, temperature=0.7)
    (logp.sum() + 0.1 * ent.sum()).backward()  # both outputs carry gradients back
    monkeypatch.undo()
    return logp.detach(), ent.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("lora", [False, True])
def test_shared_prompts_give_the_per_row_forward_s_log_probs_and_gradients(lora, monkeypatch):
    model, tok = build_tiny("tiny", seed=0)
    if lora:
        model = apply_lora(model, Lora(r=4, alpha=8.0), seed=1)
        with torch.no_grad():  # peft starts B at 0: move it so the adapters matter
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0, 0.05, generator=torch.Generator().manual_seed(len(name)))
    model.train()
    ids, mask, cids, cmask = batch(model.config.vocab_size, tok.pad_token_id)
    shared = shared_prefix_logits(model, ids, mask, cids, cmask)
    assert shared is not None and shared.shape == (6, 4, model.config.vocab_size)
    lp_s, ent_s, g_s = grads_of(model, ids, mask, cids, cmask, True, monkeypatch)
    lp_p, ent_p, g_p = grads_of(model, ids, mask, cids, cmask, False, monkeypatch)
    assert torch.allclose(lp_s, lp_p, atol=2e-5) and torch.allclose(ent_s, ent_p, atol=2e-5)
    assert (lp_s[cmask == 0] == 0).all() and (lp_s[cmask == 1] != 0).all()
    assert g_s.keys() == g_p.keys() and len(g_s) == (28 if lora else len(list(model.parameters())))
    for name in g_p:
        scale = g_p[name].abs().max().clamp(min=1e-3)
        assert (g_s[name] - g_p[name]).abs().max() / scale < 1e-4, name


def test_rows_that_share_no_prompt_take_the_per_row_forward():
    model, tok = build_tiny("tiny", seed=0)
    ids, mask, cids, cmask = batch(model.config.vocab_size, tok.pad_token_id)
    rows = torch.tensor([0, 3, 5])  # one row of each prompt
    assert shared_prefix_logits(model, ids[rows], mask[rows], cids[rows], cmask[rows]) is None


def test_the_same_ids_under_another_padding_are_another_prompt(monkeypatch):
    # rows 0-1: prompt [pad, x, y] whose first token is a real pad-id token; rows 2-3: the same ids with
    # that position padding, the 2-token prompt [x, y]: two prompts, each scored under its own prefill
    model, tok = build_tiny("tiny", seed=0)
    model.eval()
    ids, mask, cids, cmask = batch(model.config.vocab_size, tok.pad_token_id)
    rows = torch.tensor([3, 4, 3, 4])  # prompt B (5 tokens, the first the pad id), twice each
    ids, mask, cids, cmask = ids[rows], mask[rows].clone(), cids[rows], cmask[rows]
    mask[2:, 0] = 0
    with torch.no_grad():
        shared = score_completions(model, ids, mask, cids, cmask)[0]
        monkeypatch.setattr("reasonrl.models.scoring.shared_prefix_logits", lambda *a, **k: None)
        plain = score_completions(model, ids, mask, cids, cmask)[0]
    assert not torch.allclose(plain[0], plain[2], atol=1e-3)  # the padding changes the scores
    assert torch.allclose(shared, plain, atol=2e-5)


def test_with_activation_checkpointing_the_rows_take_the_per_row_forward():
    from reasonrl.models.memory import enable_checkpointing

    model, tok = build_tiny("tiny", seed=0)
    ids, mask, cids, cmask = batch(model.config.vocab_size, tok.pad_token_id)
    enable_checkpointing(model)
    model.train()  # transformers keeps no cache in training with checkpointing on: sharing would lose the prompt
    assert shared_prefix_logits(model, ids, mask, cids, cmask) is None
