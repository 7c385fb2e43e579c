"""Unlearnability diagnostic (spec distill-and-data.md section 12): classes, A-hat, per-rollout
gradients, cosines, run-folder reading and the `reasonrl diagnose unlearnable` command."""

from __future__ import annotations

import json

import pytest
import torch
import yaml
from typer.testing import CliRunner

from reasonrl.cli import app
from reasonrl.diagnostics.gradients import (
    gradient_names,
    lora_targets,
    mean_rollout_gradient,
    pick_correct,
    rollout_losses,
    with_lora,
)
from reasonrl.diagnostics.runs import load_run, max_rewards, pass_rates
from reasonrl.diagnostics.unlearnable import (
    block_means,
    block_of,
    classify,
    cosine_matrix,
    group_advantages,
    mean_similarity,
    scaled,
)
from reasonrl.diagnostics.unlearnable_report import sample_blocks
from reasonrl.errors import MissingPathError, UserError
from reasonrl.models import build_tiny
from reasonrl.rollout import Rollouts
from reasonrl.tasks import get_task, take_items


# ---------------------------------------------------------------- spec 12 (d)
def test_spec_cosines_and_mean_similarity():
    # g1 = (1,0,0), g2 = (1,1,0), g3 = (0,0,2): cos(1,2) = 1/sqrt(2) = 0.70711, cos(1,3) = cos(2,3) = 0;
    # mean similarity to the rest: prompt 1 (0.70711 + 0) / 2 = 0.35355, prompt 2 the same, prompt 3 0
    sim = cosine_matrix([torch.tensor([1.0, 0, 0]), torch.tensor([1.0, 1, 0]), torch.tensor([0.0, 0, 2])])
    assert sim[0, 1].item() == pytest.approx(0.70711, abs=1e-5)
    assert sim[0, 2].item() == pytest.approx(0.0, abs=1e-7) and sim[1, 2].item() == pytest.approx(0.0, abs=1e-7)
    assert torch.equal(sim, sim.T) and sim.diagonal().tolist() == [1.0, 1.0, 1.0]
    ms = mean_similarity(sim)
    assert ms.tolist() == pytest.approx([0.35355, 0.35355, 0.0], abs=1e-5)
    assert int(ms.argmin()) == 2  # prompt 3 is the outlier


def test_spec_group_advantages():
    # r = [1,0,0,0]: mean 0.25, population std sqrt(0.25 * 0.75) = 0.43301;
    # A = 0.75 / 0.43301 = 1.7321 and -0.25 / 0.43301 = -0.5774 (the 1e-6 moves the 5th decimal)
    r = torch.tensor([1.0, 0, 0, 0])
    assert r.std(correction=0).item() == pytest.approx(0.4330, abs=1e-4)
    assert group_advantages(r).tolist() == pytest.approx([1.7321, -0.5774, -0.5774, -0.5774], abs=1e-4)


def _rollouts(tok, prompt: str, completions: list[str]) -> Rollouts:
    p = torch.tensor([tok(prompt)["input_ids"]] * len(completions))  # (R, P) no padding
    ids = [tok(c)["input_ids"] for c in completions]
    T = max(map(len, ids))
    cid = torch.tensor([x + [tok.pad_token_id] * (T - len(x)) for x in ids])  # (R, T) right-padded
    cm = torch.tensor([[1] * len(x) + [0] * (T - len(x)) for x in ids])
    return Rollouts(
        prompts=[prompt] * len(ids),
        texts=completions,
        prompt_ids=p,
        prompt_mask=torch.ones_like(p),
        completion_ids=cid,
        completion_mask=cm,
        logprobs=torch.zeros(cid.shape),
        finish_reasons=["eos"] * len(ids),
    )


def test_spec_tiny_model_ratio_gradient_equals_minus_a_grad_mean_logp():
    # the per-rollout gradient via exp(lp - sg lp) must equal -A * grad mean_t lp, row by row, and
    # mean_rollout_gradient is their mean; B is set non-zero so that the A matrices get gradient too.
    # lp is the log-softmax of the RAW logits by default (the source's gradient pass; issue #26): the
    # reference below reads model(...).logits directly, not through the scoring helper. Checked by
    # making the default temperature 0.7 again: the default-temperature assertion fails.
    model, tok = build_tiny("tiny", seed=0)
    model = with_lora(model)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.05, generator=torch.Generator().manual_seed(1))
    names = gradient_names(model)
    ro = _rollouts(tok, "12+34=?\n", ["46\nA: 46", "4 A: 47 x"])
    adv = torch.tensor([1.5, 0.5])
    params = dict(model.named_parameters())

    def want(temperature: float) -> torch.Tensor:
        out = 0
        for i in range(2):
            n = int(ro.completion_mask[i].sum())
            ids = torch.cat([ro.prompt_ids[i], ro.completion_ids[i, :n]])[None]  # (1, P + n) no padding
            logits = model(input_ids=ids).logits[0, -n - 1 : -1] / temperature  # (n, V) predicting the completion
            lp = logits.log_softmax(-1).gather(-1, ids[0, -n:, None]).squeeze(-1)  # (n,)
            g = torch.autograd.grad(-adv[i] * lp.mean(), [params[k] for k in names])
            out = out + torch.cat([x.reshape(-1) for x in g]) / 2
        return out

    raw, tempered = want(1.0), want(0.7)
    got = mean_rollout_gradient(model, names, ro, adv)  # the default: raw logits
    assert raw.abs().max() > 0 and torch.allclose(got, raw, rtol=1e-4, atol=1e-7)
    assert not torch.allclose(got, tempered, rtol=1e-2, atol=1e-6)  # 1/0.7 is not a no-op
    assert torch.allclose(mean_rollout_gradient(model, names, ro, adv, temperature=0.7), tempered, rtol=1e-4, atol=1e-7)
    assert any("lora_A" in n for n in names) and all("mlp" not in n and "base_layer" not in n for n in names)


def test_prompt_gradients_sample_at_the_sampling_temperature_and_score_raw_logits(monkeypatch):
    # the rollouts are sampled at T = 0.7, their gradient pass uses T = 1 unless grad_temperature is given
    from reasonrl.diagnostics import gradients
    from reasonrl.tasks import Item

    tok = build_tiny("tiny", seed=0)[1]
    seen = {"sampled": [], "scored": []}

    class Engine:
        def __init__(self, model, tok_):
            pass

        def generate(self, prompts, n, sp, seeds):
            seen["sampled"].append(sp.temperature)
            return _rollouts(tok, prompts[0], ["5\nA:5", "4\nA:4"])

    monkeypatch.setattr(gradients, "HFEngine", Engine)
    monkeypatch.setattr(
        gradients, "mean_rollout_gradient", lambda model, names, ro, adv, t: seen["scored"].append(t) or torch.zeros(1)
    )
    item = Item(key="2+3", prompt="2+3=?\n", answer="5", meta={})
    model = torch.nn.Linear(1, 1)
    gradients.prompt_gradients(model, tok, get_task("arithmetic"), [item], rollouts=2)
    gradients.prompt_gradients(model, tok, get_task("arithmetic"), [item], rollouts=2, grad_temperature=0.7)
    assert seen == {"sampled": [0.7, 0.7], "scored": [1.0, 0.7]}


# ---------------------------------------------------------------- own hand-computed tests
def test_rollout_losses_value_is_minus_advantage():
    # ratio = 1 in value, so loss_i = -A_i whatever lp: A = [2, -1] -> [-2, 1]
    lp = torch.tensor([[-0.3, -1.2, 0.0], [-2.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1, 0], [1, 0, 0]])
    assert rollout_losses(lp, mask, torch.tensor([2.0, -1.0])).tolist() == pytest.approx([-2.0, 1.0])


def test_scaled_only_above_one():
    # max|g| = 2 > 1: divided by 2; max|g| = 0.5: left alone
    assert scaled(torch.tensor([0.5, -2.0], dtype=torch.float16)).tolist() == [0.25, -1.0]
    assert scaled(torch.tensor([0.5, 0.25])).tolist() == [0.5, 0.25]


def test_zero_gradient_has_zero_cosine_and_single_prompt_mean_is_zero():
    sim = cosine_matrix([torch.tensor([1.0, 0]), torch.tensor([0.0, 0])])
    assert sim[0, 1].item() == 0.0
    assert mean_similarity(torch.ones(1, 1)).tolist() == [0.0]


def test_classify_by_hand():
    # tau 0.1: a easy (0.5 > 0.1); b learnable (0.05 <= 0.1, then 0.5 and 0.3 > 0.1 in both runs);
    # c unlearnable (0.0 and 0.1 <= 0.1: the boundary counts as flagged); d learned in one run only:
    # no class; e easy and unlearnable (forgotten in both runs); f flagged in both runs but its max
    # training reward is 0 in run 2: no_reward, not unlearnable; g trained in run 1 only, reward 0.25
    initial = {"a": 0.5, "b": 0.05, "c": 0.0, "d": 0.0, "e": 0.6, "f": 0.0}
    finals = [
        {"a": 0.9, "b": 0.5, "c": 0.0, "d": 0.0, "e": 0.05, "f": 0.0},
        {"a": 0.8, "b": 0.3, "c": 0.1, "d": 0.2, "e": 0.0, "f": 0.0},
    ]
    rewards = [{"f": 0.25, "g": 0.25}, {"f": 0.0}]
    got = classify(initial, finals, rewards)
    assert got == {"no_reward": ["f"], "unlearnable": ["c", "e"], "learnable": ["b"], "easy": ["a", "e"]}
    assert block_of(got) == {"c": "unlearnable", "e": "unlearnable", "b": "learnable", "a": "easy"}


def test_block_means_by_hand():
    # blocks [easy, easy, unlearnable]: easy|easy = sim[0,1] = 0.5 (diagonal left out);
    # easy|unlearnable = mean(sim[0,2], sim[1,2]) = (0.1 + 0.3) / 2 = 0.2; unlearnable alone: None;
    # learnable empty: None
    sim = torch.tensor([[1.0, 0.5, 0.1], [0.5, 1.0, 0.3], [0.1, 0.3, 1.0]])
    got = block_means(sim, ["easy", "easy", "unlearnable"])
    assert got["easy|easy"] == pytest.approx(0.5) and got["easy|unlearnable"] == pytest.approx(0.2)
    assert got["unlearnable|unlearnable"] is None and got["easy|learnable"] is None
    assert set(got) == {
        "easy|easy",
        "easy|learnable",
        "easy|unlearnable",
        "learnable|learnable",
        "learnable|unlearnable",
        "unlearnable|unlearnable",
    }


def test_pick_correct_caps_and_is_seeded():
    correct = [True, False, True, True]
    assert pick_correct(correct, 5, seed=0) == [0, 2, 3]
    two = pick_correct(correct, 2, seed=0)
    assert len(two) == 2 and set(two) <= {0, 2, 3} and two == sorted(two) and two == pick_correct(correct, 2, seed=0)


def test_sample_blocks_caps_each_block_in_order():
    blocks = {"u1": "unlearnable", "e1": "easy", "e2": "easy", "e3": "easy", "l1": "learnable"}
    got = sample_blocks(blocks, per_class=2, seed=0)
    assert len(got) == 4 and set(got[:2]) <= {"e1", "e2", "e3"} and got[2:] == ["l1", "u1"]


def test_max_rewards_over_steps():
    # "x": max(0.0, 0.5) = 0.5; "y": only 0.0 -> 0.0 (a no_reward prompt)
    rows = [
        {"step": 1, "key": "x", "reward": 0.0},
        {"step": 1, "key": "y", "reward": 0.0},
        {"step": 2, "key": "x", "reward": 0.5},
    ]
    assert max_rewards(rows) == {"x": 0.5, "y": 0.0}


def test_lora_targets_are_peft_defaults_for_llama():
    model, _ = build_tiny("tiny", seed=0)
    assert lora_targets(model) is None  # llama is in peft's table: q_proj and v_proj
    names = gradient_names(with_lora(model))
    assert names and all(("q_proj" in n or "v_proj" in n) and "lora_" in n for n in names)


# ---------------------------------------------------------------- run folders
def _fake_run(root, name, keys, before, after, rewards, problems):
    run = root / name
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(
        yaml.safe_dump({"task": "arithmetic", "task_options": {}, "eval_seed": 0, "final_eval_problems": problems})
    )
    rows = lambda cs: "".join(json.dumps({"key": k, "c": c, "n": 20}) + "\n" for k, c in zip(keys, cs))  # noqa: E731
    (run / "before.items.jsonl").write_text(rows(before))
    (run / "after.items.jsonl").write_text(rows(after))
    (run / "prompt_rewards.jsonl").write_text(
        "".join(json.dumps({"step": 1, "key": k, "reward": r}) + "\n" for k, r in rewards.items())
    )
    return run


def test_bad_run_folders_are_named(tmp_path):
    a = _fake_run(tmp_path, "a", ["1+2", "3+4"], [1, 2], [3, 4], {"9+9": 1.0}, 2)
    b = _fake_run(tmp_path, "b", ["1+2"], [1], [3], {"9+9": 1.0}, 2)
    with pytest.raises(UserError, match=r"run .*b: before.items.jsonl lacks problem '3\+4'"):
        pass_rates([load_run(a), load_run(b)])
    (b / "prompt_rewards.jsonl").unlink()
    with pytest.raises(MissingPathError, match=r"run .*b: prompt_rewards.jsonl is missing"):
        load_run(b)
    (a / "after.items.jsonl").write_text(json.dumps({"key": "1+2", "correct": True}) + "\n")
    with pytest.raises(UserError, match=r"run .*a: after.items.jsonl line 1 has no sampled results"):
        load_run(a)


def test_pass_rates_pool_the_before_evaluations(tmp_path):
    # initial = (4 + 6) / (20 + 20) = 0.25; finals 10/20 = 0.5 and 0/20 = 0
    a = _fake_run(tmp_path, "a", ["1+2"], [4], [10], {}, 1)
    b = _fake_run(tmp_path, "b", ["1+2"], [6], [0], {}, 1)
    initial, finals, _ = pass_rates([load_run(a), load_run(b)])
    assert initial == {"1+2": 0.25} and finals == [{"1+2": 0.5}, {"1+2": 0.0}]


@pytest.mark.slow  # the shipped base samples and backpropagates: ~10 minutes on the loaded 2-core machine
def test_command_on_fake_runs_writes_json_and_png(tmp_path):
    # six held-out arithmetic problems; per problem (before c, after c run 1, after c run 2) of 20:
    # k0, k1 easy (10/20 = 0.5 > 0.1), k2 learnable (0 -> 10, 10), k3 unlearnable (0 -> 1, 2: <= 0.1),
    # k4 learned in one run only (no class), k5 flagged everywhere but max reward 0 in run b: no_reward
    keys = [it.key for it in take_items(get_task("arithmetic"), "test", 6, seed=0)]
    a = _fake_run(tmp_path, "a", keys, [10, 10, 0, 0, 0, 0], [12, 15, 10, 1, 10, 0], {keys[5]: 0.5}, 6)
    b = _fake_run(tmp_path, "b", keys, [10, 10, 0, 0, 0, 0], [11, 14, 10, 2, 0, 0], {keys[5]: 0.0}, 6)
    out = tmp_path / "diag" / "unl.json"
    res = CliRunner().invoke(
        app, ["diagnose", "unlearnable", "--runs", f"{a},{b}", "--out", str(out), "--rollouts", "4", "--per-class", "1"]
    )
    assert res.exit_code == 0, res.output
    got = json.loads(out.read_text())
    assert got["counts"] == {"no_reward": 1, "unlearnable": 1, "learnable": 1, "easy": 2}
    assert got["classes"]["learnable"] == [keys[2]] and got["classes"]["unlearnable"] == [keys[3]]
    assert got["config"]["per_class"] == 1 and len(got["heatmap_prompts"]) + len(got["dropped"]) == 3  # one per block
    drawn = {keys[2], keys[3]} | ({keys[0]} if keys[0] in got["heatmap_prompts"] + list(got["dropped"]) else {keys[1]})
    assert set(got["heatmap_prompts"]) | set(got["dropped"]) == drawn  # each drawn prompt: a gradient or a reason
    assert got["lora"]["targets"] == "peft default for the architecture" and got["config"]["rollouts"] == 4
    for pair, v in got["block_means"].items():
        assert v is None or -1.0 <= v <= 1.0, pair
    assert got["per_prompt"][keys[3]]["final_pass@1"] == [0.05, 0.1]
    png = out.with_suffix(".png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    import matplotlib.image

    img = matplotlib.image.imread(out.with_suffix(".png"))
    assert img.ndim == 3 and img.shape[0] > 100 and img.shape[1] > 100


def test_command_refuses_missing_run(tmp_path):
    res = CliRunner().invoke(
        app, ["diagnose", "unlearnable", "--runs", str(tmp_path / "nope"), "--out", str(tmp_path / "x.json")]
    )
    assert res.exit_code != 0 and "nope" in (res.output + str(res.exception))


# ---------------------------------------------------------------- what a run folder gets
def test_prompt_reward_lines_first_round_groups_only():
    # two groups of G = 2: "1+2" rewards (1, 0) -> mean 0.5, accuracy 0.5; "3+4" is a second-round
    # group (kind 1: a correction round's), left out
    from reasonrl.loop.batch import Batch
    from reasonrl.loop.run import prompt_reward_lines
    from reasonrl.tasks import Item

    b = Batch(
        items=[Item("1+2", "1+2=?\n", "3"), Item("3+4", "3+4=?\n", "7")],
        ro=None,
        rewards=torch.tensor([[1.0, 0.0], [1.0, 1.0]]),
        correct=torch.tensor([[1, 0], [1, 1]]),
        kinds=torch.tensor([0, 1]),
    )
    lines = [json.loads(x) for x in prompt_reward_lines(7, b).splitlines()]
    assert lines == [{"step": 7, "key": "1+2", "reward": 0.5, "accuracy": 0.5}]


def test_saved_gradients_reused_only_with_the_same_setting(tmp_path):
    from reasonrl.diagnostics.gradients import PromptGradients
    from reasonrl.diagnostics.unlearnable_report import load_gradients, merge_gradients

    setting = {"model": None, "rollouts": 8, "max_correct": 20, "temperature": 0.7, "seed": 0}
    path = tmp_path / "x.gradients.pt"
    torch.save(
        {
            "setting": setting,
            "names": ["w"],
            "grads": {"a": torch.tensor([1.0, 2.0]).half()},
            "kept": {"a": 3},
            "dropped": {"b": "all 8 rollouts wrong"},
        },
        path,
    )
    got = load_gradients(path, setting)
    assert got.grads["a"].tolist() == [1.0, 2.0] and got.kept == {"a": 3} and "b" in got.dropped
    assert load_gradients(path, {**setting, "rollouts": 16}).grads == {}  # another setting: recomputed
    merged = merge_gradients(got, PromptGradients(["w"], {"c": torch.zeros(2).half()}, {"c": 1}, {}))
    assert set(merged.grads) == {"a", "c"} and merged.kept == {"a": 3, "c": 1}
    with pytest.raises(UserError, match="other parameters"):
        merge_gradients(got, PromptGradients(["v"], {"c": torch.zeros(2).half()}, {"c": 1}, {}))
