"""STRIDE (arXiv 2605.18851, spec section 7): the branch with a critique context, the Redirect round's
glue (packing, harmless advantages, importance weights) and the recipe end to end."""

import dataclasses
import json
import math

import pytest
import torch

from reasonrl.advantages.subgroups import harmless_advantage, verifier_reward
from reasonrl.loop.batch import BatchMaker
from reasonrl.config.train import TrainConfig
from reasonrl.distill import score_under_context
from reasonrl.parts import Redirect
from reasonrl.parts.redirect import pack_round_robin, suffix_is_weight
from reasonrl.recipes import get_recipe
from reasonrl.rollout import HFEngine, SamplingParams
from reasonrl.rollout.branch import _suffix_mask, branch, char_to_token, token_char_offsets
from reasonrl.loop.run import train_run
from reasonrl.tasks import get_task, guidance
from reasonrl.errors import UserError
from reasonrl.config.validate import check_part

from fakes import RIGHT, WRONG2, stride_batch

PROMPT = "55+187=?\n"
WRONG1 = "5+7+0=13,5+8+1=14,0+1+1=2\nA:242"  # step 1 is wrong (the answer happens to be right: not used)


# ------------------------------------------------------------------ spec (d)


def test_spec_kept_prefix_and_suffix_mask(sharp_tiny):
    _, tok = sharp_tiny
    text = "A\n\nB\n\nC"
    # k_hat = 2 keeps step "A" and its separator: 3 characters
    assert guidance.prefix_before_step(object(), text, 2) == ("A\n\n", 3)  # the generic blank-line rule
    ids = tok(text, add_special_tokens=False)["input_ids"]
    cut = char_to_token(token_char_offsets(tok, ids), 3)
    mask = _suffix_mask(cut, len(ids) - cut)[0]  # (T,)
    # the character tokenizer: 3 kept tokens, then "B\n\nC" (4 tokens) trained
    assert mask.tolist() == [0, 0, 0, 1, 1, 1, 1]
    assert tok.decode([i for i, m in zip(ids, mask) if m]) == "B\n\nC"


def test_spec_harmless_advantage_and_verifier_reward():
    # b = 0.25, redirected rewards [1, 0]: [1 - 0.25, max(0 - 0.25, 0)] = [0.75, 0]
    assert harmless_advantage(torch.tensor([1.0, 0.0]), 0.25).tolist() == [0.75, 0.0]
    assert harmless_advantage(torch.tensor([1.0, 0.0]), 0.25, harmless=False).tolist() == [0.75, -0.25]
    # "incorrect" on a wrong answer (agrees: 1) with a successful redirect (+0.5) = 1.5
    assert verifier_reward("incorrect", False, True, eta=0.5) == 1.5


# ------------------------------------------------------------------ pure glue


def test_pack_round_robin_by_hand():
    # counts [5, 2, 0, 3], chunks of 2: whole chunks available [4, 2, 0, 2], leftovers 1 + 0 + 0 + 1 = 2.
    # cap 6: turn 1 takes 2 from prompts 0, 1, 3 -> budget 0
    assert pack_round_robin([5, 2, 0, 3], 2, 6) == ([2, 2, 0, 2], 2)
    # cap 100: everything whole -> [4, 2, 0, 2]
    assert pack_round_robin([5, 2, 0, 3], 2, 100) == ([4, 2, 0, 2], 2)
    # cap 3 -> rounded down to 2: one chunk, from prompt 0; cap 1 (below one chunk) still allows one chunk
    assert pack_round_robin([5, 2, 0, 3], 2, 3) == ([2, 0, 0, 0], 2)
    assert pack_round_robin([5, 2, 0, 3], 2, 1) == ([2, 0, 0, 0], 2)


def test_suffix_is_weight_by_hand():
    plain = torch.tensor([[-1.0, -2.0, -0.5], [-1.0, -1.0, -1.0], [-3.0, -3.0, 0.0]])
    behaviour = torch.tensor([[-1.0, -2.5, -1.0], [-2.0, -2.0, -1.0], [-1.0, -1.0, 0.0]])
    mask = torch.tensor([[0, 1, 1], [1, 1, 0], [0, 0, 0]])
    # row 0: (-2 + 2.5) + (-0.5 + 1) = 1 -> e^1 = 2.71828; row 1: 1 + 1 = 2 -> e^2 = 7.389 -> clipped to 5;
    # row 2: no suffix token -> e^0 = 1
    w = suffix_is_weight(plain, behaviour, mask, clip=5.0)
    assert w.tolist() == pytest.approx([math.e, 5.0, 1.0], abs=1e-5)


def test_redirect_checks_its_knobs():
    with pytest.raises(UserError, match="'redirect.critic' = 'oracle'"):
        check_part(Redirect(critic="oracle"))
    with pytest.raises(UserError, match="'redirect.template' = 'no slot' .* {critique}"):
        check_part(Redirect(template="no slot"))


# ------------------------------------------------------------------ branch with a critique context


def test_branch_with_contexts_trains_the_suffix_under_the_plain_prompt(sharp_tiny):
    model, tok = sharp_tiny
    engine, sp = HFEngine(model, tok), SamplingParams(temperature=1.0, max_new_tokens=30)
    ro = engine.generate([PROMPT, "12+34=?\n"], 2, sp, generator=torch.Generator().manual_seed(1))
    rows, cuts = [0, 1, 3], [0, min(5, int(ro.lengths[1]) - 1), min(9, int(ro.lengths[3]) - 1)]
    crit = ["step 1: 5+7+0 is 12\n", "step 2: wrong\n", "check the carry\n"]
    # contexts are whole prompts (the formatter's rewrite of the row's prompt): here prompt + critique
    contexts = [ro.prompts[r] + c for r, c in zip(rows, crit)]
    out = branch(engine, ro, rows, cuts, sp, torch.Generator().manual_seed(2), contexts=contexts)
    for i, (r, c) in enumerate(zip(rows, cuts)):
        n = int(out.lengths[i])
        assert out.prompts[i] == ro.prompts[r]  # the row keeps its original prompt (no critique)
        assert torch.equal(out.prompt_ids[i][out.prompt_mask[i].bool()], ro.prompt_ids[r][ro.prompt_mask[r].bool()])
        assert out.completion_ids[i, :c].tolist() == ro.completion_ids[r, :c].tolist()
        assert out.logprobs[i, :c].tolist() == ro.logprobs[r, :c].tolist()  # the source's behaviour log-probs
        assert out.train_mask[i].tolist() == [0] * c + [1] * (n - c) + [0] * (out.train_mask.shape[1] - n)
        # new tokens' behaviour log-probs = a re-score under prompt + critique + prefix
        ctx = torch.cat(
            [
                ro.prompt_ids[r][ro.prompt_mask[r].bool()],
                torch.tensor(tok(crit[i], add_special_tokens=False)["input_ids"]),
                ro.completion_ids[r, :c],
            ]
        )
        sc = score_under_context(
            model,
            ctx[None],
            torch.ones(1, len(ctx), dtype=torch.long),
            out.completion_ids[i : i + 1, c:n],
            torch.ones(1, n - c, dtype=torch.long),
        )
        torch.testing.assert_close(out.logprobs[i, c:n], sc.logprobs[0], atol=1e-5, rtol=0)
    plain = branch(engine, ro, rows, cuts, sp, torch.Generator().manual_seed(2))
    assert plain.train_mask is None  # beam's whole-sample branches are unchanged


# ------------------------------------------------------------------ extend() on a hand-made batch


def test_extend_redirects_failed_rows_with_harmless_advantages_and_weights(sharp_tiny):
    model, tok = sharp_tiny
    task = get_task("arithmetic")
    item = task.make_item([55, 187], ["+"])
    redirect = Redirect(n_r=2)
    recipe = dataclasses.replace(get_recipe("stride"), group_size=4, redirect=redirect)
    maker = BatchMaker(task, recipe, HFEngine(model, tok), task.max_new_tokens, seed=0)
    batch = stride_batch(tok, item, [RIGHT, WRONG2, RIGHT, WRONG2.replace("A:252", "A:25")], [1, 0, 1, 0], 4)
    g, m = redirect.extend(maker.round_context("redirect", batch))
    # two failed rows, both wrong at step 2 -> 2 redirections x n_r = 2 rows = one group of G = 4
    assert len(g.items) == 1 and g.items[0] is item and len(g.ro.texts) == 4
    assert m["stride/redirects"] == 2 and m["stride/unparsed"] == 0 and m["stride/dropped"] == 0
    assert all(p == PROMPT for p in g.ro.prompts)
    cut = len("5+7+0=12,")  # one token per character: step 2 starts after 9 tokens
    assert (g.ro.train_mask[:, :cut] == 0).all() and (g.ro.train_mask[:, cut] == 1).all()
    assert (g.ro.completion_ids[:, :cut] == batch.ro.completion_ids[1, :cut]).all()
    # b = mean of [1, 0, 1, 0] = 0.5: advantage max(r - 0.5, 0)
    assert g.preset.tolist() == (g.rewards - 0.5).clamp(min=0).tolist()
    assert m["stride/success_rate"] == pytest.approx(float(g.correct.mean()))
    # the weight: clamp(exp(sum over the suffix of log p(. | x, prefix) - log p(. | x, critique, prefix)), 0, 5)
    crit = guidance.critique(task, item, WRONG2).text + "\n"
    suffix = g.ro.train_mask.bool()
    with torch.no_grad():
        ctx = torch.tensor([tok(PROMPT + crit, add_special_tokens=False)["input_ids"]] * 4)
        under_crit = score_under_context(
            model, ctx, torch.ones_like(ctx), g.ro.completion_ids, g.ro.completion_mask, temperature=0.8
        ).logprobs
        pctx = torch.tensor([tok(PROMPT, add_special_tokens=False)["input_ids"]] * 4)
        plain = score_under_context(
            model, pctx, torch.ones_like(pctx), g.ro.completion_ids, g.ro.completion_mask, temperature=0.8
        ).logprobs
    want = ((plain - under_crit) * suffix).sum(-1).exp().clamp(0, 5)
    torch.testing.assert_close(g.weight, want, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(g.ro.logprobs[suffix], plain[suffix], atol=1e-5, rtol=0)  # ratio 1 at the first pass
    # ratio=False: weight lambda_r only; a group size n_r does not divide is refused
    off, _ = dataclasses.replace(redirect, ratio=False, lambda_r=0.5).extend(maker.round_context("redirect", batch))
    assert off.weight.tolist() == [0.5] * 4
    with pytest.raises(UserError, match=r"'redirect.n_r' = 3 .* a divisor of group_size = 4"):
        check_part(Redirect(n_r=3), recipe)


# ------------------------------------------------------------------ end to end


def _run(tiny_dir, tmp_path, redirect):
    cfg = TrainConfig(
        model=str(tiny_dir),
        out=str(tmp_path / "run"),
        recipe="stride",
        task="arithmetic",
        steps=3,
        prompts_per_step=2,
        eval_every=0,
        final_eval_problems=4,
        final_eval_k=0,
        save_every=0,
    )
    train_run(cfg, dataclasses.replace(get_recipe("stride"), group_size=4, redirect=redirect))
    return [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_stride_trains_end_to_end_with_task_critiques(tiny_dir, tmp_path):
    rows = _run(tiny_dir, tmp_path, Redirect(n_r=2))
    assert [r["step"] for r in rows] == [1, 2, 3]
    for r in rows:
        assert all(math.isfinite(v) for v in r.values() if isinstance(v, float)), r
        assert 0.0 <= r["stride/success_rate"] <= 1.0 and r["stride/redirects"] % 2 == 0  # whole groups of 2
        assert r["stride/redirects"] <= 2 and "stride/verifier_reward_mean" not in r  # cap: 2 prompts
    assert sum(r["stride/redirects"] for r in rows) > 0


@pytest.mark.slow
def test_stride_trains_end_to_end_with_the_model_as_critic(tiny_dir, tmp_path):
    # the tiny reasoner never learnt the critique tags: its critiques are unparseable and counted
    rows = _run(tiny_dir, tmp_path, Redirect(critic="model", n_r=2, n_v=2))
    assert [r["step"] for r in rows] == [1, 2, 3]
    critiqued = [r for r in rows if "stride/verifier_reward_mean" in r]
    assert critiqued, "no step had a failed rollout to critique"
    assert sum(r["stride/unparsed"] for r in rows) > 0
    for r in critiqued:
        # verdict agreement (<= 1) + eta x a successful redirect (<= 0.5); the critiques joined the batch
        assert 0.0 <= r["stride/verifier_reward_mean"] <= 1.5 and math.isfinite(r["loss/total"])
        assert r["stride/verifier_groups"] >= 1
