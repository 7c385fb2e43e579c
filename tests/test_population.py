"""PopuLoRA's pure pieces (spec envs-selfplay-eval.md 4 (d)): the same-rank LoRA operators against numpy's
own SVD, the openskill ratings against the TrueSkill formulas worked by hand, PFSP, PBT's replacement plan,
the teacher reward, and the toy loop where teachers raise difficulty and a single agent does not."""

import math
import random

import numpy as np
import pytest

from reasonrl.population import (
    OPERATORS,
    RatingModel,
    conservative,
    crossover_modulewise,
    crossover_svd,
    make_offspring,
    mutate_gaussian,
    mutate_spectral,
    offspring_rating,
    pbt_plan,
    pfsp_pick,
    pfsp_weights,
    ranked,
)
from reasonrl.rewards.azr import azr_format_shaping
from reasonrl.rewards.populora import teacher_proposal_reward, teacher_reward

D, K, R = 64, 48, 4  # the spec's sizes


def _factors(seed, modules=("q", "v")):
    rng = np.random.default_rng(seed)
    return {m: (rng.standard_normal((R, K)), rng.standard_normal((D, R))) for m in modules}


def _rel(x, y):
    return np.linalg.norm(x - y) / np.linalg.norm(y)


# ------------------------------------------------------------------ the operators


def test_svd_crossover_with_a_one_reproduces_the_first_parent():
    f1, f2 = _factors(0), _factors(1)
    out = crossover_svd(f1, f2, a=1.0)
    for m in f1:
        a, b = out[m]
        assert a.shape == (R, K) and b.shape == (D, R)
        # a = 1: B_cat = [B1, 0], A_cat = [A1; 0], a rank-r product: truncating to r loses nothing
        assert _rel(b @ a, f1[m][1] @ f1[m][0]) < 1e-13


def test_svd_crossover_at_one_half_is_the_best_rank_r_approximation_of_the_average():
    f1, f2 = _factors(2), _factors(3)
    out = crossover_svd(f1, f2, a=0.5)
    for m in f1:
        target = 0.5 * (f1[m][1] @ f1[m][0] + f2[m][1] @ f2[m][0])  # (64, 48), rank 8
        u, s, vt = np.linalg.svd(target, full_matrices=False)  # numpy's own, on the full product
        best = (u[:, :R] * s[:R]) @ vt[:R]  # Eckart-Young: the best rank-4 approximation
        got = out[m][1] @ out[m][0]
        assert _rel(got, best) < 1e-12  # the spec's ~5e-15 relative error (float64)
        assert np.linalg.matrix_rank(got) == R
        # averaging the factors instead adds the cross terms B1 A2 and B2 A1: much further from the target
        naive = (0.5 * (f1[m][1] + f2[m][1])) @ (0.5 * (f1[m][0] + f2[m][0]))
        assert np.linalg.norm(naive - target) > 1.3 * np.linalg.norm(got - target)  # 57.5 vs 41.4 here
    with pytest.raises(ValueError, match="in \\[0, 1\\]"):
        crossover_svd(f1, f2, a=1.5)


def test_modulewise_crossover_returns_whole_pairs_of_one_parent():
    mods = [f"layer{i}.{p}" for i in range(8) for p in ("q", "v")]
    f1, f2 = _factors(4, mods), _factors(5, mods)
    out, origin = crossover_modulewise(f1, f2, np.random.default_rng(0))
    for m in mods:
        parent = f1 if origin[m] == 1 else f2
        # both factors from the same parent, never A from one and B from the other
        assert np.array_equal(out[m][0], parent[m][0]) and np.array_equal(out[m][1], parent[m][1])
    assert set(origin.values()) == {1, 2}  # 16 fair coins: both parents appear (seeded)
    with pytest.raises(ValueError, match="different modules"):
        crossover_modulewise(f1, _factors(6, ("q",)), np.random.default_rng(0))


def test_spectral_mutation_with_sigma_zero_is_the_identity_and_scales_singular_values():
    f = _factors(7)
    out = mutate_spectral(f, 0.0, np.random.default_rng(0))
    for m in f:
        assert _rel(out[m][1] @ out[m][0], f[m][1] @ f[m][0]) < 1e-13
        assert np.linalg.matrix_rank(out[m][1] @ out[m][0]) <= R
    # by hand: B = [[1], [0]], A = [[2, 0]] -> delta W = [[2, 0], [0, 0]], one singular value 2, scaled by
    # exp(0.5 z) with z the generator's first normal draw
    z = np.random.default_rng(3).standard_normal(1)[0]
    ((a, b),) = mutate_spectral(
        {"m": (np.array([[2.0, 0.0]]), np.array([[1.0], [0.0]]))}, 0.5, np.random.default_rng(3)
    ).values()
    assert np.allclose(b @ a, [[2.0 * math.exp(0.5 * z), 0.0], [0.0, 0.0]], atol=1e-12)


def test_gaussian_mutation_scales_noise_by_each_factors_std_and_moves_a_zero_b():
    # A = [[1, 3]]: std 1; B = 0 (a fresh adapter): the absolute sigma 1e-3 stands in for its std 0
    rng = np.random.default_rng(11)
    z_a, z_b = rng.standard_normal((1, 2)), rng.standard_normal((2, 1))  # the draws in the operator's order
    ((a, b),) = mutate_gaussian(
        {"m": (np.array([[1.0, 3.0]]), np.zeros((2, 1)))}, 0.5, np.random.default_rng(11)
    ).values()
    assert np.allclose(a, np.array([[1.0, 3.0]]) + 0.5 * 1.0 * z_a)
    assert np.allclose(b, 0.5 * 1e-3 * z_b) and np.abs(b).max() > 0


# ------------------------------------------------------------------ ratings and matchmaking


def test_a_game_moves_the_winner_up_the_loser_down_and_shrinks_both_sigmas():
    m = RatingModel()
    assert m.win_probability(m.initial(), m.initial()) == 0.5  # equal ratings: a coin
    (mu_w, s_w), (mu_l, s_l) = m.play(m.initial(), m.initial())
    # by hand (TrueSkill, mu 25, sigma 25/3, beta 25/6, tau 25/300): sigma^2 = 69.4444 + 0.0069 = 69.4514;
    # c^2 = 2 (25/6)^2 + 2 * 69.4514 = 34.7222 + 138.9028 = 173.625, c = 13.1767; t = 0, v = 0.398942 / 0.5
    # = 0.797885; mu moves 69.4514 / 13.1767 * 0.797885 = 4.2055; w = v^2 = 0.636620;
    # sigma^2 = 69.4514 (1 - 69.4514 / 173.625 * 0.636620) = 69.4514 * 0.745347 = 51.7652 -> sigma 7.1948
    assert (mu_w, mu_l) == pytest.approx((29.2055, 20.7945), abs=1e-3)
    assert s_w == pytest.approx(7.1948, abs=1e-3) and s_l == pytest.approx(7.1948, abs=1e-3)
    # afterwards: Phi(8.4110 / sqrt(34.7222 + 2 * 51.7652)) = Phi(8.4110 / 11.7582) = Phi(0.71533) = 0.7628
    assert m.win_probability((mu_w, s_w), (mu_l, s_l)) == pytest.approx(0.7628, abs=1e-4)
    assert conservative((mu_w, s_w)) == pytest.approx(29.2055 - 3 * 7.1948, abs=1e-2)
    a, b = m.games(m.initial(), m.initial(), [True, False])  # one win each, in order
    assert a != b and a[1] < 25 / 3 and b[1] < 25 / 3


def test_pfsp_prefers_the_opponent_nearest_an_even_match():
    # f = p (1 - p): 0.09, 0.25, 0.09, 0.2475, summing to 0.6775
    w = pfsp_weights([0.1, 0.5, 0.9, 0.45])
    assert w == pytest.approx([0.09 / 0.6775, 0.25 / 0.6775, 0.09 / 0.6775, 0.2475 / 0.6775])
    assert max(range(4), key=w.__getitem__) == 1
    assert pfsp_weights([0.0, 1.0]) == [0.5, 0.5]  # all certain: uniform rather than a division by zero
    assert pfsp_weights([0.2, 0.9], mode="uniform") == [0.5, 0.5]
    rng = random.Random(0)
    counts = [0, 0]
    for _ in range(2000):
        counts[pfsp_pick([0.5, 0.99], rng)] += 1
    # weights 0.25 vs 0.0099: the even match is picked 0.25 / 0.2599 = 96% of the time
    assert counts[0] / 2000 == pytest.approx(0.962, abs=0.02)
    with pytest.raises(ValueError, match="PFSP mode"):
        pfsp_weights([0.5], mode="hard")


# ------------------------------------------------------------------ PBT

RATINGS = {"a": (30.0, 1.0), "b": (25.0, 1.0), "c": (20.0, 2.0), "d": (26.0, 5.0)}  # mu - 3 sigma: 27, 22, 14, 11


def test_pbt_replaces_exactly_the_bottom_fraction_by_conservative_skill():
    assert ranked(RATINGS) == ["a", "b", "c", "d"]  # d has the second-best mu but the widest sigma
    rng = np.random.default_rng(0)
    one = pbt_plan(RATINGS, 0.25, OPERATORS, rng)  # floor(0.25 * 4) = 1: d, from parents among the top 2
    assert [r.child for r in one] == ["d"] and set(one[0].parents) <= {"a", "b"}
    two = pbt_plan(RATINGS, 0.5, OPERATORS, rng)  # floor(0.5 * 4) = 2: d then c (worst first)
    assert [r.child for r in two] == ["d", "c"] and all(set(r.parents) <= {"a", "b"} for r in two)
    assert pbt_plan(RATINGS, 0.2, OPERATORS, rng) == []  # floor(0.8) = 0
    # three replaced leaves one survivor: crossovers are impossible, so only mutations are drawn
    three = pbt_plan(RATINGS, 0.75, OPERATORS, np.random.default_rng(1))
    assert [r.child for r in three] == ["d", "c", "b"] and all(r.operator in ("gaussian", "spectral") for r in three)
    assert all(r.parents == ("a",) for r in three)
    with pytest.raises(ValueError, match="crossover"):
        pbt_plan(RATINGS, 0.75, ("svd",), rng)
    with pytest.raises(ValueError, match="unknown PBT operator"):
        pbt_plan(RATINGS, 0.5, ("blend",), rng)


def test_offspring_keep_shapes_and_inherit_the_rating_with_a_raised_sigma():
    f1, f2 = _factors(8), _factors(9)
    for op in OPERATORS:
        child = make_offspring(op, [f1, f2], np.random.default_rng(0), sigma=0.1, interp=0.5)
        assert {m: (a.shape, b.shape) for m, (a, b) in child.items()} == {m: ((R, K), (D, R)) for m in f1}
    assert offspring_rating((30.0, 1.0), 25 / 6) == (30.0, 25 / 6)  # sigma raised to 4.1667
    assert offspring_rating((30.0, 6.0), 25 / 6) == (30.0, 6.0)  # never lowered


def test_teacher_reward_and_its_zero_sum_flag():
    assert [teacher_reward(s) for s in (0.0, 0.25, 1.0)] == [0.0, 0.75, 0.0]  # AZR's rule: unsolved earns 0
    assert teacher_reward(0.0, zero_when_unsolved=False) == 1.0  # the pure zero-sum reading
    assert [
        teacher_proposal_reward(False, False, None),
        teacher_proposal_reward(True, False, None),
        teacher_proposal_reward(True, True, 0.5),
    ] == [-1.0, -0.5, 0.5]
    with pytest.raises(ValueError):
        teacher_reward(1.5)


# ------------------------------------------------------------------ the toy loop


def _solve_rate(skill, d, eps):
    return float(np.mean(skill + eps > d))  # solve iff s > d plus noise, over n samples


def _climb(d, reward_at, step=0.25, lr=0.5):
    """One finite-difference ascent step on d (common random numbers inside reward_at)."""
    return d + lr * (reward_at(d + step) - reward_at(d - step)) / (2 * step)


def _population(rounds, seed=0, n=8):
    rng, pick_rng, m = np.random.default_rng(seed), random.Random(seed), RatingModel()
    d, s = [0.0] * 4, [0.0] * 4  # teachers' difficulties, students' skills
    teachers, students = [m.initial()] * 4, [m.initial()] * 4
    for _ in range(rounds):
        for j in range(4):
            i = pfsp_pick([m.win_probability(students[k], teachers[j]) for k in range(4)], pick_rng)
            eps = rng.standard_normal(n)
            d[j] = _climb(d[j], lambda x: teacher_reward(_solve_rate(s[i], x, eps)))  # noqa: B023 - _climb calls it at once; the teacher's own reward
            rate = _solve_rate(s[i], d[j], eps)
            wins = [k < round(rate * n) for k in range(n)]  # each attempt a game: True = the student solved it
            students[i], teachers[j] = m.games(students[i], teachers[j], wins)
            s[i] += 0.3 * rate * (1 - rate)  # students learn most from tasks at their frontier
    return float(np.mean(d))


def _single_agent(rounds, seed=0, n=8):
    rng, d, s = np.random.default_rng(seed), 0.0, 0.0
    for _ in range(rounds):
        eps = rng.standard_normal(n)

        def both_roles(x):  # one set of weights earns both rewards on its own task
            rate = _solve_rate(s, x, eps)  # noqa: B023 - both_roles is climbed in this iteration only
            solve = rate * azr_format_shaping(1.0, True) + (1 - rate) * azr_format_shaping(0.0, True)  # 1 / -0.5
            return teacher_reward(rate) + solve  # 0.5 + 0.5 rate while rate > 0: easier pays more

        d = _climb(d, both_roles)
        rate = _solve_rate(s, d, eps)
        s += 0.3 * rate * (1 - rate)
    return d


def test_toy_loop_teachers_raise_difficulty_and_a_single_agent_does_not():
    early, late = _population(10), _population(60)
    assert late > early > 0.0 and late > 1.0  # difficulty climbs round after round
    single = _single_agent(60)
    assert single <= 0.0 and single < late - 1.0  # rewarding itself, it calibrates down to easy tasks


# ------------------------------------------------------------------ cases the mutation run found untested (issue 45)


def test_check_factors_refuses_each_bad_shape_naming_it():
    from reasonrl.population.operators import check_factors

    good = {"q": (np.ones((2, 5)), np.ones((4, 2)))}
    for bad in (
        {"q": (np.ones(5), np.ones((4, 2)))},
        {"q": (np.ones((2, 5)), np.ones(4))},
        {"q": (np.ones((3, 5)), np.ones((4, 2)))},
    ):
        with pytest.raises(
            ValueError, match=r"module q: A \(.*\) and B \(.*\) are not \(r, k\) and \(d, r\) of one rank"
        ):
            check_factors(bad)
    with pytest.raises(ValueError, match=r"the parents adapt different modules: \['q', 'v'\]"):
        check_factors(good, {"v": good["q"]})
    with pytest.raises(ValueError, match=r"different modules: \['q', 'r', 's'\]$"):  # the first 3 of 4 named
        check_factors({m: good["q"] for m in "qrst"}, {})
    # B's shape alone differs (d 4 against 6): refused, naming both parents' A shapes
    with pytest.raises(ValueError, match=r"module q: the parents' shapes differ \(\(2, 5\), \(2, 5\)\)"):
        check_factors(good, {"q": (np.ones((2, 5)), np.ones((6, 2)))})


def test_refactor_with_a_scale_keeps_the_largest_scaled_values():
    from reasonrl.population.operators import delta, refactor

    # B A = diag(3, 2, 1); scale (0.1, 1, 1) makes the spectrum (0.3, 2, 1): rank 1 keeps 2 at (1, 1)
    a_new, b_new = refactor(np.eye(3), np.diag([3.0, 2.0, 1.0]), 1, scale=np.array([0.1, 1.0, 1.0]))
    assert np.allclose(delta(a_new, b_new), np.diag([0.0, 2.0, 0.0]), atol=1e-12)


def test_gaussian_mutation_noise_is_sigma_times_each_factors_std():
    from reasonrl.population.operators import mutate_gaussian

    rng = np.random.default_rng(0)
    a, b = 2.0 * rng.standard_normal((2, 2000)), 3.0 * rng.standard_normal((2000, 2))
    out = mutate_gaussian({"q": (a, b)}, 0.1, np.random.default_rng(1))["q"]
    # noise std sigma * std(A) = 0.1 * ~2 = ~0.2, sigma * std(B) = ~0.3 (4000 draws each: within 5%)
    assert np.std(out[0] - a) == pytest.approx(0.1 * np.std(a), rel=0.05)
    assert np.std(out[1] - b) == pytest.approx(0.1 * np.std(b), rel=0.05)
    small = mutate_gaussian({"q": (a, b / 6)}, 0.1, np.random.default_rng(1))["q"]  # std(B) ~0.5 < 1: still its own
    assert np.std(small[1] - b / 6) == pytest.approx(0.1 * np.std(b / 6), rel=0.05)
    # a zero factor (a fresh B, here A too) moves by sigma * abs_sigma = 0.1 * 1e-3 = 1e-4
    zero = mutate_gaussian({"q": (np.zeros((2, 2000)), np.zeros((2000, 2)))}, 0.1, np.random.default_rng(1))["q"]
    assert np.std(zero[0]) == pytest.approx(1e-4, rel=0.05) and np.std(zero[1]) == pytest.approx(1e-4, rel=0.05)


def test_spectral_mutation_keeps_the_rank_and_scales_each_value_on_its_own():
    from reasonrl.population.operators import delta, mutate_spectral

    a, b = np.diag([3.0, 2.0])[:, :2] @ np.eye(2, 6), np.eye(5, 2)  # B A = diag(3, 2) in a 5 x 6 frame
    out_a, out_b = mutate_spectral({"q": (a, b)}, 0.5, np.random.default_rng(0))["q"]
    assert out_a.shape == (2, 6) and out_b.shape == (5, 2)
    s = np.linalg.svd(delta(out_a, out_b), compute_uv=False)[:2]
    # each singular value times its own exp(0.5 z), z the generator's two normal draws (one shared draw, or
    # none, would give other values)
    z = np.random.default_rng(0).standard_normal(2)
    assert np.allclose(s, sorted([3.0 * np.exp(0.5 * z[0]), 2.0 * np.exp(0.5 * z[1])], reverse=True), atol=1e-10)


def test_svd_crossover_at_a_zero_is_the_second_parent_and_checks_both_parents():
    from reasonrl.population.operators import crossover_svd, delta

    rng = np.random.default_rng(0)
    f1 = {"q": (rng.standard_normal((2, 6)), rng.standard_normal((5, 2)))}
    f2 = {"q": (rng.standard_normal((2, 6)), rng.standard_normal((5, 2)))}
    child = crossover_svd(f1, f2, 0.0)["q"]  # a = 0: the target is B2 A2 itself, of rank 2
    assert np.allclose(delta(*child), delta(*f2["q"]), atol=1e-10)
    with pytest.raises(ValueError, match="the parents adapt different modules"):
        crossover_svd(f1, {"v": f2["q"]}, 0.5)
