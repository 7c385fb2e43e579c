"""Tests for reasonrl.eval.metrics; expected values are worked out by hand in the comments."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from reasonrl.eval.metrics import (
    avg_at_k,
    maj_at_k,
    majority_vote,
    mean_pass_at_k,
    mean_std,
    pass_at_k,
    welch_t_test,
)

# ---------------------------------------------------------------- pass@k


@pytest.mark.parametrize(
    "n, c, k, expected",
    [
        # 1 - C(7,1)/C(10,1) = 1 - 7/10
        (10, 3, 1, 0.3),
        # 1 - C(7,5)/C(10,5) = 1 - 21/252 = 0.916666...
        (10, 3, 5, 1 - 21 / 252),
        # no correct samples: C(5,1)/C(5,1) = 1 -> 0
        (5, 0, 1, 0.0),
        # all correct: n - c = 0 < k -> 1
        (5, 5, 3, 1.0),
        # 1 - C(3,2)/C(5,2) = 1 - 3/10
        (5, 2, 2, 0.7),
        # 1 - C(3,2)/C(4,2) = 1 - 3/6
        (4, 1, 2, 0.5),
        # k = n with one correct: every k-subset is the full set -> n - c = 3 < 4 -> 1
        (4, 1, 4, 1.0),
        # 1 - C(18,4)/C(20,4) = 1 - 3060/4845 = 1 - 12/19
        (20, 2, 4, 1 - 12 / 19),
    ],
)
def test_pass_at_k_vectors(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-9)


def test_pass_at_k_spec_rounding():
    # the spec states (10, 3, 5) -> 0.9167 to 1e-4
    assert abs(pass_at_k(10, 3, 5) - 0.9167) < 1e-4


def test_pass_at_k_matches_combinatorial_form():
    # the product form must agree with 1 - C(n-c,k)/C(n,k) wherever the latter is defined
    for n in range(1, 13):
        for c in range(n + 1):
            for k in range(1, n + 1):
                exact = 1.0 if n - c < k else 1 - math.comb(n - c, k) / math.comb(n, k)
                assert pass_at_k(n, c, k) == pytest.approx(exact, abs=1e-12), (n, c, k)


def test_pass_at_k_k_greater_than_n_raises():
    with pytest.raises(ValueError, match=r"k=6 > n=5"):
        pass_at_k(5, 2, 6)


@pytest.mark.parametrize("n, c, k", [(5, 6, 1), (5, -1, 1), (5, 2, 0), (-1, 0, 1)])
def test_pass_at_k_invalid_arguments_raise(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


def test_mean_pass_at_k_two_problems():
    # problem 0: n=4, c=1, k=2 -> 1 - C(3,2)/C(4,2) = 0.5
    # problem 1: n=5, c=2, k=2 -> 1 - C(3,2)/C(5,2) = 0.7
    # mean = (0.5 + 0.7) / 2 = 0.6
    correct = [
        [False, True, False, False],
        [True, False, False, True, False],
    ]
    assert mean_pass_at_k(correct, 2) == pytest.approx(0.6)


def test_mean_pass_at_k_k1_is_plain_accuracy_mean():
    # k=1: pass@1 = c/n; (1/4 + 3/3) / 2 = 0.625
    correct = [[True, False, False, False], [True, True, True]]
    assert mean_pass_at_k(correct, 1) == pytest.approx(0.625)


def test_mean_pass_at_k_problem_too_small_names_problem():
    with pytest.raises(ValueError, match=r"problem 1"):
        mean_pass_at_k([[True, False, True], [True]], 2)


def test_mean_pass_at_k_empty_raises():
    with pytest.raises(ValueError):
        mean_pass_at_k([], 1)


# ---------------------------------------------------------------- avg@k


def test_avg_at_k_unweighted_over_problems():
    # problem 0: 1/4 correct = 0.25; problem 1: 2/2 = 1.0; problem 2: 0/3 = 0
    # mean over problems = (0.25 + 1.0 + 0.0) / 3 = 0.41666...
    # (pooling samples instead would give 3/9 = 0.333..., so this distinguishes the two)
    correct = [[True, False, False, False], [True, True], [False, False, False]]
    assert avg_at_k(correct) == pytest.approx(1.25 / 3)


def test_avg_at_k_rejects_empty_problem():
    with pytest.raises(ValueError, match=r"problem 1"):
        avg_at_k([[True], []])


# ---------------------------------------------------------------- majority vote / maj@k


def test_majority_vote_clear_winner():
    # "5" appears 3 times, "3" once: first "5" is at index 1
    assert majority_vote(["3", "5", "5", "5"]) == 1


def test_majority_vote_tie_first_seen_wins():
    # "3" and "5" both appear twice; "3" is seen first (index 0)
    assert majority_vote(["3", "5", "5", "3"]) == 0
    # reversed order: "5" seen first (index 0)
    assert majority_vote(["5", "3", "3", "5"]) == 0
    # tie where the first element is not in the tie: "7" once, "3" and "5" twice -> "3" at index 1
    assert majority_vote(["7", "3", "5", "5", "3"]) == 1


def test_majority_vote_none_never_wins():
    # None appears 3 times but does not vote; "4" (once, index 2) is the only candidate
    assert majority_vote([None, None, "4", None]) == 2


def test_majority_vote_all_none():
    assert majority_vote([None, None, None]) is None
    assert majority_vote([]) is None


def test_maj_at_k_winner_correct_and_incorrect():
    answers = [
        ["3", "5", "5", "3"],  # tie -> "3" wins; samples 0 and 3 carry "3", sample 3 correct -> 1
        ["2", "2", "9"],  # "2" wins; neither "2" sample correct (the "9" one is) -> 0
        [None, None],  # all unparseable -> 0
        ["x", None, None],  # "x" is the only vote; it is correct -> 1
    ]
    correct = [
        [False, False, True, True],
        [False, False, True],
        [False, False],
        [True, False, False],
    ]
    # hits = [1, 0, 0, 1] -> 2/4
    assert maj_at_k(answers, correct) == pytest.approx(0.5)


def test_maj_at_k_uses_verifier_not_first_sample_flag():
    # winner "1/2" first appears at index 0 (flag False) but the verifier marked index 2 correct:
    # any sample carrying the winner being correct makes the problem correct -> 1.0
    assert maj_at_k([["1/2", "0.3", "1/2"]], [[False, False, True]]) == 1.0
    # same answers, no "1/2" sample correct -> 0.0
    assert maj_at_k([["1/2", "0.3", "1/2"]], [[False, True, False]]) == 0.0


def test_maj_at_k_shape_mismatch_raises():
    with pytest.raises(ValueError, match=r"problem 0"):
        maj_at_k([["a", "b"]], [[True]])
    with pytest.raises(ValueError):
        maj_at_k([["a"], ["b"]], [[True]])


# ---------------------------------------------------------------- statistics


def test_mean_std_ddof1():
    # mean of [2, 4, 4, 4, 5, 5, 7, 9] = 40/8 = 5; squared deviations sum = 9+1+1+1+0+0+4+16 = 32
    # ddof=1 variance = 32/7 -> std = sqrt(32/7) = 2.13809 (ddof=0 would give 2.0)
    mean, std = mean_std([2, 4, 4, 4, 5, 5, 7, 9])
    assert mean == pytest.approx(5.0)
    assert std == pytest.approx(math.sqrt(32 / 7))


def test_mean_std_single_value():
    assert mean_std([0.42]) == (pytest.approx(0.42), 0.0)


def test_mean_std_empty_raises():
    with pytest.raises(ValueError):
        mean_std([])


def test_welch_t_test_hand_computed():
    # x = [1,2,3]: mean 2, var (1+0+1)/2 = 1
    # y = [4,5,6,7]: mean 5.5, var (2.25+0.25+0.25+2.25)/3 = 5/3
    # se^2 = 1/3 + (5/3)/4 = 4/12 + 5/12 = 3/4 -> t = (2 - 5.5)/sqrt(3/4) = -3.5/0.8660 = -4.04145
    # Welch df = (3/4)^2 / ((1/3)^2/2 + (5/12)^2/3) = (9/16) / (1/18 + 25/432) = (9/16)/(49/432)
    #          = 243/49 = 4.959
    t, p = welch_t_test([1, 2, 3], [4, 5, 6, 7])
    assert t == pytest.approx(-3.5 / math.sqrt(0.75), rel=1e-9)
    stats = pytest.importorskip("scipy.stats")
    assert p == pytest.approx(2 * stats.t.sf(abs(t), 243 / 49), rel=1e-9)
    assert 0.005 < p < 0.02  # sanity: a clear but not overwhelming difference


def test_welch_t_test_matches_scipy_and_is_antisymmetric():
    stats = pytest.importorskip("scipy.stats")
    x = [0.61, 0.58, 0.66, 0.70, 0.59]
    y = [0.55, 0.57, 0.52, 0.60]
    ref = stats.ttest_ind(x, y, equal_var=False)
    t, p = welch_t_test(x, y)
    assert t == pytest.approx(float(ref.statistic), rel=1e-12)
    assert p == pytest.approx(float(ref.pvalue), rel=1e-12)
    # the pooled-variance (Student) test gives a different p here, so this pins equal_var=False
    student = stats.ttest_ind(x, y, equal_var=True)
    assert abs(float(student.pvalue) - p) > 1e-6
    t2, p2 = welch_t_test(y, x)
    assert t2 == pytest.approx(-t) and p2 == pytest.approx(p)


def test_welch_t_test_constant_samples_are_decided_exactly():
    # both constant: equal values -> undefined (nan, nan); different values -> t = +-inf, p = 0
    t, p = welch_t_test([0.3, 0.3, 0.3], [0.3, 0.3])
    assert math.isnan(t) and math.isnan(p)
    assert welch_t_test([0.4, 0.4], [0.3, 0.3]) == (math.inf, 0.0)
    assert welch_t_test([0.2, 0.2], [0.3, 0.3]) == (-math.inf, 0.0)


def test_welch_t_test_too_few_values_raises():
    with pytest.raises(ValueError, match=r"at least 2"):
        welch_t_test([1.0], [2.0, 3.0])


def test_module_imports_without_scipy():
    # importing the metrics module must not pull scipy in (it is imported lazily)
    src = Path(__file__).resolve().parents[1] / "src"
    code = "import sys, reasonrl.eval.metrics; sys.exit(1 if 'scipy' in sys.modules else 0)"
    env = {**os.environ, "PYTHONPATH": str(src)}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


# ------------------------------------------------------------------ cases the mutation run found untested (issue 45)


def test_each_refusal_names_its_function_and_the_offending_value():
    from reasonrl.eval.metrics import avg_at_k, maj_at_k, majority_vote_grouped, mean_pass_at_k, mean_std, pass_at_k

    with pytest.raises(ValueError, match=r"pass@k needs k >= 1, got k=0"):
        pass_at_k(3, 1, 0)
    with pytest.raises(ValueError, match=r"pass@k needs n >= 0 samples, got n=-1"):
        pass_at_k(-1, 0, 1)
    with pytest.raises(ValueError, match=r"pass@k needs 0 <= c <= n, got c=4, n=3"):
        pass_at_k(3, 4, 1)
    # n = 0 is a valid count that fails the k <= n check (not the n >= 0 one)
    with pytest.raises(ValueError, match=r"k=1 > n=0; sample more completions or lower k"):
        pass_at_k(0, 0, 1)
    for fn, name in (
        (lambda: mean_pass_at_k([], 1), "mean_pass_at_k"),
        (lambda: avg_at_k([]), "avg_at_k"),
        (lambda: maj_at_k([], []), "maj_at_k"),
    ):
        with pytest.raises(ValueError, match=rf"^{name} needs at least one problem, got none$"):
            fn()
    with pytest.raises(ValueError, match=r"maj_at_k: 1 problems of answers but 2 of correctness flags"):
        maj_at_k([["1"]], [[True], [False]])
    with pytest.raises(ValueError, match=r"majority vote: 2 answers but 1 correctness flags"):
        majority_vote_grouped(["1", "2"], [True])
    with pytest.raises(ValueError, match=r"^mean_std needs at least one value, got none$"):
        mean_std([])


def test_majority_votes_use_the_equivalence_given():
    from reasonrl.eval.metrics import majority_vote, majority_vote_grouped

    same_number = lambda a, b: float(a) == float(b)  # noqa: E731 - "1.0" and "1" are one answer
    # exact strings: "2" (2 votes) beats "1.0" and "1" (1 each); by value: 1 has 2 votes, first seen at index 0
    assert majority_vote(["1.0", "2", "1", "2"]) == 1
    assert majority_vote(["1.0", "2", "1", "2"], same_number) == 0
    assert majority_vote_grouped(["1.0", "2", "1", "2"], [False, False, True, False], same_number) == ("1.0", True)


def test_mean_std_of_two_values_has_the_sample_std():
    from reasonrl.eval.metrics import mean_std

    # [1, 3]: mean 2, squared deviations 1 + 1, / (n - 1) = 2 -> std sqrt(2) = 1.414214
    assert mean_std([1.0, 3.0]) == pytest.approx((2.0, 1.414214), abs=1e-6)


@pytest.mark.parametrize(
    "x,y,t,p",
    [
        # one sample constant, the other not: scipy's Welch test, not the both-constant shortcut.
        # [1, 2, 3] vs [1, 1, 1]:
        # t = (2 - 1) / sqrt(1/3 + 0) = 1.732051, df = 2 (all the variance in one sample of 3),
        # p = 1 - t / sqrt(2 + t^2) = 1 - 1.732051 / 2.236068 = 0.225403 (Student's t with 2 df)
        ([1.0, 2.0, 3.0], [1.0, 1.0, 1.0], 1.732051, 0.225403),
        ([1.0, 1.0, 1.0], [1.0, 2.0, 3.0], -1.732051, 0.225403),
        # [0, 2, 0]: mean 2/3, var 4/3; t = (2/3 - 1) / sqrt(4/9) = -0.5, df 2, p = 1 - 0.5 / 1.5 = 0.666667
        ([0.0, 2.0, 0.0], [1.0, 1.0, 1.0], -0.5, 0.666667),
        ([1.0, 1.0, 1.0], [0.0, 2.0, 0.0], 0.5, 0.666667),
    ],
)
@pytest.mark.filterwarnings("ignore:Precision loss occurred in moment calculation")  # scipy, on the constant sample
def test_welch_with_one_constant_sample_by_hand(x, y, t, p):
    from reasonrl.eval.metrics import welch_t_test

    assert welch_t_test(x, y) == pytest.approx((t, p), abs=1e-5)
