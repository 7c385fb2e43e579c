"""SAGE building blocks at their edges: the q range, the cyclic schedule's bounds, the random draws
(keys, dtype, device, generator), the draws check, and the surprisal norms on small rows.
Pure tensors, every expected number worked by hand in a comment."""

import pytest
import torch

from reasonrl.losses.anchors import (
    branch_guide,
    cyclic_cosine,
    guide_draws,
    guide_schedule,
    random_guide,
    shaped_kl,
    surprisal_weights,
    token_guide,
)

D = torch.float64


def t(rows, dtype=D):
    return torch.tensor(rows, dtype=dtype)


def raises_exactly(message, fn, *args, **kwargs):
    with pytest.raises(ValueError) as info:
        fn(*args, **kwargs)
    assert str(info.value) == message


# --- the q range ---------------------------------------------------------------------------------


def test_q_range_accepts_its_closed_bounds():
    # q_min = 0 is allowed: H = 0.5 -> 1, H = 5.0 -> 1 + 0.3 * 3.8 = 2.14 -> q_max 1.4
    q = branch_guide(t([[0.5, 5.0]]), t([[1, 1]]), q_min=0.0)
    assert q[0].tolist() == pytest.approx([1.0, 1.4])
    # q_min = q_max = 1.2 pins every real token to 1.2; padding stays exactly 1
    q = branch_guide(t([[0.5, 5.0, 5.0]]), t([[1, 1, 0]]), q_min=1.2, q_max=1.2)
    assert q[0].tolist() == pytest.approx([1.2, 1.2, 1.0])


# --- the cyclic cosine schedule ------------------------------------------------------------------

UP, LO = (1.0, 0.5), (0.0, 0.1)


def test_cyclic_cosine_one_cycle_one_step_and_uneven_split():
    # n_cycles = 1 is valid: one cycle of 4 steps; step 2 -> anneal (1 + cos(pi/2)) / 2 = 0.5
    # -> (0 + 1 * 0.5, 0.1 + 0.4 * 0.5) = (0.5, 0.3)
    assert cyclic_cosine(2, max_steps=4, upper=UP, lower=LO, n_cycles=1) == pytest.approx((0.5, 0.3))
    # max_steps = 1 is valid: 1 // 8 = 0 -> cycles of length 1 (the floor), so step 3 is cycle 3 at anneal 1:
    # upper * 0.9^3 = (0.729, 0.3645) (cycles of length 2 would give cycle 1 at anneal 0.5: (0.45, 0.275))
    assert cyclic_cosine(3, max_steps=1, upper=UP, lower=LO) == pytest.approx((0.729, 0.3645))
    # 20 steps in 8 cycles: integer length 20 // 8 = 2, so step 2 starts cycle 1 -> upper * 0.9 = (0.9, 0.45)
    # (a length of 2.5 would put step 2 inside cycle 0 at anneal (1 + cos(0.8 pi)) / 2 = 0.0955)
    assert cyclic_cosine(2, max_steps=20, upper=UP, lower=LO) == pytest.approx((0.9, 0.45))


def test_cyclic_cosine_rejects_a_negative_step_and_an_empty_run():
    raises_exactly(
        "need n_cycles >= 1, max_steps >= 1, step >= 0; got 8, 16, -1",
        cyclic_cosine,
        -1,
        max_steps=16,
        upper=UP,
        lower=LO,
    )
    raises_exactly(
        "need n_cycles >= 1, max_steps >= 1, step >= 0; got 8, 0, 0", cyclic_cosine, 0, max_steps=0, upper=UP, lower=LO
    )


def test_guide_schedule_defaults_and_forwarded_options():
    # defaults 8 cycles, decay 0.9: 16 steps -> cycles of 2; step 2 starts cycle 1 -> 0.9 * (0.3, 0.25)
    # = (0.27, 0.225) (9 cycles would give length 1, cycle 2: (0.243, 0.2025); decay 1.9: (0.57, 0.475))
    assert guide_schedule("token", 2, 16) == pytest.approx((0.27, 0.225))
    # own options: 2 cycles of 4; step 6 is cycle 1 at anneal (1 + cos(pi/2)) / 2 = 0.5, start 0.5 * (1, 0.8)
    # -> eps 0 + 0.5 * 0.5 = 0.25, sigma 0.2 + (0.4 - 0.2) * 0.5 = 0.3
    # (the default 8 cycles would give length 1, cycle 6: 0.5^6 * (1, 0.8) = (0.015625, 0.0125);
    #  the default decay 0.9: (0.225, 0.46))
    got = guide_schedule("random", 6, 8, n_cycles=2, decay=0.5, upper=(1.0, 0.8), lower=(0.0, 0.2))
    assert got == pytest.approx((0.25, 0.3))
    raises_exactly("only the token and random guides have a schedule, got 'branch'", guide_schedule, "branch", 0, 16)


# --- the draws -----------------------------------------------------------------------------------


def test_guide_draws_keys_dtype_and_order():
    raises_exactly("unknown SAGE guide 'uniform'; valid values: branch, token, random", guide_draws, "uniform", (1, 2))
    assert guide_draws("branch", (2, 3)) == {}
    # without generator nor device: fresh draws from the global generator, on the CPU
    d = guide_draws("random", (2, 3))
    assert set(d) == {"uniform", "normal"} and all(v.shape == (2, 3) and v.device.type == "cpu" for v in d.values())
    # float32 whatever torch's default dtype
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        d = guide_draws("random", (2, 3), generator=torch.Generator().manual_seed(1))
    finally:
        torch.set_default_dtype(old)
    assert d["uniform"].dtype == d["normal"].dtype == torch.float32
    # the uniforms then the normals, both from the given generator
    g = torch.Generator().manual_seed(7)
    u, z = torch.rand((2, 3), generator=g), torch.randn((2, 3), generator=g)
    d = guide_draws("random", (2, 3), generator=torch.Generator().manual_seed(7))
    assert torch.equal(d["uniform"], u) and torch.equal(d["normal"], z)
    assert set(guide_draws("token", (2, 3))) == {"normal"}


def test_guide_draws_device():
    # an explicit device is used ("meta" stands in for an accelerator on a CPU-only machine)
    d = guide_draws("random", (2, 3), device="meta")
    assert {v.device.type for v in d.values()} == {"meta"}
    # without a device the draws follow the generator's device, not torch's default device
    with torch.device("meta"):
        d = guide_draws("random", (2, 3), generator=torch.Generator().manual_seed(0))
    assert {v.device.type for v in d.values()} == {"cpu"}


MASK = t([[1, 1, 1, 0]])
DRAWS = {"uniform": t([[0.05, 0.5, 0.01, 0.0]]), "normal": t([[2.0, 1.0, -1.0, 3.0]])}


def test_given_draws_are_checked_and_used_without_touching_the_global_generator():
    # eps 0.1, sigma 0.15: uniforms < 0.1 at t0, t2 -> 1 + 0.15 * 2 = 1.3 and 1 - 0.15 = 0.85; t1 -> 1;
    # t3 is padding -> 1
    torch.manual_seed(11)
    ahead = torch.rand(1)
    torch.manual_seed(11)
    q = random_guide(MASK, eps=0.1, sigma=0.15, draws=DRAWS)
    assert q[0].tolist() == pytest.approx([1.3, 1.0, 0.85, 1.0])
    assert torch.equal(torch.rand(1), ahead)  # checking the draws drew nothing
    raises_exactly(
        "the random guide needs draws ['normal', 'uniform'] of shape (1, 4), got {'normal': (1, 4)}",
        random_guide,
        MASK,
        eps=0.1,
        sigma=0.15,
        draws={"normal": DRAWS["normal"]},
    )
    raises_exactly(
        "the random guide needs draws ['normal', 'uniform'] of shape (1, 4), got {'uniform': (1, 3), 'normal': (1, 4)}",
        random_guide,
        MASK,
        eps=0.1,
        sigma=0.15,
        draws={"uniform": DRAWS["uniform"][:, :3], "normal": DRAWS["normal"]},
    )


def test_fresh_draws_live_on_the_mask_device_or_come_from_the_generator():
    # no generator: drawn on the mask's device (CPU), not torch's default device;
    # eps 1 hits every token (uniforms < 1), sigma 0 -> q = 1
    mask = torch.ones(1, 3, dtype=D)
    with torch.device("meta"):
        q = random_guide(mask, eps=1.0, sigma=0.0)
    assert q.device.type == "cpu" and q.tolist() == [[1.0, 1.0, 1.0]]
    # a CPU generator serving a mask elsewhere ("meta" for an accelerator): the numbers are drawn by the
    # generator (3 uniforms then 3 normals advance it), then moved to the mask's device
    g, ref = torch.Generator().manual_seed(0), torch.Generator().manual_seed(0)
    torch.rand((1, 3), generator=ref), torch.randn((1, 3), generator=ref)
    q = random_guide(torch.ones(1, 3, device="meta"), eps=0.5, sigma=0.1, generator=g)
    assert q.device.type == "meta" and torch.equal(g.get_state(), ref.get_state())


# --- surprisal norms on small rows, shaped_kl's message ------------------------------------------


def test_surprisal_norms_on_two_tokens_with_a_spread_below_one():
    mask = t([[1, 1]])
    # rank of s = [1, 3]: [0, 1] / (2 - 1) = [0, 1]
    assert surprisal_weights(t([[-1.0, -3.0]]), mask, "rank")[0].tolist() == [0.0, 1.0]
    # minmax of s = [0.5, 0.7]: quantile clip to [0.51, 0.69], range 0.18 -> w = [0, 1]
    assert surprisal_weights(t([[-0.5, -0.7]]), mask)[0].tolist() == pytest.approx([0.0, 1.0])
    # zscore of s = [1, 2]: mean 1.5, population std 0.5 -> sigmoid(-1) = 0.26894142, sigmoid(1) = 0.73105858
    z = surprisal_weights(t([[-1.0, -2.0]]), mask, "zscore")
    assert z[0].tolist() == pytest.approx([0.26894142, 0.73105858], abs=1e-8)
    # the token guide sees the same weights: alpha 0.3, no noise -> q = [1, 1.3]
    assert token_guide(t([[-1.0, -3.0]]), mask, alpha=0.3, sigma=0.0, norm="rank")[0].tolist() == pytest.approx(
        [1.0, 1.3]
    )


def test_shaped_kl_names_every_shape():
    raises_exactly(
        "logp, ref_logp and q must have one shape; got (1, 2), (1, 3), (2, 2)",
        shaped_kl,
        torch.zeros(1, 2),
        torch.zeros(1, 3),
        torch.ones(2, 2),
    )
