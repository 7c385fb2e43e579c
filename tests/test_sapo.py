"""SAPO (arXiv 2605.17648): the SID recommendation task, step parsing/rewards and step advantages."""

import json
import math

import pytest
import torch

from reasonrl.advantages.steps import char_spans_to_token_steps, step_advantages, token_step_advantages
from reasonrl.rewards.steps import SidExact, SidLevels, parse_steps, parsed_sid, split_sid, step_rewards
from reasonrl.tasks import take_items
from reasonrl.tasks.recommend import RecommendTask, rule_step

TARGET = ["a5", "b9", "c2"]


def completion(a: str, b: str, c: str) -> str:
    return f"a:55>{a}\nb:b8>{b}\nc:a5c1>{c}"


# the spec's rollouts (5,9,2), (5,9,7), (5,1,2), (3,9,2) against the target (5,9,2)
SPEC_ROLLOUTS = [
    completion("a5", "b9", "c2"),
    completion("a5", "b9", "c7"),
    completion("a5", "b1", "c2"),
    completion("a3", "b9", "c2"),
]


def char_offsets(text: str) -> list[tuple[int, int]]:
    """A character tokenizer's offsets (like the tiny model's): one token per character."""
    return [(i, i + 1) for i in range(len(text))]


def rewards_of(completions, target, mode):
    return torch.tensor(
        [[step_rewards([s.sid for s in parse_steps(c, len(target))], target, mode) for c in completions]]
    )  # (1, G, K)


# ---- step parsing ------------------------------------------------------------------------------


def test_parse_steps_spans_and_tokens():
    text = "a:55>a5\nb:b8>b9\n  c:a5c1>c2 \nextra>a1"
    steps = parse_steps(text, 3)
    assert [s.sid for s in steps] == ["a5", "b9", "c2"]
    # line 1 is chars 0..6, line 2 starts at 8; line 3 starts at 16, its text after 2 spaces at 18
    assert [s.span for s in steps] == [(0, 7), (8, 15), (18, 27)]
    assert text[18:27] == "c:a5c1>c2"
    assert parsed_sid(text, 3) == "a5b9c2"  # lines after step K are ignored


def test_malformed_rollout_has_missing_and_unparsed_steps():
    steps = parse_steps("a:55>a5\nb:b8>??", 3)
    assert [s.sid for s in steps] == ["a5", None, None]
    assert steps[1].span == (8, 15)  # an unparseable SID token still owns its line
    assert steps[2].span is None and steps[2].start is None  # missing step owns nothing
    assert parsed_sid("a:55>a5\nb:b8>??", 3) is None
    assert step_rewards([s.sid for s in steps], TARGET) == [1.0, 0.0, 0.0]
    assert [s.sid for s in parse_steps("", 2)] == [None, None]
    with pytest.raises(ValueError, match="K"):
        parse_steps("a:1>a1", 0)


def test_split_sid_rejects_malformed():
    assert split_sid("a3b10c4") == ["a3", "b10", "c4"]
    for bad in ("", "a3b", "A3", "a3 b1", 7):
        with pytest.raises(ValueError):
            split_sid(bad)


# ---- step rewards ------------------------------------------------------------------------------


def test_spec_position_match_rewards():
    r = rewards_of(SPEC_ROLLOUTS, TARGET, "position_match")[0]  # (G, K)
    assert r[:, 0].tolist() == [1, 1, 1, 0]
    assert r[:, 1].tolist() == [1, 1, 0, 1]
    assert r[:, 2].tolist() == [1, 0, 1, 1]


def test_prefix_match_rewards_and_errors():
    # (5,9,7): first two match -> [1,1,0]; (5,1,2): the miss at 2 zeroes 3 -> [1,0,0]; (3,..) -> 0s
    r = rewards_of(SPEC_ROLLOUTS, TARGET, "prefix_match")[0]
    assert r.tolist() == [[1, 1, 1], [1, 1, 0], [1, 0, 0], [0, 0, 0]]
    with pytest.raises(ValueError, match="position_match"):
        step_rewards(["a5"], ["a5"], mode="exact")
    with pytest.raises(ValueError, match="levels"):
        step_rewards(["a5", "b9"], TARGET)


def test_sid_rewards_and_level_metrics():
    comps = [SPEC_ROLLOUTS[0], SPEC_ROLLOUTS[1], "a:55>a5\nb:1>"]
    answers = ["a5b9c2"] * 3
    exact = SidExact().score([""] * 3, comps, answer=answers, meta=[{}] * 3)
    assert exact.values == [1.0, 0.0, 0.0]
    assert exact.metrics["reward/sid_exact/unparsed_frac"] == pytest.approx(1 / 3)
    levels = SidLevels().score([""] * 3, comps, answer=answers, meta=[{}] * 3)
    # matches: [1,1,1], [1,1,0], [1,0,0] -> means 1, 2/3, 1/3; level accuracies 3/3, 2/3, 1/3
    assert levels.values == pytest.approx([1.0, 2 / 3, 1 / 3])
    assert levels.metrics["reward/sid_levels/level_1"] == pytest.approx(1.0)
    assert levels.metrics["reward/sid_levels/level_2"] == pytest.approx(2 / 3)
    assert levels.metrics["reward/sid_levels/level_3"] == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="mode"):
        SidLevels(mode="nope")


# ---- step advantages ---------------------------------------------------------------------------


def test_spec_step_advantages():
    adv = step_advantages(rewards_of(SPEC_ROLLOUTS, TARGET, "position_match"))[0]  # (G, K)
    # each step: mean 0.75, unbiased std 0.5 -> (1 - .75)/.5 = .5 and (0 - .75)/.5 = -1.5
    assert adv[:, 0].tolist() == pytest.approx([0.5, 0.5, 0.5, -1.5], abs=1e-5)
    assert adv[:, 1].tolist() == pytest.approx([0.5, 0.5, -1.5, 0.5], abs=1e-5)
    assert adv[:, 2].tolist() == pytest.approx([0.5, -1.5, 0.5, 0.5], abs=1e-5)


def test_prefix_match_step_advantages_by_hand():
    adv = step_advantages(rewards_of(SPEC_ROLLOUTS, TARGET, "prefix_match"))[0]
    # step 2 rewards [1,1,0,0]: mean .5, unbiased var (4 * .25)/3 = 1/3 -> +-.5/sqrt(1/3) = +-0.8660
    # step 3 rewards [1,0,0,0]: mean .25, var (.5625 + 3 * .0625)/3 = .25 -> [1.5, -.5, -.5, -.5]
    assert adv[:, 0].tolist() == pytest.approx([0.5, 0.5, 0.5, -1.5], abs=1e-5)
    assert adv[:, 1].tolist() == pytest.approx([0.8660, 0.8660, -0.8660, -0.8660], abs=1e-4)
    assert adv[:, 2].tolist() == pytest.approx([1.5, -0.5, -0.5, -0.5], abs=1e-5)


def test_own_example_zero_variance_step_g3():
    # G=3, target (a1,b2,c3); rollouts (a1,b2,c3), (a1,b0,c3), (a1,b2,c0).
    # step 1: all correct -> zero variance -> exactly 0.
    # step 2: [1,0,1]: mean 2/3, deviations (1/3, -2/3, 1/3); unbiased var (1/9+4/9+1/9)/2 = 1/3,
    #   std 0.57735 -> (0.57735, -1.15470, 0.57735). step 3: [1,1,0] likewise permuted.
    # biased (N) std: var (6/9)/3 = 2/9, std 0.47140 -> 1/3 / 0.4714 = 0.70711, -2/3 / 0.4714 = -1.41421
    r = torch.tensor([[[1, 1, 1], [1, 0, 1], [1, 1, 0]]])  # (1, 3, 3) ints are accepted
    adv = step_advantages(r)[0]
    assert adv[:, 0].tolist() == [0.0, 0.0, 0.0]
    assert adv[:, 1].tolist() == pytest.approx([0.57735, -1.15470, 0.57735], abs=1e-4)
    assert adv[:, 2].tolist() == pytest.approx([0.57735, 0.57735, -1.15470], abs=1e-4)
    biased = step_advantages(r, unbiased=False)[0]
    assert biased[:, 1].tolist() == pytest.approx([0.70711, -1.41421, 0.70711], abs=1e-4)
    assert step_advantages(torch.ones(2, 1, 3)).abs().sum() == 0  # G = 1: nothing to compare
    with pytest.raises(ValueError, match=r"\(B, G, K\)"):
        step_advantages(torch.ones(4, 3))


def spec_token_advantages(outside="zero", outcome_adv=None):
    steps = [parse_steps(c, 3) for c in SPEC_ROLLOUTS]
    T = max(len(c) for c in SPEC_ROLLOUTS) + 1  # +1: an EOS slot outside every span
    offsets = [char_offsets(c) + [(0, 0)] for c in SPEC_ROLLOUTS]
    token_step = char_spans_to_token_steps([[s.span for s in row] for row in steps], offsets, T)  # (4, T)
    step_adv = step_advantages(rewards_of(SPEC_ROLLOUTS, TARGET, "position_match"))[0]  # (4, 3)
    return steps, token_step, token_step_advantages(step_adv, token_step, outside, outcome_adv)


def test_spec_rollout_2_token_advantages_and_blocks_share_the_step_value():
    steps, token_step, adv = spec_token_advantages()
    text, row = SPEC_ROLLOUTS[1], adv[1]  # rollout 2: (5, 9, 7)
    for s, want in zip(steps[1], [0.5, 0.5, -1.5]):
        block = row[s.start : s.end]
        # every thinking-block character and the SID token's characters carry the step's value
        assert block.tolist() == pytest.approx([want] * (s.end - s.start), abs=1e-5)
        assert row[s.end - 2 : s.end].tolist() == pytest.approx([want, want], abs=1e-5)  # "b9" etc.
    newlines = [i for i, ch in enumerate(text) if ch == "\n"]
    assert row[newlines].tolist() == [0.0, 0.0]  # outside every span
    assert row[len(text)].item() == 0.0  # the EOS slot (zero-width offsets)
    assert token_step[1, newlines].tolist() == [-1, -1]


def test_outside_tokens_get_the_outcome_advantage_on_request():
    # outcome GRPO: exact match [1,0,0,0] -> mean .25, unbiased std .5 -> [1.5, -.5, -.5, -.5]
    outcome = torch.tensor([1.5, -0.5, -0.5, -0.5])
    steps, token_step, adv = spec_token_advantages("outcome", outcome)
    text = SPEC_ROLLOUTS[1]
    newline = text.index("\n")
    assert adv[1, newline].item() == pytest.approx(-0.5)
    assert adv[1, len(text)].item() == pytest.approx(-0.5)
    assert adv[0, 0].item() == pytest.approx(0.5, abs=1e-5)  # inside a step the step value still wins
    with pytest.raises(ValueError, match="outcome_adv"):
        token_step_advantages(torch.zeros(4, 3), token_step, "outcome", None)
    with pytest.raises(ValueError, match="outcome_adv"):
        token_step_advantages(torch.zeros(4, 3), token_step, "zero", outcome)
    with pytest.raises(ValueError, match="zero"):
        token_step_advantages(torch.zeros(4, 3), token_step, "inside")


def test_malformed_rollout_tokens_missing_step_has_no_tokens():
    text = "a:55>a5\nb:b8>??"  # step 2 unparseable, step 3 missing
    steps = parse_steps(text, 3)
    token_step = char_spans_to_token_steps([[s.span for s in steps]], [char_offsets(text)], len(text) + 2)
    assert token_step[0].tolist() == [0] * 7 + [-1] + [1] * 7 + [-1, -1]
    step_adv = torch.tensor([[0.5, -1.5, 9.0]])  # step 3's value must reach no token
    adv = token_step_advantages(step_adv, token_step)
    assert adv[0].tolist() == [0.5] * 7 + [0.0] + [-1.5] * 7 + [0.0, 0.0]


def test_multi_char_tokens_straddling_spans():
    # spans: step 0 = chars [0, 5), step 1 = [6, 10); char 5 is a newline between them
    spans = [[(0, 5), (6, 10)]]
    # (0,3) in step 0; (3,7) straddles step 0, the newline and step 1 -> earliest overlapped = 0;
    # (7,10) step 1; (10,11) after every span; (0,0) zero-width special token
    assert char_spans_to_token_steps(spans, [[(0, 3), (3, 7), (7, 10), (10, 11), (0, 0)]], 6)[0].tolist() == [
        0,
        0,
        1,
        -1,
        -1,
        -1,
    ]
    # a token that starts on the newline and reaches into step 1 belongs to step 1
    assert char_spans_to_token_steps(spans, [[(0, 5), (5, 8)]], 2)[0].tolist() == [0, 1]
    with pytest.raises(ValueError, match="ordered and disjoint"):
        char_spans_to_token_steps([[(0, 5), (3, 8)]], [[(0, 1)]], 2)
    with pytest.raises(ValueError, match="T=1"):
        char_spans_to_token_steps(spans, [[(0, 1), (1, 2)]], 1)
    with pytest.raises(ValueError, match=r"\[-1, 2\]"):
        token_step_advantages(torch.zeros(1, 3), torch.tensor([[3]]))


# ---- the task ----------------------------------------------------------------------------------


def test_rules_by_hand():
    task = RecommendTask()
    # coarse codes 3,5,3,1,6,3 -> 3 (three times); its group: a3b1c4, a3b2c7, a3b5c3.
    # level 2 reads the group's last item (b5), level 3 its first item (c4); shift 0 copies them
    hist = [[3, 1, 4], [5, 6, 0], [3, 2, 7], [1, 4, 1], [6, 0, 2], [3, 5, 3]]
    item = task.make_item(hist)
    assert item.prompt == "h:a3b1c4,a5b6c0,a3b2c7,a1b4c1,a6b0c2,a3b5c3\n"
    assert item.demo == "a:353163>a3\nb:a3b5>b5\nc:a3c4>c4"
    assert item.answer == "a3b5c4" and item.meta["sid"] == ["a3", "b5", "c4"]
    assert task.verify(item.demo, item.answer, item.meta) == 1.0
    assert task.verify("a:353163>a3\nb:a3b5>b5\nc:a3c4>c3", item.answer, item.meta) == 0.0
    assert task.extract_answer("a:1>a1\nb:2>b2") is None
    # level accuracies over [demo, wrong fine code, two lines only]: 3/3, 3/3, 1/3 (only the demo has c4)
    outs = [item.demo, "a:353163>a3\nb:a3b5>b5\nc:a3c4>c3", "a:353163>a3\nb:a3b5>b5"]
    assert task.diagnostics(outs, [item.meta] * 3, [1.0, 0.0, 0.0]) == pytest.approx(
        {"level_1_acc": 1.0, "level_2_acc": 1.0, "level_3_acc": 1 / 3}
    )
    # K=4, shift 3 over 8 codes: level 4 reads the group's last item again (d-code), each +3 mod 8
    # history a2b7c1d6, a0b0c0d0, a2b4c5d7: group a2 = items 1 and 3
    # b: last b4 -> 7; c: first c1 -> 4; d: last d7 -> 10 mod 8 = 2
    wide = RecommendTask(levels=4, shift=3, history=3).make_item([[2, 7, 1, 6], [0, 0, 0, 0], [2, 4, 5, 7]])
    assert wide.demo == "a:202>a2\nb:a2b4>b7\nc:a2c1>c4\nd:a2d7>d2" and wide.answer == "a2b7c4d2"
    with pytest.raises(ValueError, match="unique"):
        rule_step([[1, 0], [2, 0]], 0, 8)


@pytest.mark.parametrize(
    "options", [{}, {"levels": 4, "codes": 5, "history": 5, "max_mode": None, "shift": 1}, {"rule_noise": 0.5}]
)
def test_every_demo_verifies_and_fits(options):
    task = RecommendTask(**options)
    for item in take_items(task, "train", 200, seed=1):
        assert task.verify(item.demo, item.answer, item.meta) == 1.0
        assert len(item.demo) + 1 <= task.max_new_tokens and len(item.prompt) <= 150
        assert item.prompt.isascii() and item.demo.isascii()
        assert len(item.meta["sid"]) == task.config.levels
        json.dumps(item.meta)


def test_rule_noise_breaks_the_rule():
    task = RecommendTask(rule_noise=1.0)
    for item in take_items(task, "train", 50, seed=0):
        # every level's code differs from what its own thinking block computes
        for line in item.demo.split("\n")[1:]:
            read, out = int(line.split(">")[0][-1]), int(line[-1])
            assert out != read  # shift 0: the rule copies the code it reads


def test_splits_disjoint_and_options_checked():
    task = RecommendTask()
    test = {it.key for it in take_items(task, "test", 200, seed=0)}
    train = {it.key for it in take_items(task, "train", 2000, seed=0)}
    assert not test & train
    with pytest.raises(ValueError, match="valid"):
        RecommendTask(depth=3)
    with pytest.raises(ValueError, match="codes"):
        RecommendTask(codes=11)
    with pytest.raises(ValueError, match="shift"):
        RecommendTask(shift=8)
    with pytest.raises(ValueError, match="unique most"):
        RecommendTask(codes=2, history=6, max_mode=3)


def write_rows(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return str(path)


def test_user_data_rows(tmp_path):
    rows = [
        {"history": ["a3b1c4", "a3b6c0", "a5b2c7"], "target": "a3b6c4", "demo": "a:335>a3\nb:a3b6>b6\nc:a3c4>c4"},
        {"history": ["a12b0c1"], "target": "a12b1c1"},
    ]
    task = RecommendTask(
        data=write_rows(tmp_path / "u.jsonl", rows), test_data=write_rows(tmp_path / "t.jsonl", rows[1:])
    )
    stream = task.iter_items("train", 0)
    assert sorted(next(stream).answer for _ in range(2)) == ["a12b1c1", "a3b6c4"]  # one epoch, each row once
    first = next(it for it in take_items(task, "train", 2) if it.answer == "a3b6c4")
    assert first.prompt == "h:a3b1c4,a3b6c0,a5b2c7\n" and first.meta["sid"] == ["a3", "b6", "c4"]
    assert task.verify(first.demo, first.answer, first.meta) == 1.0
    assert next(task.iter_items("test", 0)).answer == "a12b1c1"
    assert task.max_new_tokens >= len(rows[0]["demo"]) + 1


@pytest.mark.parametrize(
    "row,match",
    [
        ({"history": ["a3b1"], "target": "a3b3c1"}, r"history\[0\].*3 levels"),
        ({"history": ["a3b1c4"], "target": "b3a3c1"}, "field 'target'.*letters"),
        ({"history": [], "target": "a3b3c1"}, "non-empty list"),
        ({"history": ["a3b1c4"], "target": "a3b3c1", "demo": "a:3>a3\nb:b1>b2\nc:a3c4>c5"}, "field 'demo'"),
        ({"history": ["a3b1c4"], "answer": "a3b3c1"}, "needs fields"),
    ],
)
def test_user_data_validation(tmp_path, row, match):
    path = write_rows(tmp_path / "bad.jsonl", [{"history": ["a1b1c1"], "target": "a1b2c2"}, row])
    with pytest.raises(ValueError, match=f"row 1: .*{match}"):
        RecommendTask(data=path)


def test_finite_advantages_on_task_rollouts():
    # end to end on a task item: its demo vs a copy with a wrong fine code. Steps 1-2 agree -> 0;
    # step 3 rewards [1, 0]: mean .5, unbiased std sqrt(.5) -> -.5 / sqrt(.5) = -0.7071 for the copy
    task = RecommendTask()
    item = take_items(task, "train", 1, seed=4)[0]
    bad = item.demo[:-1] + str((int(item.demo[-1]) + 1) % 8)
    adv = step_advantages(rewards_of([item.demo, bad], item.meta["sid"], "position_match"))
    assert torch.isfinite(adv).all()
    assert adv[0, :, :2].abs().sum() == 0 and adv[0, 1, 2].item() == pytest.approx(-0.5 / math.sqrt(0.5), abs=1e-4)
