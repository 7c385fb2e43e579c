"""Edges of the sub-group maths (advantages/subgroups.py) by hand: NudgeRL's per-prompt statistics over a batch of
two prompts, its dtypes, default lam and errors; the dropout draws' bounds and strict coin; CIPO's selection and
failure pick (their errors, defaults, float64 draws from the generator, strict q0); the STRIDE step number 1."""

import re

import pytest
import torch

from reasonrl.advantages.subgroups import (
    cipo_pick_failure,
    cipo_reward,
    cipo_rewards,
    cipo_select,
    nudge_advantages,
    nudge_contexts,
    nudge_dropout_counts,
    parse_first_error,
)


def _exact(msg: str) -> str:
    return "^" + re.escape(msg) + "$"


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ------------------------------------------------------------------ NudgeRL advantages

# prompt 0: contexts [0, 0, 1, 1], rewards [0, 0, 1, 1]; prompt 1: contexts [1, 1, 2, 2], rewards all 1
REWARDS = torch.tensor([[0.0, 0.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0]])
CONTEXTS = torch.tensor([[0, 0, 1, 1], [1, 1, 2, 2]])


def test_nudge_statistics_are_per_prompt():
    # lam = 2, eps = 0.25. Prompt 0: mu = 0.5, mu_1 = 1; dropout a = r - mu = [-0.5, -0.5]; hinted
    # a = (1 - 1) + 2 (1 - 0.5) = 1 -> a = [-0.5, -0.5, 1, 1], mean 0.25, centred [-0.75, -0.75, 0.75, 0.75],
    # population std 0.75 -> A = centred / (0.75 + 0.25) = [-0.75, -0.75, 0.75, 0.75].
    # Prompt 1: every reward 1 -> a = 0 -> A = 0 / (0 + 0.25) = 0.
    # (A mean or std pooled over both prompts would give prompt 0 mu = 0.75, mean a 0.125, another std.)
    got = nudge_advantages(REWARDS, CONTEXTS, lam=2.0, eps=0.25)
    assert got.tolist() == [[-0.75, -0.75, 0.75, 0.75], [0.0, 0.0, 0.0, 0.0]]


def test_nudge_dtypes():
    # float rewards keep their dtype; integer ones are computed in float64 (same values as above)
    assert nudge_advantages(REWARDS, CONTEXTS, lam=2.0, eps=0.25).dtype == torch.float32
    got = nudge_advantages(REWARDS.long(), CONTEXTS, lam=2.0, eps=0.25)
    assert got.dtype == torch.float64
    assert got.tolist() == [[-0.75, -0.75, 0.75, 0.75], [0.0, 0.0, 0.0, 0.0]]


def test_nudge_default_lam_is_1_1():
    # contexts [0, 1, 1, 1], rewards [0, 1, 1, 0]: mu = 0.5, mu_1 = 2/3; a = [-0.5, 1/3 + lam/6 (x2), -2/3 + lam/6]
    # lam = 1.1: a = [-0.5, 0.516667, 0.516667, -0.483333], mean 0.0125, centred [-0.5125, 0.504167 (x2),
    # -0.495833], var (0.262656 + 2 * 0.254184 + 0.245851) / 4 = 0.254219, std 0.504201
    # -> A = [-1.016439, 0.999912, 0.999912, -0.983384] (eps 1e-5 in the denominator)
    r, c = torch.tensor([[0.0, 1.0, 1.0, 0.0]]), torch.tensor([[0, 1, 1, 1]])
    got = nudge_advantages(r, c)
    assert got.tolist()[0] == pytest.approx([-1.016439, 0.999912, 0.999912, -0.983384], abs=1e-5)
    assert torch.equal(got, nudge_advantages(r, c, lam=1.1))
    # lam = 2.1: a = [-0.5, 0.683333 (x2), -0.316667]: another shape, so the default is not 2.1
    assert not torch.allclose(got, nudge_advantages(r, c, lam=2.1), atol=1e-3)


def test_nudge_errors_name_the_problem():
    with pytest.raises(ValueError, match=_exact("rewards and contexts must both be (B, G); got (1, 4) and (1, 3)")):
        nudge_advantages(torch.zeros(1, 4), torch.zeros(1, 3, dtype=torch.long))
    with pytest.raises(ValueError, match=_exact("rewards and contexts must both be (B, G); got (4,) and (4,)")):
        nudge_advantages(torch.zeros(4), torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match=_exact("contexts must be integer ids >= 0 (0 = bare prompt, j = hint j)")):
        nudge_advantages(torch.zeros(1, 4), torch.tensor([[0, -1, 1, 1]]))


# ------------------------------------------------------------------ NudgeRL dropout draws and layout


def test_dropout_counts_bounds():
    # the smallest valid call M = K = 1; p = 1 always drops (rand < 1), p = 0 never (rand >= 0)
    assert nudge_dropout_counts(1, 1, 1.0, _gen()) == [1]
    assert nudge_dropout_counts(1, 1, 0.0, _gen()) == [0]
    for m, k, p in ((0, 2, 0.5), (2, 0, 0.5), (2, 2, 1.5), (2, 2, -0.1)):
        msg = f"nudge_dropout_counts needs M >= 1, K >= 1, 0 <= p_drop <= 1; got M={m}, K={k}, p_drop={p}"
        with pytest.raises(ValueError, match=_exact(msg)):
            nudge_dropout_counts(m, k, p, _gen())


def test_dropout_coin_is_strictly_below_p():
    # a coin drops its rollout iff its draw u < p_drop: with p_drop equal to the draw itself it stays
    u = float(torch.rand(1, 1, generator=_gen(3))[0, 0])
    assert nudge_dropout_counts(1, 1, u, _gen(3)) == [0]


def test_contexts_accept_counts_zero_and_k():
    # d = [0, 2], K = 2: bare 0 + 2 = 2 ids, hint 1 keeps 2 - 0 = 2, hint 2 keeps 2 - 2 = 0
    assert nudge_contexts([0, 2], 2) == [0, 0, 1, 1]


# ------------------------------------------------------------------ CIPO


def test_cipo_select_errors():
    bad = [
        (torch.zeros(4), {}, "(4,), p_max=0.75, q0=0.5"),
        (torch.zeros(1, 4), {"q0": 1.5}, "(1, 4), p_max=0.75, q0=1.5"),
        (torch.zeros(1, 4), {"p_max": 0.0}, "(1, 4), p_max=0.0, q0=0.5"),
        (torch.zeros(1, 4), {"p_max": 1.5}, "(1, 4), p_max=1.5, q0=0.5"),
    ]
    for correct, kw, tail in bad:
        msg = f"cipo_select needs (B, G) correct, 0 < p_max <= 1, 0 <= q0 <= 1; got shape {tail}"
        with pytest.raises(ValueError, match=_exact(msg)):
            cipo_select(correct, generator=_gen(), **kw)


def test_cipo_select_draws_float64_uniforms_and_q0_is_strict():
    # 16 prompts with p = 0: prompt i is selected iff its float64 draw u_i < q0 (default q0 = 0.5)
    zeros = torch.zeros(16, 4)
    u = torch.rand(16, generator=_gen(5), dtype=torch.float64).tolist()
    got = cipo_select(zeros, generator=_gen(5)).tolist()
    assert got == [x < 0.5 for x in u]
    assert got == cipo_select(zeros, q0=0.5, generator=_gen(5)).tolist()
    # q0 equal to prompt 0's own draw: u_0 < u_0 is false, so it is not selected
    assert cipo_select(zeros[:1], q0=u[0], generator=_gen(5)).tolist() == [False]


def test_cipo_pick_failure_takes_the_best_scored_wrong_rollout_of_the_generator():
    # one float64 score per rollout from the generator; the highest-scoring wrong rollout is taken (the
    # global RNG plays no part: reseeding it changes nothing)
    correct = torch.tensor([[0, 0, 0, 0, 0, 0, 0, 0], [0, 1, 0, 1, 0, 1, 0, 1], [1] * 8, [0] * 8])
    selected = torch.tensor([True, True, True, False])
    scores = torch.rand(4, 8, generator=_gen(9), dtype=torch.float64).tolist()
    want = [max((scores[i][j], j) for j in range(8) if correct[i, j] == 0)[1] for i in range(2)] + [-1, -1]
    torch.manual_seed(0)
    assert cipo_pick_failure(correct, selected, _gen(9)).tolist() == want
    torch.manual_seed(1)
    assert cipo_pick_failure(correct, selected, _gen(9)).tolist() == want


def test_cipo_pick_failure_error():
    msg = "cipo_pick_failure: correct (B, G) and selected (B,) expected, got (2, 4) and (3,)"
    with pytest.raises(ValueError, match=_exact(msg)):
        cipo_pick_failure(torch.zeros(2, 4), torch.ones(3, dtype=torch.bool), _gen())


def test_cipo_reward_default_kappa_and_rewards_error():
    # a wrong correction that repeats the failed answer: -kappa, spec kappa = 0.5
    assert cipo_reward(False, "7", "7") == -0.5
    assert cipo_rewards([False], ["7"], "7").tolist() == [-0.5]
    with pytest.raises(ValueError, match=_exact("cipo_rewards: 2 correctness flags but 1 answers")):
        cipo_rewards([True, False], ["7"], "7")


# ------------------------------------------------------------------ STRIDE


def test_first_error_step_one_is_valid():
    # steps are numbered from 1: the first step is a valid answer, 0 is not
    assert parse_first_error("<first_error>1</first_error>") == 1
    assert parse_first_error("<first_error> 2 </first_error>") == 2
    assert parse_first_error("<first_error>0</first_error>") is None
