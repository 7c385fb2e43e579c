"""PPO's critic part (parts/critic.py) in the loop: GAE on the batch's masks, the critic's own optimiser
group, warm-up, no KL, the value head on the policy's hidden states, and exact resume with the critic."""

import dataclasses
import signal
import subprocess
import sys

import pytest
import torch

from helpers import batch_context, text_rollouts
from reasonrl.config.train import TrainConfig
from reasonrl.models import build_tiny
from reasonrl.parts import Critic
from reasonrl.parts.protocol import Channel
from reasonrl.recipes import get_recipe
from reasonrl.tasks import get_task
from reasonrl.loop.trainer import Trainer


def _ctx(rewards, values, train_mask=None, step=0):
    ro = text_rollouts(["p"], ["abc", "ab"], 2)  # row 0: 3 tokens, row 1: 2 tokens (+1 padding)
    ro.train_mask = train_mask
    data = Channel(rows={"values": values})
    return batch_context(rewards=rewards, rollouts=ro, data=data, step=step)


def test_the_critic_turns_sequence_rewards_into_gae_on_the_trainable_tokens():
    # gamma = lam = 1: A_t = r - V_t on each row's tokens (row 0: r = 1, V = 0.5, 0.25, 0.75 -> 0.5, 0.75, 0.25;
    # row 1: r = 0, V = 0.5, -0.5 -> -0.5, 0.5), 0 on the padding; returns = r on every token
    values = torch.tensor([[0.5, 0.25, 0.75], [0.5, -0.5, 9.0]])
    ctx = _ctx(torch.tensor([[1.0, 0.0]]), values)
    adv, m = Critic(whiten=False).shape_advantages(torch.zeros(1, 2), ctx)
    assert adv.shape == (1, 2, 3)
    assert torch.allclose(adv[0], torch.tensor([[0.5, 0.75, 0.25], [-0.5, 0.5, 0.0]]))
    assert torch.allclose(ctx.data.rows["returns"], torch.tensor([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]]))
    assert m["critic/warmup"] == 0.0 and m["critic/returns_mean"] == pytest.approx(0.6)  # (1 + 1 + 1 + 0 + 0) / 5
    # whitened: the 5 token advantages sum to 1.5, mean 0.3; squared deviations 0.04 + 0.2025 + 0.0025 + 0.64 +
    # 0.04 = 0.925, Bessel variance 0.925 / 4 = 0.23125
    white, _ = Critic().shape_advantages(torch.zeros(1, 2), _ctx(torch.tensor([[1.0, 0.0]]), values))
    want = (torch.tensor([0.5, 0.75, 0.25, -0.5, 0.5]) - 0.3) / 0.23125**0.5
    assert torch.allclose(white[0][torch.tensor([[1, 1, 1], [1, 1, 0]]).bool()], want, atol=1e-5)


def test_an_episode_mask_puts_the_reward_on_the_last_policy_token_and_skips_observations():
    # row 0 is an episode: policy token, observation token (mask 0), policy token. gamma 0.5, lam 1:
    # A_2 = 1 - V_2 = 1 - 0.75 = 0.25; A_0 = 0.5 * 0.75 - 0.5 + 0.5 * 0.25 = 0 (V_1 = 100 is never read)
    values = torch.tensor([[0.5, 100.0, 0.75], [0.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 0, 1], [1, 1, 0]])
    adv, _ = Critic(gamma=0.5, whiten=False).shape_advantages(
        torch.zeros(1, 2), _ctx(torch.tensor([[1.0, 0.0]]), values, mask)
    )
    assert torch.allclose(adv[0, 0], torch.tensor([0.0, 0.0, 0.25]))


def test_critic_warmup_zeroes_the_actors_advantages_only_in_its_steps():
    values = torch.zeros(2, 3)
    warm, m = Critic(warmup_steps=2).shape_advantages(
        torch.zeros(1, 2), _ctx(torch.tensor([[1.0, 0.0]]), values, step=1)
    )
    assert bool((warm == 0).all()) and m["critic/warmup"] == 1.0
    after, m = Critic(warmup_steps=2).shape_advantages(
        torch.zeros(1, 2), _ctx(torch.tensor([[1.0, 0.0]]), values, step=2)
    )
    assert bool((after != 0).any()) and m["critic/warmup"] == 0.0


def test_the_hidden_state_before_each_token_is_the_one_its_logits_come_from():
    # score_completions(hidden=True): h_t is the decoder's output at the position whose logits score
    # completion token t (prompt length 3, left-padded to 4; completion 2 tokens, right-padded to 3),
    # so lm_head(h_t) reproduces log p(token t); the critic's own probe (policy_hidden) reads the same states
    from reasonrl.models.critic import policy_hidden
    from reasonrl.models.scoring import score_completions

    model, _ = build_tiny("tiny", seed=0)
    pi, pm = torch.tensor([[0, 5, 6, 7], [8, 9, 10, 11]]), torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]])
    ci, cm = torch.tensor([[12, 13, 0], [14, 15, 16]]), torch.tensor([[1, 1, 0], [1, 1, 1]])
    with torch.no_grad():
        lp, _, h = score_completions(model, pi, pm, ci, cm, hidden=True)
        assert h.shape == (2, 3, 128) and bool((h[0, 2] == 0).all())  # padding zeroed
        want = torch.log_softmax(model.lm_head(h), -1).gather(-1, ci[..., None]).squeeze(-1) * cm
        assert torch.allclose(lp, want, atol=1e-5)
        # row 1 (no padding): the state before completion token 0 is the last prompt position (index 3)
        full = model.model(
            input_ids=torch.cat([pi, ci], 1)[1:], attention_mask=torch.cat([pm, cm], 1)[1:]
        ).last_hidden_state
        assert torch.allclose(h[1], full[0, 3:6], atol=1e-5)
        assert torch.allclose(policy_hidden(model, pi, pm, ci, cm), h, atol=1e-5)


def _trainer(tmp_path, recipe, steps=2, **cfg):
    base = get_recipe(recipe) if isinstance(recipe, str) else recipe
    r = dataclasses.replace(base, group_size=2, sampling=dataclasses.replace(base.sampling, max_new_tokens=6))
    c = TrainConfig(
        steps=steps,
        prompts_per_step=2,
        eval_every=0,
        save_every=0,
        final_eval_problems=0,
        task_options={"max_digits": 1},
        **cfg,
    )
    model, tok = build_tiny("tiny", seed=0)
    return Trainer(model, tok, get_task("arithmetic", max_digits=1), r, c, tmp_path)


def test_ppo_has_no_kl_term_and_its_critic_trains_in_its_own_group(tmp_path):
    r = get_recipe("ppo")
    assert r.kl.coef == 0 and "reference" not in r.needs  # no KL: no reference model is even kept
    # grlo anchors to the start (inferred: the tiny reward model is hacked without it, docs/ppo.md)
    assert get_recipe("grlo").kl.coef == 0.5 and "reference" in get_recipe("grlo").needs
    tr = _trainer(tmp_path, "ppo")
    assert tr.ref is None and [g["name"] for g in tr.opt.param_groups] == ["policy", "critic.value"]
    assert tr.opt.param_groups[1]["lr"] == get_recipe("ppo").critic.lr
    critic = tr.modules["critic"]["value"].module
    before = [p.detach().clone() for p in critic.parameters()]
    m = tr.train_step()
    assert not any(k.startswith(("loss/kl", "sage/")) for k in m)
    assert {"critic/value_loss_term", "critic/explained_var", "grad_norm/critic.value"} <= set(m)
    assert any(not torch.equal(a, b) for a, b in zip(before, critic.parameters()))
    # the critic is not the policy: nothing of it reaches the policy's own weights (its own file in checkpoints)
    assert not any("value" in k or "critic" in k for k in tr.model.state_dict())


def test_during_critic_warmup_the_actor_does_not_move(tmp_path):
    recipe = dataclasses.replace(get_recipe("ppo"), critic=Critic(warmup_steps=1))
    tr = _trainer(tmp_path, recipe)
    policy = [p.detach().clone() for p in tr.model.parameters()]
    critic = [p.detach().clone() for p in tr.modules["critic"]["value"].module.parameters()]
    m = tr.train_step()
    assert m["critic/warmup"] == 1.0
    assert all(torch.equal(a, b) for a, b in zip(policy, tr.model.parameters()))  # zero gradient, AdamW moments 0
    assert any(not torch.equal(a, b) for a, b in zip(critic, tr.modules["critic"]["value"].module.parameters()))
    tr.train_step()
    assert any(not torch.equal(a, b) for a, b in zip(policy, tr.model.parameters()))  # after warm-up it learns


def test_a_value_head_reads_the_policys_own_forward(tmp_path):
    recipe = dataclasses.replace(get_recipe("ppo"), critic=Critic(model="head"))
    assert recipe.needs == {"hidden"}
    tr = _trainer(tmp_path, recipe)
    head = tr.modules["critic"]["value"].module
    assert sum(p.numel() for p in head.parameters()) == 128 + 1  # Linear(H=128, 1) on the tiny model
    m = tr.train_step()
    assert m["critic/value_loss_term"] > 0 and "grad_norm/critic.value" in m


def test_a_run_with_the_critic_resumes_exactly_in_process(tmp_path):
    tr = _trainer(tmp_path, "ppo", steps=2)
    tr.train_step()
    tr.save()
    straight = tr.train_step()
    again = _trainer(tmp_path, "ppo", steps=2)
    assert again.resume() == 1
    resumed = again.train_step()
    assert resumed["critic/value_error"] == straight["critic/value_error"]
    for a, b in (
        (tr.model, again.model),
        (tr.modules["critic"]["value"].module, again.modules["critic"]["value"].module),
    ):
        assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    sa, sb = tr.opt.state_dict()["state"], again.opt.state_dict()["state"]
    assert sa.keys() == sb.keys() and all(torch.equal(sa[k]["exp_avg_sq"], sb[k]["exp_avg_sq"]) for k in sa)


@pytest.mark.slow
@pytest.mark.parametrize("point", ["state", "rename"])
def test_ppo_killed_inside_a_save_resumes_with_the_critic_exact(point, tiny_dir, tmp_path):
    # a real process SIGKILLs itself inside its step-6 save (after the critic's file, before the trainer state;
    # or before the rename): the resumed run redoes steps 4-8 and matches the straight run's metrics, whose
    # critic/* values read the critic's weights at every step, and ends with the same critic file
    from harness import ENV, KILL_IN_SAVE, cli_cmd, metric_values, resume_and_check, run_ok, train_args

    straight_dir, run = tmp_path / "straight", tmp_path / "run"
    run_ok(cli_cmd(*train_args(tiny_dir, straight_dir, "ppo")))
    straight = {"values": metric_values(straight_dir / "metrics.jsonl"), "items_drawn": 8 * 4}
    killed = subprocess.run(
        [sys.executable, "-c", KILL_IN_SAVE, point, "6", *train_args(tiny_dir, run, "ppo")],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    resume_and_check(tiny_dir, run, "ppo", straight)
    assert {"critic/value_error", "critic/explained_var"} <= set(straight["values"][-1])
    name = "checkpoints/step-000008/modules/critic.value.safetensors"
    assert (run / name).read_bytes() == (straight_dir / name).read_bytes()
