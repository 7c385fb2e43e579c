"""Generation continued from a prefix (CodeThinker's branching) and token/character offsets."""

import pytest
import torch

from reasonrl.models.scoring import score_completions
from reasonrl.rollout import HFEngine, SamplingParams
from reasonrl.rollout.branch import branch, char_to_token, token_char_offsets

PROMPTS = ["12+34=?\n", "5+7=?\n", "305+96=?\n"]


def test_greedy_branch_reproduces_the_source_completion(sharp_tiny):
    # greedy decoding is deterministic, so continuing a greedy row after any cut must give it back
    model, tok = sharp_tiny
    engine, sp = HFEngine(model, tok), SamplingParams(temperature=0, max_new_tokens=24)
    ro = engine.generate(PROMPTS, 1, sp)
    cuts = [0, 3, int(ro.lengths[2]) - 1]
    out = branch(engine, ro, [0, 1, 2], cuts, sp)
    assert out.texts == ro.texts and out.finish_reasons == ro.finish_reasons
    for r in range(3):
        n = int(ro.lengths[r])
        assert out.completion_ids[r, :n].tolist() == ro.completion_ids[r, :n].tolist()
        assert out.logprobs[r, :n] == pytest.approx(ro.logprobs[r, :n], abs=1e-5)


def test_sampled_branch_keeps_the_prefix_and_its_logprobs_rescore(sharp_tiny):
    model, tok = sharp_tiny
    engine, sp = HFEngine(model, tok), SamplingParams(temperature=1.0, max_new_tokens=20)
    g = torch.Generator().manual_seed(3)
    ro = engine.generate(PROMPTS, 2, sp, generator=g)
    rows = [0, 3, 5]
    cuts = [min(4, int(ro.lengths[r]) - 1) for r in rows]
    out = branch(engine, ro, rows, cuts, sp, generator=g)
    for i, (r, c) in enumerate(zip(rows, cuts)):
        assert out.completion_ids[i, :c].tolist() == ro.completion_ids[r, :c].tolist()  # the shared prefix
        assert out.prompts[i] == ro.prompts[r]
        assert int(out.lengths[i]) <= sp.max_new_tokens  # the budget covers prefix + continuation
    with torch.no_grad():
        lp, _ = score_completions(
            model,
            out.prompt_ids,
            out.prompt_mask,
            out.completion_ids,
            out.completion_mask,
            temperature=1.0,
            entropies=False,
        )
    torch.testing.assert_close(
        out.logprobs, lp * out.completion_mask, atol=1e-4, rtol=0
    )  # prefix (copied) and new tokens are the policy's


def test_branch_rejects_a_cut_outside_the_completion(sharp_tiny):
    model, tok = sharp_tiny
    engine, sp = HFEngine(model, tok), SamplingParams(temperature=0, max_new_tokens=8)
    ro = engine.generate(PROMPTS[:1], 1, sp)
    with pytest.raises(ValueError, match="cut"):
        branch(engine, ro, [0], [int(ro.lengths[0])], sp)


def test_token_char_offsets_and_char_to_token(sharp_tiny):
    _, tok = sharp_tiny
    ids = tok("ab\nc", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    spans = token_char_offsets(tok, ids)
    assert spans == [(0, 1), (1, 2), (2, 3), (3, 4), (4, 4)]  # one char per token; EOS is empty
    assert [char_to_token(spans, c) for c in (0, 2, 3, 4, 9)] == [0, 2, 3, 5, 5]
