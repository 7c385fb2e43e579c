"""Mismatched wrong drafts (spec distill-and-data.md section 9): tiers, derangement, template, modes."""

import random

import pytest

from reasonrl.data.drafts import (
    NO_DRAFT,
    TEMPLATE,
    Draft,
    build_draft_dataset,
    choose_draft,
    derangement,
    draft_prompt,
    draft_tier,
    fit_draft,
    template_problem,
)

WRONG, QUASI, RIGHT = Draft("w", False), Draft("q", False, quasi=True), Draft("r", True)


def test_spec_derangement_n5_seed0_has_no_fixed_point_and_is_a_permutation():
    # spec 9 (d). random.Random(0).shuffle([0..4]) gives [2, 1, 0, 4, 3]; i=1 is fixed, swapped with
    # position 2: [2, 0, 1, 4, 3]
    perm = derangement(5, seed=0)
    assert sorted(perm) == [0, 1, 2, 3, 4]
    assert all(p != i for i, p in enumerate(perm))
    assert perm == [2, 0, 1, 4, 3]


@pytest.mark.parametrize(
    "n,seed,expected",
    [
        (4, 5, [1, 0, 3, 2]),  # shuffle [0, 1, 3, 2]: i=0 fixed, swapped with 1 -> [1, 0, 3, 2]
        (4, 0, [3, 0, 1, 2]),  # shuffle [2, 0, 1, 3]: i=3 fixed, swapped with (3+1) mod 4 = 0 -> [3, 0, 1, 2]
        (2, 0, [1, 0]),  # the only derangement of 2
        (0, 0, []),
    ],
)
def test_derangement_repairs_fixed_points_by_swaps(n, seed, expected):
    assert derangement(n, seed) == expected


def test_derangement_of_many_seeds_never_fixes_a_point():
    for n in range(2, 12):
        for seed in range(20):
            perm = derangement(n, seed)
            assert sorted(perm) == list(range(n)) and all(p != i for i, p in enumerate(perm)), (n, seed, perm)


def test_derangement_of_one_problem_is_an_error():
    with pytest.raises(ValueError, match="at least 2"):
        derangement(1)


def test_tiers_wrong_and_correct_type():
    # wrong-type: definitely wrong 1, quasi only 2, strict-correct 3; correct-type the reverse
    assert [draft_tier(d, "wrong") for d in (WRONG, QUASI, RIGHT)] == [1, 2, 3]
    assert [draft_tier(d, "correct") for d in (WRONG, QUASI, RIGHT)] == [3, 2, 1]
    assert RIGHT.quasi  # strict-correct implies quasi-correct
    with pytest.raises(ValueError, match="kind"):
        draft_tier(WRONG, "other")


def test_spec_problem_with_only_correct_drafts_gives_tier_3_for_wrong_type():
    # spec 9 (d): problem 3 has only correct drafts -> tier 3 (random) when a wrong draft is wanted
    drafts = [[WRONG], [QUASI, RIGHT], [WRONG, RIGHT], [Draft("r1", True), Draft("r2", True)]]
    tiers = [choose_draft(d, "wrong", random.Random(0))[1] for d in drafts]
    assert tiers == [1, 2, 1, 3]
    picked = {choose_draft(drafts[3], "wrong", random.Random(s))[0].text for s in range(20)}
    assert picked == {"r1", "r2"}  # tier 3 picks among all of them


def test_choose_draft_prefers_the_best_tier():
    assert choose_draft([WRONG, QUASI, RIGHT], "correct", random.Random(0)) == (RIGHT, 1)
    assert choose_draft([WRONG, QUASI], "correct", random.Random(0)) == (QUASI, 2)
    assert choose_draft([QUASI, RIGHT], "wrong", random.Random(0)) == (QUASI, 2)
    with pytest.raises(ValueError):
        choose_draft([], "wrong", random.Random(0))


def test_template_exact_text_and_na():
    expected = (
        "Problem: 1+2=?\n\nThinking: 1+2+0=4\n\nThe thinking section may contain errors. Solve the math "
        "problem step by step. Write your own correct solution. Put your final answer within \\boxed{}."
        "\n\nCorrect Solution:"
    )
    assert draft_prompt("1+2=?", "1+2+0=4") == expected
    # spec 9 (d): an empty draft is the same string as no draft, "Thinking: N/A"
    assert draft_prompt("1+2=?", "") == draft_prompt("1+2=?", None) == expected.replace("1+2+0=4", "N/A")
    assert "Thinking: N/A\n\n" in draft_prompt("x", None) and NO_DRAFT == "N/A"


def test_spec_no_draft_mode_is_the_na_template():
    rows = build_draft_dataset(["a", "b"], [[WRONG], [RIGHT]], "no_draft")
    assert [r.prompt for r in rows] == [draft_prompt("a", ""), draft_prompt("b", "")]
    assert all(r.draft is None and r.source is None for r in rows)


def test_fit_draft_cuts_only_the_draft():
    # characters: the N/A prompt of problem "p" is len(TEMPLATE filled) chars; with 5 more chars of room
    # the 12-char draft keeps its first 5 + 3 (the N/A's length counts as room too) = 8
    base = len(draft_prompt("p", None))
    assert fit_draft("p", "abcdefghijkl", base + 5) == "abcdefgh"
    assert len(draft_prompt("p", fit_draft("p", "abcdefghijkl", base + 5))) == base + 5
    assert fit_draft("p", "abc", base + 5) == "abc"  # fits: untouched
    assert fit_draft("p", "abc", None) == "abc"  # no cap
    # a problem longer than the cap is never cut: the draft goes, the prompt is the N/A one
    long_problem = "q" * 5000
    assert fit_draft(long_problem, "abc", 100) == ""
    assert draft_prompt(long_problem, fit_draft(long_problem, "abc", 100)).startswith("Problem: " + long_problem)


def test_fit_draft_with_a_word_tokenizer():
    # tokens are words: the template with an empty draft slot is W words; a cap of W + 2 keeps 2 draft words
    enc, dec = str.split, " ".join
    w = len(draft_prompt("x y", "").split()) - 1  # minus the "N/A" word
    assert fit_draft("x y", "one two three four", w + 2, enc, dec) == "one two"


def test_modes_matched_and_mismatched():
    problems = ["p0", "p1", "p2", "p3", "p4"]
    drafts = [[Draft(f"w{i}", False), Draft(f"c{i}", True)] for i in range(5)]
    perm = derangement(5, 0)  # [2, 0, 1, 4, 3]
    matched = build_draft_dataset(problems, drafts, "matched_wrong")
    assert [r.source for r in matched] == [0, 1, 2, 3, 4]
    assert [r.prompt for r in matched] == [draft_prompt(f"p{i}", f"w{i}") for i in range(5)]
    wrong = build_draft_dataset(problems, drafts, "mismatched_wrong", seed=0)
    assert [r.source for r in wrong] == perm
    assert [r.prompt for r in wrong] == [draft_prompt(f"p{i}", f"w{perm[i]}") for i in range(5)]
    assert all(r.source != r.index and r.tier == 1 for r in wrong)
    right = build_draft_dataset(problems, drafts, "mismatched_correct", seed=0)
    assert [r.draft.text for r in right] == [f"c{j}" for j in perm] and all(r.tier == 1 for r in right)


def test_choice_within_a_tier_does_not_depend_on_problem_order():
    drafts = [[Draft(f"w{i}a", False), Draft(f"w{i}b", False), Draft(f"w{i}c", False)] for i in range(4)]
    keys = ["k0", "k1", "k2", "k3"]
    a = build_draft_dataset(["p"] * 4, drafts, "matched_wrong", keys=keys)
    b = build_draft_dataset(["p"] * 4, drafts[::-1], "matched_wrong", keys=keys[::-1])
    assert [r.draft.text for r in a] == [r.draft.text for r in b][::-1]


def test_bad_mode_and_lengths():
    with pytest.raises(ValueError, match="unknown draft mode"):
        build_draft_dataset(["a"], [[WRONG]], "wrong_drafts")
    with pytest.raises(ValueError, match="2 problems but 1"):
        build_draft_dataset(["a", "b"], [[WRONG]], "matched_wrong")


def test_template_fields_check():
    assert template_problem(TEMPLATE) is None
    assert template_problem("Problem: {problem}\n\nCorrect Solution:") == "needs the field(s) ['draft']"
    assert template_problem("{problem} {draft} {hint}") == "has field(s) ['hint'] beyond {problem} and {draft}"
    assert template_problem("{problem {draft}") is not None  # unbalanced braces


def test_spec_dr_grpo_advantages_and_loss_normaliser_of_the_drafts_recipe():
    import torch

    from reasonrl.advantages.estimators import dr_grpo
    from reasonrl.losses.aggregate import aggregate
    from reasonrl.recipes import get_recipe

    # spec 9 (d): rewards [1, 0, 0, 1] -> mean 0.5 -> A = r - 0.5 = [0.5, -0.5, -0.5, 0.5] (no std division)
    assert dr_grpo(torch.tensor([[1.0, 0.0, 0.0, 1.0]])).tolist() == [[0.5, -0.5, -0.5, 0.5]]
    # spec 9 (d): G = 4, L_max = 10, masked per-token loss summing to 2.0 -> 2.0 / (4 x 10) = 0.05
    values, mask = torch.zeros(4, 10), torch.zeros(4, 10)
    values[0, :4], mask[0, :4], values[2, :2], mask[2, :2] = 0.25, 1, 0.5, 1  # 4 x 0.25 + 2 x 0.5 = 2.0
    values[1, :3] = 9.0  # outside the mask: ignored
    recipe = get_recipe("drafts")
    got = aggregate(values, mask, recipe.loss.agg, norm_len=10)
    assert recipe.advantage.estimator == "dr_grpo" and abs(got.item() - 0.05) < 1e-7
