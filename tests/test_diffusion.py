"""The masked-diffusion LM (reasonrl.models.diffusion) and its LLaDA-style sampler (reasonrl.rollout.diffusion):
seeded determinism, no mask left in a finished canvas, d1's one-step scores equal to the behaviour log-probs, the
ELBO surrogate on a toy model with fixed logits worked by hand, and the save/load round trip."""

import math

import pytest
import torch

from reasonrl.errors import UserError
from reasonrl.losses.balance import elbo_estimate
from reasonrl.models import load_model, save_model
from reasonrl.models.diffusion import DiffusionConfig, DiffusionLM, build_diffusion, set_canvas
from reasonrl.models.scoring import score_completions
from reasonrl.rollout import SamplingParams, engine_for
from reasonrl.rollout.diffusion import DiffusionEngine, commit, transfer_counts

PROMPTS = ["12+3=?\n", "5+5=?\n", "7+80=?\n"]


@pytest.fixture(scope="module")
def small_mdlm():
    model, tok = build_diffusion("tiny", seed=0)
    set_canvas(model, 16)  # 2 blocks of 8, 8 steps
    return model.eval(), tok


def test_llada_transfer_schedule_splits_a_block_evenly_remainder_first():
    # 8 positions over 3 steps: 8 = 3 + 3 + 2 (LLaDA's get_num_transfer_tokens)
    assert (
        transfer_counts(8, 3) == [3, 3, 2] and transfer_counts(8, 4) == [2, 2, 2, 2] and sum(transfer_counts(5, 5)) == 5
    )


def test_sampler_is_deterministic_under_a_seed_and_leaves_no_mask(small_mdlm):
    model, tok = small_mdlm
    engine = engine_for(model, tok)
    assert isinstance(engine, DiffusionEngine)
    sp = SamplingParams(temperature=1.0, max_new_tokens=16)
    a = engine.generate(PROMPTS, 3, sp, seeds=[11, 12, 13])
    b = engine.generate(PROMPTS, 3, sp, seeds=[11, 12, 13])
    assert torch.equal(a.completion_ids, b.completion_ids) and a.texts == b.texts
    c = engine.generate(PROMPTS, 3, sp, seeds=[99, 98, 97])
    assert not torch.equal(a.completion_ids, c.completion_ids)
    mask_id = model.config.mask_token_id
    for ro in (a, c):
        assert not bool((ro.completion_ids == mask_id).any())
        assert all(r in ("eos", "length") for r in ro.finish_reasons)
    # a row's sample depends on its seed alone: the second prompt alone gives its rows of the joint call
    alone = engine.generate(PROMPTS[1:2], 3, sp, seeds=[12])
    assert torch.equal(alone.completion_ids, a.completion_ids[3:6, : alone.completion_ids.shape[1]])


def test_commit_fills_every_masked_position_of_a_block_and_never_a_committed_one():
    # 2 rows, 4 positions, block = all 4; schedule [2, 2]: after two steps nothing is masked and the
    # positions committed at step 1 keep their token even though step 2's prediction differs there
    M = 9
    canvas = torch.full((2, 4), M)
    logits1 = torch.tensor([[5.0, 0.0, 1.0]]).repeat(2, 4, 1)  # predicts token 0 everywhere
    logits1[:, :, 0] += torch.tensor([4.0, 3.0, 2.0, 1.0])  # confidence falls with the position
    sp = SamplingParams(temperature=0, max_new_tokens=4)
    step1 = commit(logits1, canvas, canvas == M, 2, None, None, sp)
    assert step1.tolist() == [[0, 0, M, M]] * 2  # the two most confident positions
    logits2 = torch.tensor([[0.0, 5.0, 0.0]]).repeat(2, 4, 1)  # now predicts token 1 everywhere
    step2 = commit(logits2, step1, step1 == M, 2, None, None, sp)
    assert step2.tolist() == [[0, 0, 1, 1]] * 2


def test_behaviour_logprobs_are_the_one_step_scores_of_the_trainer(small_mdlm):
    # diffu-GRPO's ratio is 1 on-policy: the sampler's log-probs are what score_completions gives the model
    model, tok = small_mdlm
    ro = engine_for(model, tok).generate(
        PROMPTS, 2, SamplingParams(temperature=0.8, max_new_tokens=16), seeds=[1, 2, 3]
    )
    with torch.no_grad():
        lp, ent = score_completions(
            model, ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask, temperature=0.8
        )
    assert torch.allclose(lp, ro.logprobs, atol=1e-5)
    assert torch.allclose(ent, ro.entropies, atol=1e-4)
    # the value does not depend on how wide the completions are trimmed (the canvas is fixed)
    T = int(ro.completion_mask.sum(-1).max())
    with torch.no_grad():
        lp_wide, _ = score_completions(
            model,
            ro.prompt_ids,
            ro.prompt_mask,
            torch.cat([ro.completion_ids[:, :T], torch.zeros(6, 16 - T, dtype=torch.long)], 1),
            torch.cat([ro.completion_mask[:, :T], torch.zeros(6, 16 - T, dtype=torch.long)], 1),
            temperature=0.8,
        )
    assert torch.allclose(lp_wide[:, :T], lp[:, :T], atol=1e-6)


def test_a_budget_beyond_the_canvas_is_a_user_error(small_mdlm):
    model, tok = small_mdlm
    with pytest.raises(UserError, match="exceeds the diffusion model's canvas of 16"):
        engine_for(model, tok).generate(PROMPTS, 1, SamplingParams(max_new_tokens=40))


class FixedLogits(DiffusionLM):
    """A toy masked-diffusion LM whose prediction is the same at every position, whatever it sees."""

    LOGITS = torch.log(torch.tensor([1e-9, 0.5, 0.25, 0.25, 1e-9]))  # pad, eos, a, b, mask

    def canvas_logits(self, prompt_ids, prompt_mask, canvas):
        return self.LOGITS.expand(len(canvas), canvas.shape[1], 5).clone()


def test_elbo_on_a_toy_model_with_fixed_logits_matches_a_hand_computation():
    cfg = DiffusionConfig(
        vocab_size=5,
        hidden_size=8,
        num_hidden_layers=1,
        num_attention_heads=1,
        intermediate_size=8,
        pad_token_id=0,
        eos_token_id=1,
        mask_token_id=4,
        canvas=4,
        block_length=4,
        steps=2,
    )
    toy = FixedLogits(cfg)
    # the completion "a b" then EOS: canvas [a, b, eos, eos] = [2, 3, 1, 1]; the response is its first 3 tokens
    comp, cmask = torch.tensor([[2, 3, 1]]), torch.tensor([[1, 1, 1]])
    # draw 1: t = 0.5, positions {0, 2} masked; draw 2: t = 0.25, position {1} masked
    masked = torch.tensor([[[True, False, True, False], [False, True, False, False]]])
    logp = toy.masked_token_logp(
        torch.ones(1, 1, dtype=torch.long), torch.ones(1, 1, dtype=torch.long), comp, cmask, masked
    )
    # p(a) = p(b) = 0.25 -> ln 0.25 = -1.386294; p(eos) = 0.5 -> ln 0.5 = -0.693147 (the 1e-9 entries change neither)
    assert torch.allclose(logp[0, 0], torch.tensor([-1.386294, -1.386294, -0.693147, -0.693147]), atol=1e-5)
    scored = torch.tensor([[1, 1, 1, 0]])  # the response's 3 positions; the EOS fill at 3 is not scored
    got = elbo_estimate(logp, masked, torch.tensor([[0.5, 0.25]]), scored)
    # draw 1: (ln 0.25 + ln 0.5) / 0.5 = (-1.386294 - 0.693147) / 0.5 = -4.158883; draw 2: ln 0.25 / 0.25 = -5.545177
    # mean over the draws -4.852030, divided by n = 3: -1.617343
    assert float(got) == pytest.approx(-1.617343, abs=1e-5)
    assert math.isclose((-4.158883 - 5.545177) / 2 / 3, -1.617343, abs_tol=1e-6)


def test_demo_loss_is_finite_and_learns(small_mdlm, tmp_path):
    model, tok = build_diffusion("tiny", seed=1)
    set_canvas(model, 48)
    gen = torch.Generator().manual_seed(0)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    demos = ["3+4+0=7\nA:7", "1+1+0=2\nA:2"] * 4
    losses = []
    for _ in range(15):
        loss = model.demo_loss(["3+4=?\n", "1+1=?\n"] * 4, demos, tok, gen)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    assert all(math.isfinite(v) for v in losses) and sum(losses[-3:]) < sum(losses[:3])


def test_diffusion_model_saves_and_loads_as_an_hf_folder(small_mdlm, tmp_path):
    model, tok = small_mdlm
    out = save_model(model, tok, tmp_path / "m", dtype=torch.float16)
    again, tok2 = load_model(str(out))
    assert isinstance(again, DiffusionLM) and again.config.canvas == 16 and tok2.mask_token_id == tok.mask_token_id
    ids = tok2(PROMPTS, return_tensors="pt", padding=True)
    with torch.no_grad():
        a = model.half().float().canvas_logits(ids["input_ids"], ids["attention_mask"], model.masked_canvas(3))
        b = again.canvas_logits(ids["input_ids"], ids["attention_mask"], again.masked_canvas(3))
    assert torch.allclose(a, b, atol=1e-4)


def test_an_evaluation_leaves_the_global_rng_where_it_was(small_mdlm):
    """The sampler's greedy pass draws its uniforms from torch's global RNG (no seed, no generator); an evaluation
    must not move it, or a run's later draws (the log Z head's dropout in trafl) would depend on whether and how
    often it evaluated (seen: trafl seed 0 went 0.06 -> 0.02 when its before-evaluation was copied in instead)."""
    from reasonrl.eval.runner import EvalConfig, evaluate
    from reasonrl.tasks import get_task

    model, tok = small_mdlm
    engine = engine_for(model, tok)
    torch.manual_seed(0)
    engine.generate(PROMPTS, 1, SamplingParams(temperature=0, max_new_tokens=8))
    moved = torch.rand(1)
    torch.manual_seed(0)
    assert not torch.equal(moved, torch.rand(1))  # the premise: the bare sampler does draw from the global RNG
    torch.manual_seed(0)
    evaluate(engine, get_task("arithmetic"), EvalConfig(n_problems=2, samples_per_problem=2, seed=1, max_new_tokens=8))
    after = torch.rand(1)
    torch.manual_seed(0)
    assert torch.equal(after, torch.rand(1))


class _ScriptedMDLM:
    """A 4-position canvas in 2 blocks of 2, 4 steps (one commit per step). Position j predicts token
    10 + j with logit c_j = (1, 2, 5, 6)[j] (every other token 0, the mask 15 never), or, for the random
    draw test, splits its mass evenly between 10 + j and 4 + j. Records each canvas it is shown."""

    def __init__(self, remasking, split=False):
        from types import SimpleNamespace

        self.config = SimpleNamespace(canvas=4, block_length=2, steps=4, remasking=remasking, mask_token_id=15)
        self.split, self.seen, self.training = split, [], False

    def eval(self):
        return self

    def train(self, mode=True):
        return self

    def canvas_logits(self, ids, mask, canvas):
        self.seen.append(canvas[0].tolist())
        logits = torch.zeros(len(canvas), 4, 16)
        logits[..., 15] = -1e9
        for j, c in enumerate((1.0, 2.0, 5.0, 6.0)):
            if self.split:  # p(10 + j) = p(4 + j) = 1/2
                logits[:, j] = -1e9
                logits[:, j, 10 + j] = logits[:, j, 4 + j] = 0.0
            else:
                logits[:, j, 10 + j] = c
        return logits


def _denoise(model, u, temperature):
    from reasonrl.rollout.diffusion import sampler_opts

    engine = DiffusionEngine.__new__(DiffusionEngine)
    engine.model, engine.device = model, torch.device("cpu")
    sp = SamplingParams(temperature=temperature, max_new_tokens=4)
    canvas, _ = engine._denoise(
        torch.ones(1, 1, dtype=torch.long), torch.ones(1, 1, dtype=torch.long), u, sp, sampler_opts(model.config)
    )
    return canvas[0].tolist()


def test_two_blocks_low_confidence_commits_inside_the_current_block_most_confident_first():
    # block 0 = positions 0, 1: position 1 (logit 2) is more confident than 0 (logit 1), so it goes first,
    # although positions 2, 3 (logits 5, 6) are more confident still: they wait for block 1, where 3 precedes 2
    M = 15
    model = _ScriptedMDLM("low_confidence")
    final = _denoise(model, torch.zeros(1, 2, 4, 4, dtype=torch.float64), temperature=0)
    assert model.seen == [[M, M, M, M], [M, 11, M, M], [10, 11, M, M], [10, 11, M, 13]]
    assert final == [10, 11, 12, 13]


def test_two_blocks_random_remasking_follows_the_draws_within_the_block():
    # remasking=random: the commit order is the order of the per-step confidence draws u[1], still one block
    # at a time (the highest draws, 0.9 and 0.8 at positions 2 and 3, must wait for block 1). Temperature 1:
    # each position's token is 4 + j when its token draw u[0] < 1/2 (the cdf reaches the lower id 4 + j first),
    # else 10 + j
    M = 15
    conf = torch.tensor([[0.3, 0.1, 0.9, 0.8]] * 4, dtype=torch.float64)  # (steps, L): 0 before 1, 2 before 3
    tok = torch.tensor([[0.2, 0.7, 0.4, 0.6]] * 4, dtype=torch.float64)  # tokens 4, 11, 6, 13
    model = _ScriptedMDLM("random", split=True)
    final = _denoise(model, torch.stack([tok, conf])[None], temperature=1.0)
    assert model.seen == [[M, M, M, M], [4, M, M, M], [4, 11, M, M], [4, 11, 6, M]]
    assert final == [4, 11, 6, 13]
