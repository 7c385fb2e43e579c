"""The rollout-strategy and second-round seams (parts/strategy.py): the batch maker calls the
recipe's one strategy and its rounds, and never asks which method they belong to."""

import dataclasses

import pytest
import torch

from reasonrl.loop.batch import BatchMaker
from reasonrl.parts import BeamSampling, GenRequest, Groups, PlainSampling, Steering
from reasonrl.recipes import get_recipe
from reasonrl.tasks import get_task

from helpers import text_rollouts
from fakes import FakeEngine, kind


class Tagged:
    """A strategy: plain samples of the fake engine, rows 0..G/2-1 of every group tagged context 1."""

    def __init__(self):
        self.requests = []

    def generate(self, req: GenRequest):
        self.requests.append(req)
        ro = req.engine.generate([it.prompt for it in req.items], req.group_size, req.sampling, seeds=req.seeds())
        G = req.group_size
        ro.context_ids = torch.tensor([int(j < G // 2) for _ in req.items for j in range(G)])
        return ro, {"tagged/rows": float(len(ro.texts))}


@dataclasses.dataclass(frozen=True)
class Spy:
    """A shaper part that records the contexts and kinds it is shown and leaves the advantages alone."""

    seen: list = dataclasses.field(default_factory=list)

    def shape_advantages(self, adv, ctx):
        self.seen.append((ctx.contexts.clone(), ctx.kinds.clone()))
        return adv, {"spy/calls": 1.0}


def test_a_recipe_may_have_one_strategy_only():
    st = Steering(positive=("a",), negative=("b",))
    with pytest.raises(ValueError, match="one rollout strategy.*Steering, BeamSampling"):
        dataclasses.replace(get_recipe("grpo"), steering=st, beam=BeamSampling())
    assert isinstance(get_recipe("grpo").strategy, PlainSampling)
    assert get_recipe("grpo").rounds == []


def test_the_batch_maker_calls_the_strategy_and_shapers_see_its_contexts():
    task, strategy, spy = get_task("arithmetic"), Tagged(), Spy()
    recipe = dataclasses.replace(get_recipe("grpo"), group_size=4, shapers=(spy.shape_advantages,))
    bm = BatchMaker(task, recipe, FakeEngine(task), budget=20, seed=0)
    bm.strategy = strategy  # what recipe.strategy returns for a part with generate()
    b = bm.make(3)
    req = strategy.requests[0]
    assert (req.first, req.group_size, len(req.items)) == (0, 4, 3)
    # one seed per item, keyed by its task position: item 1 alone (first=1) gets item 1's seed
    alone = GenRequest(
        items=req.items[1:2], first=1, engine=None, task=task, group_size=4, sampling=req.sampling, seed=0
    )
    assert alone.seeds() == req.seeds()[1:2] and req.seeds("x") != req.seeds()
    contexts, kinds = spy.seen[0]
    assert contexts.tolist() == [[1, 1, 0, 0]] * 3 and kinds.tolist() == [0, 0, 0]
    assert b.metrics["spy/calls"] == 1.0 and b.metrics["tagged/rows"] == 12.0  # the strategy's: 3 items x G=4


class Corrections:
    """A round: one extra group per first-round group that has a wrong answer, with advantages
    preset on row 0 (NaN elsewhere: the estimator's), weight 2 on every row, the loss on the
    second completion token onwards, and a counter kept in the part's state."""

    def extend(self, ctx):
        batch = ctx.batch
        G = batch.rewards.shape[1]
        picked = [i for i in range(len(batch.items)) if batch.correct[i].min() == 0]
        ctx.state["calls"] = ctx.state.get("calls", 0) + 1
        if not picked:
            return None, {"fix/groups": 0.0}
        items = [batch.items[i] for i in picked]
        ro = ctx.sample(items, [it.prompt for it in items], tag="fix", first=0)
        ro.train_mask = ro.completion_mask.clone()
        ro.train_mask[:, 0] = 0
        rewards, correct, _ = ctx.reward(items, ro)
        preset = torch.full((len(items), G), float("nan"))
        preset[:, 0] = 5.0
        return Groups(
            items,
            ro,
            rewards,
            correct,
            preset=preset,
            weight=torch.full((len(items) * G,), 2.0),
        ), {"fix/groups": float(len(items))}


def test_a_round_joins_its_groups_with_their_kind_preset_weight_and_mask():
    task = get_task("arithmetic")
    recipe = dataclasses.replace(get_recipe("dr_grpo"), group_size=4)  # advantage r - mean(r): easy to check
    bm = BatchMaker(task, _with_rounds(recipe, (Corrections(),)), FakeEngine(task), budget=20, seed=0)
    b = bm.make(6)
    first = [i for i, it in enumerate(b.items[:6]) if kind(it.prompt) != 0]  # groups with a wrong answer
    assert b.kinds.tolist() == [0] * 6 + [1] * len(first) and b.metrics["fix/groups"] == len(first)
    assert bm.parts.state("fix0") == {"calls": 1}
    G = 4
    for g in range(6, 6 + len(first)):
        rows = slice(g * G, (g + 1) * G)
        r = b.rewards[g]
        # row 0: the preset 5 x weight 2 = 10; rows 1..3: (r - mean r) x 2 (Dr. GRPO's estimator, weighted)
        expected = torch.cat([torch.tensor([10.0]), 2 * (r - r.mean())[1:]])
        assert torch.allclose(b.advantages[rows], expected)
        assert (
            b.loss_mask[rows][:, 0].eq(0).all()
            and b.loss_mask[rows][:, 1:].sum() == b.ro.completion_mask[rows][:, 1:].sum()
        )
    # first-round groups keep the estimator's advantages and their whole completions
    r0 = b.rewards[0]
    assert torch.allclose(b.advantages[:G], r0 - r0.mean()) and torch.equal(b.loss_mask[:G], b.ro.completion_mask[:G])


def _with_rounds(recipe, rounds):
    """A recipe whose ``rounds`` are the given objects, keyed fix0, fix1, ... (a subclass adds the property)."""

    class WithRounds(type(recipe)):
        @property
        def rounds(self):
            return [(f"fix{i}", r) for i, r in enumerate(rounds)]

    fields = {f.name: getattr(recipe, f.name) for f in dataclasses.fields(recipe)}
    return WithRounds(**fields)


def test_text_rollouts_helper_has_no_contexts():
    ro = text_rollouts(["1+1=?\n"], ["A:2", "A:3"], 2)
    assert ro.context_ids is None and ro.train_mask is None
