"""GAE, the clipped value loss and the Bradley-Terry loss, by hand (advantages/gae.py, losses/value.py),
and a toy PPO bandit with a critic that must find the best of 4 responses."""

import pytest
import torch

from reasonrl.advantages.gae import gae, last_token_rewards, masked_whiten
from reasonrl.losses.policy import policy_loss
from reasonrl.losses.value import bt_loss, value_loss


def test_gae_gamma_lam_one_terminal_reward_gives_r_minus_value_and_returns_r():
    # spec 8 (d): with gamma = lam = 1 and one terminal reward r the TD errors telescope, so
    # A_t = r - V(s_t) and R_t = r. Row 0: r = 1, V = (0.2, 0.5, 0.9) -> A = (0.8, 0.5, 0.1).
    # Row 1: r = -1 on its 2nd (last real) token, V = (0.5, -0.5) and a padded 3rd position whose
    # value 7 must not matter -> A = (-1.5, -0.5, 0), R = (-1, -1, 0).
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    rewards = last_token_rewards(torch.tensor([1.0, -1.0]), mask)
    assert rewards.tolist() == [[0.0, 0.0, 1.0], [0.0, -1.0, 0.0]]
    values = torch.tensor([[0.2, 0.5, 0.9], [0.5, -0.5, 7.0]])
    adv, ret = gae(rewards, values, mask, gamma=1.0, lam=1.0)
    assert torch.allclose(adv, torch.tensor([[0.8, 0.5, 0.1], [-1.5, -0.5, 0.0]]))
    assert torch.allclose(ret, torch.tensor([[1.0, 1.0, 1.0], [-1.0, -1.0, 0.0]]))


def test_gae_with_gamma_and_lambda_below_one_on_four_tokens_by_hand():
    # gamma 0.9, lam 0.8 (gamma lam = 0.72), r = (0, 0, 0, 1), V = (0.1, 0.2, 0.3, 0.4).
    # TD errors delta_t = r_t + 0.9 V_{t+1} - V_t (V_4 = 0):
    #   delta_3 = 1 - 0.4 = 0.6;  delta_2 = 0.36 - 0.3 = 0.06;
    #   delta_1 = 0.27 - 0.2 = 0.07;  delta_0 = 0.18 - 0.1 = 0.08
    # A_t = sum_k 0.72^k delta_{t+k}  (0.72^2 = 0.5184, 0.72^3 = 0.373248):
    #   A_3 = 0.6
    #   A_2 = 0.06 + 0.72 * 0.6 = 0.492
    #   A_1 = 0.07 + 0.72 * 0.06 + 0.5184 * 0.6 = 0.07 + 0.0432 + 0.31104 = 0.42424
    #   A_0 = 0.08 + 0.72 * 0.07 + 0.5184 * 0.06 + 0.373248 * 0.6 = 0.08 + 0.0504 + 0.031104 + 0.2239488 = 0.3854528
    # returns R_t = A_t + V_t = (0.4854528, 0.62424, 0.792, 1.0)
    adv, ret = gae(
        torch.tensor([[0.0, 0.0, 0.0, 1.0]]), torch.tensor([[0.1, 0.2, 0.3, 0.4]]), torch.ones(1, 4), gamma=0.9, lam=0.8
    )
    assert torch.allclose(adv, torch.tensor([[0.3854528, 0.42424, 0.492, 0.6]]), atol=1e-6)
    assert torch.allclose(ret, torch.tensor([[0.4854528, 0.62424, 0.792, 1.0]]), atol=1e-6)


def test_masked_positions_carry_the_value_and_the_running_advantage():
    # a multi-turn episode: policy tokens at 0 and 3, tool-observation tokens at 1 and 2 (mask 0).
    # The observation is no step: token 0 bootstraps from V at token 3 = 0.4, so with gamma 0.9,
    # lam 0.8: A_3 = 1 - 0.4 = 0.6, A_0 = (0.9 * 0.4 - 0.1) + 0.72 * 0.6 = 0.26 + 0.432 = 0.692,
    # exactly the 2-token episode (V = 0.1, 0.4) without the observation.
    mask = torch.tensor([[1, 0, 0, 1]])
    rewards = torch.tensor([[0.0, 0.0, 0.0, 1.0]])
    adv, ret = gae(rewards, torch.tensor([[0.1, 3.0, -2.0, 0.4]]), mask, gamma=0.9, lam=0.8)
    assert torch.allclose(adv, torch.tensor([[0.692, 0.0, 0.0, 0.6]]), atol=1e-6)
    short, _ = gae(torch.tensor([[0.0, 1.0]]), torch.tensor([[0.1, 0.4]]), torch.ones(1, 2), gamma=0.9, lam=0.8)
    assert torch.allclose(adv[:, [0, 3]], short, atol=1e-6)
    # changing values (or placing a reward) only at masked positions changes nothing (verl's test)
    for values, rew in (
        (torch.tensor([[0.1, -9.0, 5.0, 0.4]]), rewards),
        (torch.tensor([[0.1, 3.0, -2.0, 0.4]]), torch.tensor([[0.0, 5.0, 0.0, 1.0]])),
    ):
        adv2, ret2 = gae(rew, values, mask, gamma=0.9, lam=0.8)
        assert torch.equal(adv2, adv) and torch.equal(ret2, ret)


def test_gae_works_on_any_mask_and_rejects_bad_shapes():
    # a mask with a hole and a trailing pad; the last trainable token (index 2) takes the reward
    mask = torch.tensor([[1, 0, 1, 0]])
    assert last_token_rewards(torch.tensor([2.0]), mask).tolist() == [[0.0, 0.0, 2.0, 0.0]]
    assert last_token_rewards(torch.tensor([2.0]), torch.zeros(1, 3)).tolist() == [[0.0, 0.0, 0.0]]  # no token: none
    with pytest.raises(ValueError, match="one \\(B, T\\) shape"):
        gae(torch.zeros(2, 3), torch.zeros(2, 4), torch.ones(2, 3))
    with pytest.raises(ValueError, match="gamma and lam in \\[0, 1\\]"):
        gae(torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1, 2), gamma=1.5)


def test_masked_whiten_by_hand():
    # entries 1, 2, 3 (the 4th masked out): mean 2, Bessel variance (1 + 0 + 1) / 2 = 1 -> -1, 0, 1; masked -> 0
    out = masked_whiten(torch.tensor([[1.0, 2.0], [3.0, 100.0]]), torch.tensor([[1, 1], [1, 0]]), eps=0.0)
    assert torch.allclose(out, torch.tensor([[-1.0, 0.0], [1.0, 0.0]]))


def test_value_loss_clipping_by_hand():
    # token 0: V = 1, V_old = 0, R = 2: unclipped error (1 - 2)^2 = 1; V clipped to 0 + 0.5 = 0.5 gives
    #   (0.5 - 2)^2 = 2.25, the larger, so it is used (and its gradient is 0: the clip is saturated)
    # token 1: V = 0, V_old = 0, R = -1: both branches (0 + 1)^2 = 1; d/dV 0.5 * (V + 1)^2 / 2 = 0.5
    # token mean: 0.5 * (2.25 + 1) / 2 = 0.8125; the clipped branch is the larger on 1 of 2 tokens
    v = torch.tensor([[1.0, 0.0]], requires_grad=True)
    loss, m = value_loss(v, torch.zeros(1, 2), torch.tensor([[2.0, -1.0]]), torch.ones(1, 2), clip=0.5)
    assert loss.item() == pytest.approx(0.8125)
    assert m["critic/vf_clip_frac"] == 0.5 and m["critic/value_error"] == pytest.approx(1.0)
    loss.backward()
    assert v.grad.tolist() == [[0.0, 0.5]]
    # no clip: 0.5 * (1 + 1) / 2 = 0.5
    assert value_loss(v, torch.zeros(1, 2), torch.tensor([[2.0, -1.0]]), torch.ones(1, 2), clip=None)[0].item() == 0.5


def test_bt_loss_falls_as_the_chosen_reward_rises():
    # -log sigmoid(d) = log(1 + e^-d): d = 0 -> log 2 = 0.693147; d = 2 -> log(1.135335) = 0.126928
    # margin 1 with d = 2: log(1 + e^-1) = log(1.367879) = 0.313262; centring 0.01 * (2 + 0)^2 = 0.04 on top
    rej = torch.zeros(1)
    losses = [bt_loss(torch.tensor([c]), rej)[0].item() for c in (-1.0, 0.0, 1.0, 2.0)]
    assert losses == sorted(losses, reverse=True)
    assert losses[1] == pytest.approx(0.693147, abs=1e-6) and losses[3] == pytest.approx(0.126928, abs=1e-6)
    assert bt_loss(torch.tensor([2.0]), rej, margin=1.0)[0].item() == pytest.approx(0.313262, abs=1e-6)
    loss, m = bt_loss(torch.tensor([2.0]), rej, center_coef=0.01)
    assert loss.item() == pytest.approx(0.166928, abs=1e-6) and m["rm/accuracy"] == 1.0 and m["rm/margin"] == 2.0
    # the gradient raises the chosen reward and lowers the rejected one
    c, r = torch.zeros(1, requires_grad=True), torch.zeros(1, requires_grad=True)
    bt_loss(c, r)[0].backward()
    assert c.grad.item() == pytest.approx(-0.5) and r.grad.item() == pytest.approx(0.5)  # -sigmoid(-0) = -0.5


def test_toy_ppo_bandit_with_a_critic_converges_to_the_best_response():
    # spec 8 (d): a softmax over 4 responses, fixed reward-model scores, a learned value V (one
    # prompt, one token per episode: GAE with gamma = lam = 1 gives A = r - V), PPO-clip actor and
    # clipped value loss, 2 epochs per batch of 32 samples
    torch.manual_seed(0)
    scores = torch.tensor([0.1, 0.5, 1.0, 0.2])
    logits, v = torch.zeros(4, requires_grad=True), torch.zeros(1, requires_grad=True)
    opt = torch.optim.Adam([{"params": [logits], "lr": 0.05}, {"params": [v], "lr": 0.1}])
    gen = torch.Generator().manual_seed(0)
    for _ in range(120):
        with torch.no_grad():
            acts = torch.multinomial(torch.softmax(logits, 0), 32, replacement=True, generator=gen)  # (32,)
            old_logp = torch.log_softmax(logits, 0)[acts][:, None]  # (32, 1)
            old_v = v.expand(32)[:, None].clone()
        mask = torch.ones(32, 1)
        adv, ret = gae(last_token_rewards(scores[acts], mask), old_v, mask)
        for _ in range(2):
            logp = torch.log_softmax(logits, 0)[acts][:, None]
            pl, _ = policy_loss(logp, old_logp, adv, mask, agg="token-mean")
            vl, _ = value_loss(v.expand(32)[:, None], old_v, ret, mask, clip=0.5)
            opt.zero_grad()
            (pl + vl).backward()
            opt.step()
    probs = torch.softmax(logits, 0)
    assert probs.argmax().item() == 2 and probs[2].item() > 0.9
    assert abs(v.item() - 1.0) < 0.2  # the critic tracks the best response's score as the policy settles on it


# ------------------------------------------------------------------ cases the mutation run found untested (issue 45)


def test_masked_whiten_two_entries_default_eps_and_an_empty_mask():
    # two entries 1, 3: mean 2, centred -1, +1, Bessel variance (1 + 1) / 1 = 2 -> -1 / sqrt(2) = -0.707107
    out = masked_whiten(torch.tensor([[1.0, 3.0, 50.0]]), torch.tensor([[1, 1, 0]]))
    assert torch.allclose(out, torch.tensor([[-0.707107, 0.707107, 0.0]]), atol=1e-6)
    # the default eps is 1e-8: values 0 and 1e-4 have variance 5e-9, so +-5e-5 / sqrt(1.5e-8) = +-0.408248
    tiny = masked_whiten(torch.tensor([[0.0, 1e-4]], dtype=torch.float64), torch.ones(1, 2))
    assert torch.allclose(tiny, torch.tensor([[-0.408248, 0.408248]], dtype=torch.float64), atol=1e-6)
    assert torch.equal(masked_whiten(torch.tensor([[4.0, 5.0]]), torch.zeros(1, 2)), torch.zeros(1, 2))


@pytest.mark.parametrize(
    "scores,mask,shapes",
    [
        (torch.zeros(2, 1), torch.ones(2, 3), r"got \(2, 1\) and \(2, 3\)"),  # scores not (B,)
        (torch.zeros(2), torch.ones(3), r"got \(2,\) and \(3,\)"),  # mask not (B, T)
        (torch.zeros(2), torch.ones(3, 4), r"got \(2,\) and \(3, 4\)"),  # B differs
    ],
)
def test_last_token_rewards_refuses_other_shapes_naming_them(scores, mask, shapes):
    with pytest.raises(ValueError, match=r"last_token_rewards needs \(B,\) scores and a \(B, T\) mask; " + shapes):
        last_token_rewards(scores, mask)


def test_gae_at_the_ends_of_gamma_and_lam_and_the_reward_dtype():
    from reasonrl.advantages.gae import gae

    # one row, rewards (0, 1), values (0.5, 0.25). gamma = 0: A_t = r_t - V_t = (-0.5, 0.75).
    # lam = 0 (gamma 1): one-step TD, A_0 = 0 + V_1 - V_0 = -0.25, A_1 = 1 - 0.25 = 0.75
    r, v, m = torch.tensor([[0.0, 1.0]]), torch.tensor([[0.5, 0.25]]), torch.ones(1, 2)
    assert torch.allclose(gae(r, v, m, gamma=0.0, lam=1.0)[0], torch.tensor([[-0.5, 0.75]]))
    assert torch.allclose(gae(r, v, m, gamma=1.0, lam=0.0)[0], torch.tensor([[-0.25, 0.75]]))
    with pytest.raises(ValueError, match=r"gae needs gamma and lam in \[0, 1\], got gamma=1.0, lam=1.5"):
        gae(r, v, m, gamma=1.0, lam=1.5)
    assert last_token_rewards(torch.tensor([2.0], dtype=torch.float64), torch.ones(1, 2)).dtype == torch.float64
