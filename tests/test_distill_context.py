"""score_under_context: the completion's tokens read under another context, reduced in the forward."""

from __future__ import annotations

import torch

from reasonrl.distill import encode_contexts, score_under_context
from reasonrl.models import load_model
from reasonrl.models.scoring import score_completions
from reasonrl.rollout import HFEngine, SamplingParams


def _rollouts(tiny_dir):
    model, tok = load_model(tiny_dir)
    ro = HFEngine(model, tok).generate(
        ["3+4=?", "12+30=?"], 2, SamplingParams(temperature=1.0, max_new_tokens=12), seeds=[1, 2]
    )
    return model, tok, ro


def test_under_the_plain_prompt_it_is_the_policy_scoring(tiny_dir):
    model, _, ro = _rollouts(tiny_dir)
    lp, ent = score_completions(model, ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask)
    got = score_under_context(model, ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask, entropy=True)
    assert torch.allclose(got.logprobs, lp, atol=1e-5) and torch.allclose(got.entropy, ent, atol=1e-5)
    assert torch.allclose(got.logprobs, ro.logprobs, atol=1e-4)  # and the behaviour log-probs of generation


def test_another_context_equals_an_unpadded_forward_of_context_plus_completion(tiny_dir):
    model, tok, ro = _rollouts(tiny_dir)
    contexts = ["Hint: add the ones first. 3+4=?"] * 2 + ["12+30=?"] * 2  # rows 2, 3 keep their own prompt
    ctx_ids, ctx_mask = encode_contexts(tok, contexts)
    got = score_under_context(
        model, ctx_ids, ctx_mask, ro.completion_ids, ro.completion_mask, argmax=True, top_k=3, full=True, chunk_rows=1
    )
    for r in range(4):
        n = int(ro.completion_mask[r].sum())
        ids = torch.tensor(tok(contexts[r])["input_ids"] + ro.completion_ids[r, :n].tolist())[None]
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, -n - 1 : -1]  # (n, V) the predictions of the completion tokens
        logp = logits.log_softmax(-1)
        want = logp.gather(-1, ro.completion_ids[r, :n, None]).squeeze(-1)
        assert torch.allclose(got.logprobs[r, :n], want, atol=1e-5) and torch.all(got.logprobs[r, n:] == 0)
        assert torch.equal(got.argmax[r, :n], logits.argmax(-1))
        assert torch.allclose(got.topk_logprobs[r, :n], logp.topk(3, -1).values, atol=1e-5)
        assert torch.allclose(got.logits[r, :n], logits, atol=1e-4)
    plain = score_under_context(model, ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask)
    assert not torch.allclose(got.logprobs[:2], plain.logprobs[:2], atol=1e-3)  # the hint changed the reading
    assert torch.allclose(got.logprobs[2:], plain.logprobs[2:], atol=1e-5)  # the same context, the same reading


def test_a_teacher_carries_no_gradient_and_a_student_does(tiny_dir):
    model, _, ro = _rollouts(tiny_dir)
    args = (model, ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask)
    teacher = score_under_context(*args, entropy=True, full=True)
    assert not teacher.logprobs.requires_grad and not teacher.logits.requires_grad and not teacher.entropy.requires_grad
    student = score_under_context(*args, grad=True)
    student.logprobs.sum().backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())
