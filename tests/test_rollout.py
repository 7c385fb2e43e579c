import math

import pytest
import torch

from reasonrl.models import logprobs_and_entropy, score_completions
from reasonrl.rollout import HFEngine, SamplingParams, filter_top_k_top_p, position_ids_from_mask, sample_next

PROMPTS = ["12+3=?\n", "5+539=?\n", "1=?\n"]


def test_position_ids_skip_left_padding():
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    assert position_ids_from_mask(mask).tolist() == [[0, 0, 0, 1], [0, 1, 2, 3]]


def test_top_k_top_p_filter_by_hand():
    # probs [0.5, 0.3, 0.15, 0.05]: top_p=0.7 keeps 0.5 (mass before 0) and 0.3 (mass before 0.5 < 0.7);
    # 0.15 has 0.8 of mass before it -> dropped. top_k=1 keeps only the argmax.
    logits = torch.tensor([[0.5, 0.3, 0.15, 0.05]]).log()
    kept = torch.isfinite(filter_top_k_top_p(logits, top_p=0.7))
    assert kept.tolist() == [[True, True, False, False]]
    assert torch.isfinite(filter_top_k_top_p(logits, top_k=1)).tolist() == [[True, False, False, False]]
    # the argmax survives even a tiny top_p
    assert torch.isfinite(filter_top_k_top_p(logits, top_p=1e-6)).tolist() == [[True, False, False, False]]


def test_sample_next_logprob_is_of_the_tempered_untruncated_distribution():
    # logits [0, ln 3] at T=1: p = [1/4, 3/4]. Greedy picks 1 with log(3/4).
    logits = torch.tensor([[0.0, math.log(3.0)]])
    tok, lp, ent, p2 = sample_next(logits, temperature=0)
    assert tok.item() == 1 and lp.item() == pytest.approx(math.log(0.75))
    # H = -(0.25 ln 0.25 + 0.75 ln 0.75) = 0.562335 ; sum p^2 = 0.0625 + 0.5625 = 0.625
    assert ent.item() == pytest.approx(0.562335, abs=1e-6) and p2.item() == pytest.approx(0.625)
    # T=2: scaled logits [0, ln3/2]: p1 = sqrt3/(1+sqrt3) = 0.633975; top_k=1 forces token 1 but the
    # reported log-prob stays that of the tempered full distribution.
    tok, lp, _, _ = sample_next(logits, temperature=2.0, top_k=1)
    assert tok.item() == 1 and lp.item() == pytest.approx(math.log(math.sqrt(3) / (1 + math.sqrt(3))), abs=1e-6)


def test_logprobs_and_entropy_by_hand():
    # one position, p = [1/4, 3/4]: log p(target=0) = ln 0.25 = -1.386294;
    # H = -(0.25 ln 0.25 + 0.75 ln 0.75) = 0.346574 + 0.215762 = 0.562335
    logits = torch.tensor([[[0.0, math.log(3.0)]]])
    lp, ent = logprobs_and_entropy(logits, torch.tensor([[0]]))
    assert lp.item() == pytest.approx(-1.386294, abs=1e-6)
    assert ent.item() == pytest.approx(0.562335, abs=1e-6)


def test_greedy_matches_transformers_generate(sharp_tiny):
    model, tok = sharp_tiny
    ro = HFEngine(model, tok).generate(PROMPTS, 1, SamplingParams(temperature=0, max_new_tokens=12))
    enc = tok(PROMPTS, return_tensors="pt", padding=True)
    ref = model.generate(**enc, max_new_tokens=12, do_sample=False, pad_token_id=tok.pad_token_id)
    ref = ref[:, enc["input_ids"].shape[1] :]
    for r in range(len(PROMPTS)):
        n = int(ro.lengths[r])
        assert ro.completion_ids[r, :n].tolist() == ref[r, :n].tolist()
    assert len({tuple(x) for x in ro.completion_ids.tolist()}) > 1  # the outputs really differ


def test_left_padding_does_not_change_a_prompt_s_completion(sharp_tiny):
    model, tok = sharp_tiny
    engine, sp = HFEngine(model, tok), SamplingParams(temperature=0, max_new_tokens=10)
    alone = engine.generate(["1=?\n"], 1, sp)
    batched = engine.generate(["1=?\n", "123456789+987654321=?\n"], 1, sp)  # first row gets 18 pads
    n = int(alone.lengths[0])
    assert batched.completion_ids[0, :n].tolist() == alone.completion_ids[0, :n].tolist()
    assert batched.logprobs[0, :n] == pytest.approx(alone.logprobs[0, :n], abs=1e-5)


def test_behaviour_logprobs_equal_rescoring_and_padding_is_masked(sharp_tiny):
    model, tok = sharp_tiny
    ro = HFEngine(model, tok).generate(PROMPTS, 4, SamplingParams(temperature=0.7, max_new_tokens=16, seed=3))
    assert ro.completion_ids.shape[0] == 12 and ro.prompts[4:8] == [PROMPTS[1]] * 4
    with torch.no_grad():
        lp, ent = score_completions(
            model, ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask, temperature=0.7, chunk_rows=5
        )
    assert torch.allclose(lp, ro.logprobs, atol=1e-4)
    assert (ent[ro.completion_mask == 0] == 0).all() and (ent[ro.completion_mask == 1] > 0).all()
    assert torch.allclose(ent, ro.entropies, atol=1e-4)  # the rollout's entropies are the scorer's
    assert (ro.logprobs[ro.completion_mask == 0] == 0).all()


def test_finish_reasons_eos_length_and_stop(sharp_tiny):
    model, tok = sharp_tiny
    engine = HFEngine(model, tok)
    ro = engine.generate(PROMPTS, 8, SamplingParams(temperature=1.0, max_new_tokens=6, seed=0))
    for r, reason in enumerate(ro.finish_reasons):
        n = int(ro.lengths[r])
        last = ro.completion_ids[r, n - 1].item()
        assert reason in ("eos", "length")
        assert (last == tok.eos_token_id) == (reason == "eos")
        assert reason == "eos" or n == 6
    # a stop string found in the text ends the row and is cut from the returned text
    first = engine.generate(PROMPTS[:1], 1, SamplingParams(temperature=0, max_new_tokens=12))
    stop = first.texts[0][2:4]
    assert len(stop) == 2
    ro = engine.generate(PROMPTS[:1], 1, SamplingParams(temperature=0, max_new_tokens=12, stop=(stop,)))
    assert ro.finish_reasons == ["stop"] and ro.texts[0] == first.texts[0][: first.texts[0].find(stop)]


def test_seeded_sampling_is_reproducible_and_top_k1_is_greedy(sharp_tiny):
    model, tok = sharp_tiny
    engine = HFEngine(model, tok)
    a = engine.generate(PROMPTS, 3, SamplingParams(temperature=1.0, max_new_tokens=8, seed=7))
    b = engine.generate(PROMPTS, 3, SamplingParams(temperature=1.0, max_new_tokens=8, seed=7))
    assert a.texts == b.texts and torch.equal(a.logprobs, b.logprobs)
    greedy = engine.generate(PROMPTS, 1, SamplingParams(temperature=0, max_new_tokens=8))
    topk1 = engine.generate(PROMPTS, 1, SamplingParams(temperature=1.0, top_k=1, max_new_tokens=8, seed=1))
    assert topk1.texts == greedy.texts


def test_dropping_finished_rows_and_chunking_do_not_change_greedy_output(sharp_tiny):
    model, tok = sharp_tiny
    sp = SamplingParams(temperature=0, max_new_tokens=12)
    full = HFEngine(model, tok, compact_below=0.0).generate(PROMPTS, 2, sp)
    compact = HFEngine(model, tok, compact_below=1.0, max_rows=2).generate(PROMPTS, 2, sp)
    assert full.texts == compact.texts and full.finish_reasons == compact.finish_reasons
    assert torch.allclose(full.logprobs, compact.logprobs, atol=1e-5)
