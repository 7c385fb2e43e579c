"""D2Evo's pure maths (data/d2evo.py) and the arithmetic task's check of generated problems, by hand.

The spec's unit examples (shared/specs/distill-and-data.md section 11 (d)) first, then each function
with numbers worked out in the comments.
"""

import pytest
import torch

from reasonrl.data.d2evo import (
    accepted,
    anchor_indices,
    char_ngrams,
    in_band,
    judge,
    majority_label,
    ngram_similarity,
    pass_rates,
    pseudo_valid,
    questioner_rewards,
    solver_pool,
)
from reasonrl.tasks import ArithmeticTask
from reasonrl.tasks.arithmetic import ArithmeticConfig, generated_problem


# ------------------------------------------------------------------ the spec's examples (section 11 (d))


def test_spec_anchor_example():
    # pool pass rates [0, 0.25, 0.5, 1.0], band [0.2, 0.8]: 0.25 and 0.5 are in, 0 and 1 are out
    assert anchor_indices(torch.tensor([0.0, 0.25, 0.5, 1.0])) == [1, 2]


def test_spec_questioner_reward_examples():
    # p_hat 0.5, sim 0.2: 1 - 2|0.5 - 0.5| - 0.5 * 0.2 = 1 - 0 - 0.1 = 0.9
    # p_hat 1.0, sim 0:   1 - 2|1.0 - 0.5| - 0.5 * 0   = 1 - 1 - 0   = 0
    r = questioner_rewards(torch.tensor([True, True]), torch.tensor([0.5, 1.0]), torch.tensor([0.2, 0.0]))
    assert r.tolist() == pytest.approx([0.9, 0.0])


def test_spec_majority_example():
    # answers [3, 3, 5, 3]: label 3, 3 of 4 votes -> p_hat 0.75
    assert majority_label(["3", "3", "5", "3"]) == ("3", 0.75)


# ------------------------------------------------------------------ our own


def test_pass_rates_are_the_mean_correctness():
    # [1,0,0,0] -> 0.25, [1,1,1,1] -> 1, [0,0,0,0] -> 0
    got = pass_rates(torch.tensor([[1, 0, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]]))
    assert got.tolist() == [0.25, 1.0, 0.0]


def test_band_includes_both_ends_and_moves_with_its_knobs():
    p = torch.tensor([0.19, 0.2, 0.8, 0.81])
    assert in_band(p).tolist() == [False, True, True, False]
    assert anchor_indices(p, lo=0.0, hi=0.5) == [0, 1]
    assert anchor_indices(torch.tensor([0.0, 1.0])) == []  # nothing of medium difficulty


def test_invalid_questions_get_minus_one_whatever_their_scores():
    # invalid rows ignore p_hat and sim; valid: p_hat 0.25, sim 0.5: 1 - 0.5 - 0.25 = 0.25
    r = questioner_rewards(
        torch.tensor([False, True, False]), torch.tensor([0.5, 0.25, 0.0]), torch.tensor([0.0, 0.5, 1.0])
    )
    assert r.tolist() == pytest.approx([-1.0, 0.25, -1.0])
    # other knobs: p* 0.75, eta 1, invalid -2: p_hat 0.25, sim 0.5 -> 1 - 2 * 0.5 - 0.5 = -0.5
    r = questioner_rewards(
        torch.tensor([True, False]),
        torch.tensor([0.25, 0.0]),
        torch.tensor([0.5, 0.0]),
        p_star=0.75,
        eta=1.0,
        invalid=-2.0,
    )
    assert r.tolist() == pytest.approx([-0.5, -2.0])


def test_majority_share_counts_unanswered_samples_and_ties_go_first_seen():
    # [None, "4", "4", None, "7"]: "4" has 2 of 5 samples -> 0.4 (None never votes but counts)
    assert majority_label([None, "4", "4", None, "7"]) == ("4", 0.4)
    # a tie 2-2: the answer seen first wins
    assert majority_label(["7", "4", "4", "7"]) == ("7", 0.5)
    assert majority_label([None, None]) == (None, 0.0)


def test_validity_floor():
    # 0.3 is enough, 0.25 is not, no label never is
    assert pseudo_valid("3", 0.3) and not pseudo_valid("3", 0.25) and not pseudo_valid(None, 1.0)
    assert pseudo_valid("3", 0.25, floor=0.25)


def test_char_trigram_similarity_by_hand():
    # "347+85": {347, 47+, 7+8, +85}; "347+12": {347, 47+, 7+1, +12}: 2 shared of 6 -> 1/3
    assert char_ngrams("347+85") == {"347", "47+", "7+8", "+85"}
    assert ngram_similarity("347+85", "347+12") == pytest.approx(1 / 3)
    assert ngram_similarity("347+85", "347+85") == 1.0
    assert ngram_similarity("7+5", "347+85") == 0.0  # {7+5} shares nothing
    # n = 2: {34, 47, 7+, +8, 85} vs {34, 47, 7+, +1, 12}: 3 of 7
    assert ngram_similarity("347+85", "347+12", n=2) == pytest.approx(3 / 7)
    # shorter than n: one gram, the whole text; empty: none (similarity 0)
    assert char_ngrams("1+", 3) == {"1+"} and char_ngrams("  ", 3) == frozenset()
    assert ngram_similarity("", "") == 0.0
    with pytest.raises(ValueError, match="n-gram"):
        char_ngrams("abc", 0)


def test_accepted_needs_validity_and_the_band():
    # valid & in band; valid but too easy (0.9); invalid in band
    got = accepted(torch.tensor([True, True, False]), torch.tensor([0.5, 0.9, 0.5]))
    assert got.tolist() == [True, False, False]


def test_judge_majority_and_gold_modes():
    answers, correct = ["12", "12", "13", None], [True, True, False, False]
    # majority: label 12 with 2 of 4 = 0.5 >= 0.3, and 12 is the true answer
    assert judge(answers, correct, "12") == judge(answers, correct, "12", use_gold=False)
    v = judge(answers, correct, "12")
    assert (v.label, v.p_hat, v.valid, v.label_true) == ("12", 0.5, True, True)
    # a wrong majority: label 13 (3 of 4 = 0.75), the true answer 12 -> label_true False, still valid
    v = judge(["13", "13", "13", "12"], [False, False, False, True], "12")
    assert (v.label, v.p_hat, v.valid, v.label_true) == ("13", 0.75, True, False)
    # gold: the computed answer is the label, p_hat = 1 correct of 4 = 0.25
    v = judge(["13", "13", "13", "12"], [False, False, False, True], "12", use_gold=True)
    assert (v.label, v.p_hat, v.valid) == ("12", 0.25, True)
    # majority below the floor: 1 of 4 = 0.25 < 0.3 -> invalid; no true answer known -> label_true None
    v = judge(["1", "2", "3", None], None, None)
    assert (v.p_hat, v.valid, v.label_true) == (0.25, False, None)
    assert not judge(["1"], None, None, use_gold=True).valid  # gold mode without a true answer


def test_solver_pool_is_anchors_then_new_generated_keys():
    class It:
        def __init__(self, key):
            self.key = key

    pool = solver_pool([It("1+2"), It("3+4")], [It("5+6"), It("1+2"), It("5+6"), It("7+8")])
    assert [it.key for it in pool] == ["1+2", "3+4", "5+6", "7+8"]


# ------------------------------------------------------------------ arithmetic: generated problems


def test_generated_problem_prefix_and_line_modes():
    c = ArithmeticConfig()  # 2 terms of 1-3 digits, "+"
    # prefix: the longest leading 2-term expression; the chain of thought after it is ignored
    assert generated_problem("7+5+0=13,4+8+1=13", c) == ([7, 5], ["+"])
    assert generated_problem("347+85=?\n", c) == ([347, 85], ["+"])
    # line: the whole first line (less "=?" or "=") must be the expression
    assert generated_problem("7+5+0=13", c, "line") is None
    assert generated_problem("347+85=?\nmore", c, "line") == ([347, 85], ["+"])
    assert generated_problem("12+3=", c, "line") == ([12, 3], ["+"])
    # limits: 4 digits, a leading zero, an operator the task does not use, no expression
    for bad in ("1234+5", "007+1", "12-3", "A:12", ""):
        assert generated_problem(bad, c) is None, bad
    assert generated_problem("12-3", ArithmeticConfig(ops="+-")) == ([12, 3], ["-"])
    assert generated_problem("1+2", ArithmeticConfig(min_digits=2)) is None  # 1 digit < min_digits 2
    with pytest.raises(ValueError, match="parse"):
        generated_problem("1+2", c, "word")


def test_generated_item_carries_the_true_answer_and_the_split():
    task = ArithmeticTask()
    it = task.generated_item("5+110=4,0+1")  # prefix "5+110": 115
    assert (it.key, it.prompt, it.answer) == ("5+110", "5+110=?\n", "115")
    assert task.generated_item("x") is None
    # held_out marks exactly the problems of the test split (the task's own hash)
    from reasonrl.tasks.base import in_test_split

    keys = [f"{a}+{b}" for a in range(1, 40) for b in range(1, 40)]
    marks = [task.generated_item(k).meta["held_out"] for k in keys]
    assert marks == [in_test_split(k, 0.1) for k in keys] and 0 < sum(marks) < len(keys)
