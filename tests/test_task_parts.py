"""Parts for task-bound methods: SAPO's step credit, CodeThinker's beam sampler, the task-reward weight."""

import dataclasses
import random

import pytest
import torch

from helpers import batch_context, text_rollouts
from reasonrl.errors import UserError
from reasonrl.rollout.beam import beam_rollout, pick_branches
from reasonrl.parts import BeamSampling, StepCredit
from reasonrl.rollout import HFEngine, SamplingParams
from reasonrl.tasks import Item
from reasonrl.config.validate import check_part


class LineSteps:
    """A fake task: each line of a completion is one step, rewarded 1 if its text equals the target's."""

    name = "lines"

    def step_rewards(self, text, meta, mode):
        spans, rewards, pos = [], [], 0
        lines = text.split("\n")
        for k, want in enumerate(meta["target"]):
            if k < len(lines):
                spans.append((pos, pos + len(lines[k])))
                rewards.append(float(lines[k] == want))
                pos += len(lines[k]) + 1
            else:
                spans.append(None)
                rewards.append(0.0)
        return spans, rewards


def _ctx(texts, G, target):
    ro = text_rollouts(["p"] * (len(texts) // G), texts, G)
    items = [Item(key=str(i), prompt="p", answer="", meta={"target": target}) for i in range(len(texts) // G)]
    offsets = lambda r: [(i, i + 1) for i in range(len(texts[r]))]  # noqa: E731 - one character per token
    return batch_context(task=LineSteps(), rollouts=ro, items=items, char_offsets=offsets)


def test_step_credit_gives_each_step_its_own_group_advantage():
    # the spec's example: target (5, 9, 2); rollouts (5,9,2) (5,9,7) (5,1,2) (3,9,2), one step per line.
    # Each step's rewards have mean .75 and unbiased std .5: a hit gets (1-.75)/.5 = .5, a miss -1.5.
    texts = ["5\n9\n2", "5\n9\n7", "5\n1\n2", "3\n9\n2"]
    adv, metrics = StepCredit()(torch.zeros(1, 4), _ctx(texts, 4, ["5", "9", "2"]))
    assert adv.shape == (1, 4, 5)
    # rollout 2: +.5 on steps 1-2, -1.5 on step 3; the newlines belong to no step -> 0
    assert adv[0, 1].tolist() == pytest.approx([0.5, 0.0, 0.5, 0.0, -1.5], abs=1e-5)
    assert adv[0, 3].tolist() == pytest.approx([-1.5, 0.0, 0.5, 0.0, 0.5], abs=1e-5)
    assert metrics["steps/reward_level0"] == pytest.approx(0.75) and metrics["steps/token_coverage"] == pytest.approx(
        0.6
    )


def test_step_credit_outcome_option_and_a_missing_step():
    # G=2, target (a, b): rollout 0 "a\nb" hits both, rollout 1 "a" stops after step 1 (step 2 missing -> 0).
    # step 1 rewards [1, 1]: constant -> 0; step 2 [1, 0]: mean .5, unbiased std sqrt(.5) = .70711
    # -> +-.5/.70711 = +-.70711. With outside="outcome" the newline of rollout 0 gets its sequence advantage 2.0.
    texts = ["a\nb", "a"]
    seq = torch.tensor([[2.0, -2.0]])
    adv, _ = StepCredit(outside="outcome")(seq, _ctx(texts, 2, ["a", "b"]))
    assert adv[0, 0].tolist() == pytest.approx([0.0, 2.0, 0.70711], abs=1e-4)
    assert adv[0, 1, 0].item() == pytest.approx(0.0, abs=1e-6)  # its only token is step 1's


def test_step_credit_needs_a_segmenting_task():
    ctx = dataclasses.replace(_ctx(["a"], 1, ["a"]), task=type("Plain", (), {"name": "plain"})())
    with pytest.raises(ValueError, match="step_rewards"):
        StepCredit()(torch.zeros(1, 1), ctx)


def test_beam_plan_and_branch_choice_by_hand():
    assert BeamSampling().plan(8) == (4, 2)  # B0 = G/2, k = min(k_max, G - B0)
    assert BeamSampling(first_frac=0.75, k_max=4).plan(4) == (3, 1)
    assert BeamSampling(first_frac=1.0).plan(4) == (4, 0)
    # scores [.2, .9, .5, .9]: the two best are samples 1 and 3 (a tie goes to the earlier), round-robin
    assert pick_branches([0.2, 0.9, 0.5, 0.9], 4, 2) == [1, 3, 1, 3]
    assert pick_branches([0.2, 0.9, 0.5], 3, 5) == [1, 2, 0]
    with pytest.raises(UserError, match="'beam.first_frac' = 0.0"):
        check_part(BeamSampling(first_frac=0.0))


class CutAtTwo:
    """Fake task: cut every completion after its second character; longer completions score higher."""

    name = "cut"

    def branch_point(self, text, meta, rng):
        return 2, float(len(text))


def test_beam_rollout_keeps_the_budget_and_shares_prefixes(sharp_tiny):
    model, tok = sharp_tiny
    engine, sp = HFEngine(model, tok), SamplingParams(temperature=1.0, max_new_tokens=16)
    items = [Item(key=p, prompt=p, answer="") for p in ("12+34=?\n", "5+7=?\n")]
    g = torch.Generator().manual_seed(0)
    ro = beam_rollout(engine, CutAtTwo(), items, 8, sp, BeamSampling().plan(8), g, random.Random(0))
    assert len(ro.texts) == 16 and ro.n == 8 and ro.extras["metrics"]["beam/completions_per_prompt"] == 8
    for i in range(2):
        first = list(range(i * 8, i * 8 + 4))
        lengths = [int(ro.lengths[r]) for r in first]
        best = sorted(range(4), key=lambda j: (-lengths[j], j))[:2]  # the two longest originals are the sources
        for b, r in enumerate(range(i * 8 + 4, i * 8 + 8)):
            src = first[best[b % 2]]
            cut = min(2, lengths[best[b % 2]] - 1)
            assert ro.completion_ids[r, :cut].tolist() == ro.completion_ids[src, :cut].tolist()
            assert ro.prompts[r] == ro.prompts[src]
    assert int(ro.lengths.max()) <= 16
