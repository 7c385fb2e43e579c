"""SAGE's dispatcher and loss forward every option: the branch knobs, the schedule's options and
defaults, the draws and the generator, the surprisal source and norm, the aggregation counts and
the schedule metrics. Pure tensors, every expected number worked by hand in a comment."""

import math

import pytest
import torch

from reasonrl.losses.anchors import random_guide, sage_guide, sage_kl_loss, token_guide

D = torch.float64
L02 = math.log(0.2)
K13 = 1.3 - math.log(1.3) - 1  # shaped k3 at pi = pi_ref with q = 1.3: 1.3 - 0.26236426 - 1 = 0.03763574
K115 = 1.15 - math.log(1.15) - 1  # q = 1.15: 1.15 - 0.13976194 - 1 = 0.01023806


def t(rows):
    return torch.tensor(rows, dtype=D)


def raises_exactly(message, fn, *args, **kwargs):
    with pytest.raises(ValueError) as info:
        fn(*args, **kwargs)
    assert str(info.value) == message


ONES3 = t([[1, 1, 1]])
NEW = t([[-1.0, -2.0, -3.0]])  # surprisal [1, 2, 3] -> quantile clip [1.1, 2, 2.9] -> minmax w = [0, 0.5, 1]
REF = t([[-3.0, -2.0, -1.0]])  # the reverse: w = [1, 0.5, 0]


# --- sage_guide ----------------------------------------------------------------------------------


def test_branch_knobs_reach_the_branch_guide():
    # ratio 0.5, threshold 1, q in [1.1, 1.5]: H 0.5 -> 1 -> 1.1; H 1.6 -> 1 + 0.5 * 0.6 = 1.3; H 5 -> 3 -> 1.5
    # (defaults instead: ratio 0.3 -> 1.18, threshold 1.2 -> 1.2, q_min 0.6 -> 1, q_max 1.4 -> 1.4)
    q = sage_guide("branch", NEW, NEW, t([[0.5, 1.6, 5.0]]), ONES3, ratio=0.5, threshold=1.0, q_min=1.1, q_max=1.5)
    assert q[0].tolist() == pytest.approx([1.1, 1.3, 1.5])
    raises_exactly(
        "the branch guide needs per-token entropies (N, T); got entropy=None",
        sage_guide,
        "branch",
        NEW,
        NEW,
        None,
        ONES3,
    )


def test_random_guide_gets_the_schedule_options_bounds_and_draws():
    # 2 cycles of 4 steps, step 6: cycle 1, anneal 0.5, start 0.5 * (1, 0.8) -> eps 0.25, sigma 0.2 + 0.2 * 0.5 = 0.3
    # uniforms [0.2, 0.24, 0.3] < 0.25 hit t0, t1: q = 1 + 0.3 * [1, -1] = [1.3, 0.7] -> clamp [0.75, 1.25]; t2 -> 1
    # (default upper: eps 0.025 hits nothing; default lower: sigma 0.225 -> [1.225, 0.775];
    #  default 8 cycles: eps 0.015625; default decay 0.9: eps 0.225 misses t1, sigma 0.46)
    draws = {"uniform": t([[0.2, 0.24, 0.3]]), "normal": t([[1.0, -1.0, 1.0]])}
    opts = dict(step=6, max_steps=8, n_cycles=2, decay=0.5, upper=(1.0, 0.8), lower=(0.0, 0.2))
    q = sage_guide("random", NEW, NEW, None, ONES3, q_min=0.75, q_max=1.25, draws=draws, **opts)
    assert q[0].tolist() == pytest.approx([1.25, 0.75, 1.0])


def test_random_guide_schedule_defaults():
    # step defaults to 0: (eps, sigma) = (0.1, 0.15); uniform 0.07 hits -> 1 + 0.15 * 2 = 1.3
    # (step 1 would give eps 0.05 and miss)
    mask = t([[1, 1]])
    draws = {"uniform": t([[0.07, 0.5]]), "normal": t([[2.0, 2.0]])}
    assert sage_guide("random", NEW[:, :2], NEW[:, :2], None, mask, max_steps=16, draws=draws)[0].tolist() == (
        pytest.approx([1.3, 1.0])
    )
    # step 2 with the default 8 cycles and decay 0.9: cycle 1 at anneal 1 -> (0.09, 0.135); 0.085 hits -> 1.27
    # (9 cycles: eps 0.081 misses; decay 1.9: sigma 0.285 -> 1.57 -> 1.4)
    draws = {"uniform": t([[0.085, 0.5]]), "normal": t([[2.0, 2.0]])}
    q = sage_guide("random", NEW[:, :2], NEW[:, :2], None, mask, step=2, max_steps=16, draws=draws)
    assert q[0].tolist() == pytest.approx([1.27, 1.0])


def test_stochastic_guides_draw_from_the_given_generator():
    # upper eps 1 at step 0 perturbs every token with sigma 0.15: the same numbers as random_guide's from a
    # generator with the same seed
    q = sage_guide(
        "random", NEW, NEW, None, ONES3, max_steps=8, upper=(1.0, 0.15), generator=torch.Generator().manual_seed(3)
    )
    assert torch.equal(q, random_guide(ONES3, eps=1.0, sigma=0.15, generator=torch.Generator().manual_seed(3)))
    # token guide at step 0: alpha 0.3, sigma 0.25, noise from the generator
    q = sage_guide("token", NEW, NEW, None, ONES3, max_steps=8, generator=torch.Generator().manual_seed(4))
    expected = token_guide(NEW, ONES3, alpha=0.3, sigma=0.25, generator=torch.Generator().manual_seed(4))
    assert torch.equal(q, expected) and not torch.equal(q, token_guide(NEW, ONES3, alpha=0.3, sigma=0.0))


def test_token_guide_source_norm_bounds_and_draws():
    # step 0 of 16: alpha 0.3, sigma 0.25; z = [0, 1, -2]; q = 1 + 0.3 w + 0.25 w z
    # new (w = [0, 0.5, 1]): [1, 1 + 0.15 + 0.125 = 1.275, 1 + 0.3 - 0.5 = 0.8]
    # ref (w = [1, 0.5, 0]): [1.3, 1.275, 1]
    draws = {"normal": t([[0.0, 1.0, -2.0]])}
    args = ("token", NEW, REF, None, ONES3)
    assert sage_guide(*args, max_steps=16, draws=draws)[0].tolist() == pytest.approx([1.0, 1.275, 0.8])
    q = sage_guide(*args, max_steps=16, draws=draws, surprisal_source="ref")
    assert q[0].tolist() == pytest.approx([1.3, 1.275, 1.0])
    # bounds [0.9, 1.2] clamp the "new" q to [1, 1.2, 0.9]
    q = sage_guide(*args, max_steps=16, draws=draws, q_min=0.9, q_max=1.2)
    assert q[0].tolist() == pytest.approx([1.0, 1.2, 0.9])
    raises_exactly(
        "surprisal_source must be 'new' or 'ref', got 'old'", sage_guide, *args, max_steps=16, surprisal_source="old"
    )
    # norm: surprisal [1, 2, 4], rank w = [0, 0.5, 1] -> q = [1, 1.15, 1.3] without noise
    # (minmax: clip [1.1, 2, 3.8] -> w = [0, 1/3, 1] -> 1.1 in the middle)
    zero = {"normal": torch.zeros(1, 3, dtype=D)}
    q = sage_guide("token", t([[-1.0, -2.0, -4.0]]), REF, None, ONES3, max_steps=16, draws=zero, norm="rank")
    assert q[0].tolist() == pytest.approx([1.0, 1.15, 1.3])


# --- sage_kl_loss --------------------------------------------------------------------------------

PI = torch.full((1, 2), L02, dtype=D)  # pi = pi_ref = 0.2 on two tokens


def test_sage_kl_loss_passes_guide_options_and_counts():
    mask = t([[1, 1]])
    # ratio 0.5: H 1.8 -> 1 + 0.5 * 0.6 = 1.3 (default 0.3: 1.18); KL [K13, 0]; seq-mean-token-mean: K13 / 2
    loss, m = sage_kl_loss(PI, PI, t([[1.8, 0.5]]), mask, coef=1.0, ratio=0.5)
    assert loss.item() == pytest.approx(K13 / 2) and m["sage/q_max"] == pytest.approx(1.3)
    # H [2.2, 0.5] -> q [1.3, 1]; Dr. GRPO: K13 / (1 seq * norm_len 4) = 0.00940894
    ent = t([[2.2, 0.5]])
    loss, _ = sage_kl_loss(PI, PI, ent, mask, coef=1.0, agg="seq-mean-token-sum-norm", norm_len=4)
    assert loss.item() == pytest.approx(K13 / 4) == pytest.approx(0.00940894, abs=1e-8)
    # token-mean over a global count of 4 tokens: K13 / 4 (the local count 2 would give K13 / 2)
    loss, _ = sage_kl_loss(PI, PI, ent, mask, coef=1.0, agg="token-mean", n_tokens=4)
    assert loss.item() == pytest.approx(K13 / 4)
    # a q given in float64 to a float32 policy: the loss stays in the policy's dtype
    loss, _ = sage_kl_loss(PI.float(), PI.float(), None, mask, coef=1.0, q=t([[1.3, 1.0]]))
    assert loss.dtype == torch.float32 and loss.item() == pytest.approx(K13 / 2)


def test_sage_kl_loss_names_the_misshapen_input():
    mask = t([[1, 1]])
    for name in ("ref_logp", "mask", "entropy", "q"):
        kwargs = {"ref_logp": PI, "entropy": None, "mask": mask, "q": None}
        kwargs[name] = torch.zeros(1, 3, dtype=D)  # one token too many
        raises_exactly(
            f"{name} must have the shape of logp (1, 2), got (1, 3)",
            sage_kl_loss,
            PI,
            kwargs["ref_logp"],
            kwargs["entropy"],
            kwargs["mask"],
            coef=1.0,
            q=kwargs["q"],
        )


def test_sage_kl_loss_token_guide_with_the_default_step():
    # policy = reference = NEW, no noise: q = 1 + 0.3 w = [1, 1.15, 1.3] -> KL [0, K115, K13];
    # one row: (0 + 0.01023806 + 0.03763574) / 3 = 0.01595793; the schedule at step 0: alpha 0.3, sigma 0.25
    zero = {"normal": torch.zeros(1, 3, dtype=D)}
    loss, m = sage_kl_loss(NEW, NEW, None, ONES3, coef=1.0, guide="token", max_steps=16, draws=zero)
    assert loss.item() == pytest.approx((K115 + K13) / 3) == pytest.approx(0.01595793, abs=1e-8)
    assert (m["sage/alpha"], m["sage/sigma"]) == (pytest.approx(0.3), pytest.approx(0.25))
    # the reference's surprisal (the same log-probs here) gives the same q: mean (1 + 1.15 + 1.3) / 3 = 1.15
    _, m = sage_kl_loss(
        NEW, NEW, None, ONES3, coef=1.0, guide="token", max_steps=16, draws=zero, surprisal_source="ref"
    )
    assert m["sage/q_mean"] == pytest.approx(1.15) and m["sage/q_max"] == pytest.approx(1.3)


def test_sage_kl_loss_logs_the_schedule_with_every_option():
    # as in the sage_guide test: step 6 of 8, 2 cycles, decay 0.5, upper (1, 0.8), lower (0, 0.2)
    # -> eps 0.25, sigma 0.3 (step 0 instead: (1, 0.8); any option dropped changes sigma, see above)
    draws = {"uniform": t([[0.2, 0.24, 0.3]]), "normal": t([[1.0, -1.0, 1.0]])}
    opts = dict(step=6, max_steps=8, n_cycles=2, decay=0.5, upper=(1.0, 0.8), lower=(0.0, 0.2))
    _, m = sage_kl_loss(NEW, NEW, None, ONES3, coef=1.0, guide="random", draws=draws, **opts)
    assert (m["sage/eps"], m["sage/sigma"]) == (pytest.approx(0.25), pytest.approx(0.3))
    # q = [1.3, 0.7, 1] -> min 0.7, max 1.3, two of three shaped
    assert (m["sage/q_min"], m["sage/q_max"], m["sage/frac_shaped"]) == pytest.approx((0.7, 1.3, 2 / 3))
