"""STRIDE's verifier path (``redirect.critic=model``) with critiques the parser reads (issue #26).

The end-to-end test runs the tiny reasoner as its own critic, whose critiques never parse, so the
path after parsing (a unit from the critic's first-error step, its redirection, the verifier's
reward from its verdict and that redirection's outcome) never ran. Here the critic's samples are
scripted (two critiques per failed row: one parseable, one not) and the rest is the real round on
the tiny model. Checked to fail: with ``parse_first_error`` returning None the unit counts are
wrong; with the verifier reward's success term taken from another unit (``success.get(k + 1)``)
the reward assertion fails (the redirections' outcomes are scripted: unit 0 succeeds, unit 1 not).
"""

import dataclasses

import pytest
import torch

from reasonrl.loop.batch import BatchMaker
from reasonrl.models import build_tiny
from reasonrl.parts import Redirect
from reasonrl.recipes import get_recipe
from reasonrl.rollout import HFEngine, Rollouts
from reasonrl.tasks import get_task

from fakes import RIGHT, WRONG2, stride_batch

GOOD = "<verdict>incorrect</verdict> step 2 adds 5+8+1 wrongly <first_error>2</first_error>"
BAD = "the sum looks fine to me"  # no tags: unparseable, no unit, verdict None


def _scripted(tok, texts):
    def sample(items, prompts, tag, first, n=None):
        assert tag == "stride-verify" and n == 2 and len(prompts) == len(texts) // 2
        comp = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
        T = max(map(len, comp))
        ids = torch.tensor([c + [tok.pad_token_id] * (T - len(c)) for c in comp])
        mask = torch.tensor([[1] * len(c) + [0] * (T - len(c)) for c in comp])
        enc = tok([p for p in prompts for _ in range(n)], return_tensors="pt", padding=True)
        return Rollouts(
            prompts=[p for p in prompts for _ in range(n)],
            texts=list(texts),
            prompt_ids=enc["input_ids"],
            prompt_mask=enc["attention_mask"],
            completion_ids=ids,
            completion_mask=mask,
            logprobs=torch.zeros(ids.shape),
            finish_reasons=["eos"] * len(texts),
            n=n,
        )

    return sample


def test_model_critic_with_parseable_critiques_redirects_and_rewards_the_verifier():
    model, tok = build_tiny("tiny", seed=0)
    task = get_task("arithmetic")
    item = task.make_item([55, 187], ["+"])
    redirect = Redirect(critic="model", n_r=2, n_v=2)
    recipe = dataclasses.replace(get_recipe("stride"), group_size=4, redirect=redirect)
    maker = BatchMaker(task, recipe, HFEngine(model, tok), task.max_new_tokens, seed=0)
    batch = stride_batch(tok, item, [RIGHT, WRONG2, RIGHT, WRONG2], [1, 0, 1, 0], 4)
    # rows 1 and 3 failed; each gets n_v = 2 critiques: (GOOD, BAD) for row 1, (GOOD, GOOD) for row 3
    critiques = [GOOD, BAD, GOOD, GOOD]

    def reward(items, ro):  # the verifier's verdict on the redirections: unit 0's first continuation is right
        correct = torch.tensor([[1.0, 0.0, 0.0, 0.0]])
        return correct.clone(), correct, {}

    ctx = dataclasses.replace(maker.round_context("redirect", batch), sample=_scripted(tok, critiques), reward=reward)
    g, m = redirect.extend(ctx)
    # 3 parseable critiques -> 3 units; packed in whole groups of G / n_r = 2 units: 2 kept, 1 dropped
    assert m["stride/unparsed"] == 1.0 and m["stride/redirects"] == 2.0 and m["stride/dropped"] == 1.0
    # the batch: one redirected group (2 units x n_r = 2 rows) and one verifier group (the 4 critiques)
    assert len(g.items) == 2 and len(g.ro.texts) == 8 and g.ro.texts[4:] == critiques
    # verifier reward = 1[verdict == "incorrect"] (every critiqued row failed) + 0.5 * its unit's success;
    # the kept units are the critiques at verifier rows 0 (its redirection succeeded) and 2 (it did not);
    # row 3's second unit was dropped, row 1 (BAD) has no verdict
    want = [1.0 + 0.5, 0.0, 1.0, 1.0]
    assert g.rewards[1].tolist() == pytest.approx(want)
    assert m["stride/verdict_agreement"] == pytest.approx(3 / 4)
    assert m["stride/verifier_reward_mean"] == pytest.approx(sum(want) / 4)
    # the verifier group's advantages: the recipe's estimator over each failed row's n_v = 2 critiques
    adv = recipe.advantage(torch.tensor(want).view(2, 2)).reshape(-1)
    assert g.preset[1].tolist() == pytest.approx(adv.tolist())
