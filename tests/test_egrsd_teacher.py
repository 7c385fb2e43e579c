"""EGRSD with its real teacher pass (no stub): the batch maker's ``score_under`` on the tiny model.

Two facts the stubbed tests of test_selfteach.py cannot see:
- scored under the plain prompt, the policy's log-probs equal the rollout's behaviour log-probs at
  the recipe's sampling temperature (0.8), so EGRSD's ``q - s`` compares like with like (checked by
  scoring at T = 1 in ``BatchMaker.score_under``: the first assertion fails);
- the token weights equal ``A * min(|q - s|, 5) * (0.1 + 0.9 exp(-H))`` with q and H from a direct
  forward of the model under the template (checked by swapping the template's ``solution`` for
  the prompt in ``EGRSD.shape_advantages``: the weights differ).
"""

import dataclasses
import math

import pytest
import torch

from reasonrl.loop.batch import Batch, BatchMaker
from reasonrl.models import build_tiny
from reasonrl.parts.selfteach import EGRSD
from reasonrl.recipes import get_recipe
from reasonrl.rollout import HFEngine, SamplingParams
from reasonrl.tasks import get_task, take_items
from reasonrl.tasks.guidance import reference_solution

T = 0.8


@pytest.fixture(scope="module")
def setup():
    model, tok = build_tiny("tiny", seed=0)
    model.eval()
    task = get_task("arithmetic", max_digits=1)
    recipe = dataclasses.replace(get_recipe("egrsd"), group_size=2)
    assert recipe.sampling.temperature == T  # the recipe's sampling temperature is what the test pins
    engine = HFEngine(model, tok)
    items = take_items(task, "train", 1, seed=0)
    ro = engine.generate([items[0].prompt], 2, SamplingParams(temperature=T, max_new_tokens=6), seeds=[11])
    bm = BatchMaker(task, recipe, engine, budget=6, seed=0)
    b = Batch(
        items=items,
        ro=ro,
        rewards=torch.tensor([[1.0, 0.0]]),
        correct=torch.tensor([[1.0, 0.0]]),
        loss_mask=ro.completion_mask.clone(),
        kinds=torch.tensor([0]),
    )
    return model, tok, task, items[0], ro, bm, b


def test_plain_prompt_scores_equal_the_behaviour_logprobs_at_the_sampling_temperature(setup):
    _, _, _, item, ro, bm, _ = setup
    sc = bm.score_under([item.prompt] * 2, ro, torch.arange(2))
    mask = ro.completion_mask.float()
    assert mask.sum() >= 4
    torch.testing.assert_close(sc.logprobs * mask, ro.logprobs * mask, atol=2e-4, rtol=0)


@pytest.mark.parametrize("form", ["ratio", "abs"])
def test_egrsd_weights_with_the_real_teacher_pass(setup, form):
    model, tok, task, item, ro, bm, b = setup
    adv = torch.tensor([[1.0, -1.0]])
    out, m = EGRSD(magnitude=form).shape_advantages(adv, bm.batch_context(b, []))
    context = EGRSD().template.format(prompt=item.prompt, solution=reference_solution(task, item))
    for r, a in ((0, 1.0), (1, -1.0)):
        n = int(ro.completion_mask[r].sum())
        comp = ro.completion_ids[r, :n].tolist()
        ids = torch.tensor([tok(context, add_special_tokens=False)["input_ids"] + comp])
        with torch.no_grad():
            logp = (model(input_ids=ids).logits[0, -n - 1 : -1] / T).log_softmax(-1)  # (n, V)
        q = logp[torch.arange(n), comp]
        H = -(logp.exp() * logp).sum(-1)
        s = ro.logprobs[r, :n]
        mag = (q - s).exp().clamp(0.2, 5.0) if form == "ratio" else (q - s).abs().clamp(max=5.0)
        want = a * mag * (0.1 + 0.9 * torch.exp(-H))
        torch.testing.assert_close(out[0, r, :n], want.to(out.dtype), atol=2e-4, rtol=1e-3)
        assert float(out[0, r, n:].abs().sum()) == 0.0
    assert m["egrsd/rows"] == 2.0 and not math.isnan(m["egrsd/gate_mean"])
