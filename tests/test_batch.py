import dataclasses

import torch

from reasonrl.loop.batch import BatchMaker
from reasonrl.parts import GroupFilter
from reasonrl.recipes import get_recipe
from reasonrl.rewards import OverlongPenalty
from reasonrl.rollout import Rollouts
from reasonrl.tasks import get_task

from fakes import FakeEngine, kind


def test_group_filter_keeps_only_groups_whose_metric_varies():
    # spec (DAPO): groups [1,1,1,1], [0,0,0,0], [1,0,1,0] keep only the third
    correct = torch.tensor([[1.0, 1, 1, 1], [0, 0, 0, 0], [1, 0, 1, 0]])
    assert GroupFilter().keep(correct, correct).tolist() == [False, False, True]
    # all wrong, but an overlong penalty makes the shaped rewards differ: the accuracy filter drops
    # the group (nothing to learn about correctness), a reward filter would keep it
    correct, shaped = torch.zeros(1, 4), torch.tensor([[0.0, -0.5, 0.0, 0.0]])
    assert GroupFilter("accuracy").keep(shaped, correct).tolist() == [False]
    assert GroupFilter("reward").keep(shaped, correct).tolist() == [True]


def maker(recipe, task=None):
    task = task or get_task("arithmetic")
    return BatchMaker(task, recipe, FakeEngine(task), budget=20, seed=0), task


def test_dynamic_sampling_refills_with_mixed_groups_only():
    recipe = dataclasses.replace(get_recipe("grpo"), group_size=4, group_filter=GroupFilter(max_rounds=5))
    bm, task = maker(recipe)
    batch = bm.make(6)
    stream = task.iter_items("train", 0)
    drawn = [next(stream) for _ in range(bm.items_drawn)]
    expected = [it.prompt for it in drawn if kind(it.prompt) == 2][:6]
    assert [it.prompt for it in batch.items] == expected  # kept in draw order, exactly 6
    assert batch.rewards.shape == (6, 4) and (batch.correct.sum(-1) == 2).all()
    m = batch.metrics
    assert m["dynamic/prompts_generated"] == bm.items_drawn == 6 * m["dynamic/rounds"] == 6 * bm.engine.calls
    assert m["dynamic/groups_kept"] == 6 and m["dynamic/groups_dropped"] == bm.items_drawn - 6
    # step statistics describe everything generated, not only the kept groups
    all_right = sum(kind(it.prompt) == 0 for it in drawn) + 0.5 * sum(kind(it.prompt) == 2 for it in drawn)
    assert abs(m["accuracy"] - all_right / len(drawn)) < 1e-6  # float32 means
    # GRPO advantages of a [1,0,1,0] group: mean 0.5, unbiased std 0.57735 -> +-0.866025
    assert torch.allclose(batch.advantages.view(6, 4).abs(), torch.full((6, 4), 0.866025), atol=1e-5)


def test_dynamic_sampling_gives_up_after_max_rounds():
    recipe = dataclasses.replace(get_recipe("grpo"), group_size=4, group_filter=GroupFilter(max_rounds=1))
    bm, _ = maker(recipe)
    batch = bm.make(50)  # one round of 50 prompts cannot give 50 mixed groups
    assert bm.engine.calls == 1 and batch.metrics["dynamic/batch_short"] == 1.0
    assert 0 < len(batch.items) < 50 and len(batch.ro.texts) == 4 * len(batch.items)


def test_overlong_filtering_masks_truncated_rows_and_the_penalty_uses_the_budget():
    recipe = dataclasses.replace(
        get_recipe("grpo"), group_size=4, mask_truncated=True, extra_rewards=((OverlongPenalty(cache_len=20), 1.0),)
    )
    bm, _ = maker(recipe)
    batch = bm.make(8)
    truncated = torch.tensor([r == "length" for r in batch.ro.finish_reasons])
    assert truncated.any()
    assert (batch.loss_mask[truncated] == 0).all() and (
        batch.loss_mask[~truncated] == batch.ro.completion_mask[~truncated]
    ).all()
    # budget 20, cache 20: free zone is 0 tokens, so a completion of L tokens is penalised -L/20
    lengths = batch.ro.lengths.float().view(-1, 4)
    assert torch.allclose(batch.rewards, batch.correct - lengths / 20)


def test_corr_po_bonus_from_rollout_token_statistics_by_hand():
    # spec vector, one response of three tokens:
    #   p=[.5,.5], y=0: H=0.693147, g=sqrt(1-1+0.5)=0.707107
    #   p=[.9,.1], y=0: H=0.325083, g=sqrt(1-1.8+0.82)=0.141421
    #   p=[.99,.01], y=1: H=0.056002, g=sqrt(1-0.02+0.9802)=1.400071
    # Pearson(H, g) = -0.472797 -> inversion bonus -0.1 * c = +0.0472797
    import math

    from reasonrl.parts import CorrBonus

    logp = torch.tensor([[math.log(0.5), math.log(0.9), math.log(0.01), 0.0]])  # last column: padding
    ent = torch.tensor([[0.693147, 0.325083, 0.056002, 0.0]])
    p2 = torch.tensor([[0.5, 0.82, 0.9802, 0.0]])
    mask = torch.tensor([[1, 1, 1, 0]])
    ro = Rollouts(
        prompts=["p"],
        texts=["t"],
        prompt_ids=torch.ones(1, 1, dtype=torch.long),
        prompt_mask=torch.ones(1, 1, dtype=torch.long),
        completion_ids=torch.ones(1, 4, dtype=torch.long),
        completion_mask=mask,
        logprobs=logp,
        finish_reasons=["eos"],
        entropies=ent,
        sum_p2=p2,
    )
    out = CorrBonus(coef=0.1).score(["p"], ["t"], rollouts=ro)
    assert abs(out.values[0] - 0.0472797) < 1e-5 and abs(out.metrics["corr/mean"] + 0.472797) < 1e-5
    assert abs(CorrBonus(coef=0.1, sign="alignment").score(["p"], ["t"], rollouts=ro).values[0] + 0.0472797) < 1e-5
