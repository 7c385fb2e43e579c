"""SSOPD and EGRSD / CL-EGRSD parts (parts/selfteach.py): their glue on hand-made batches with the
values worked out independently, and each recipe end to end on the tiny model."""

import dataclasses
import json
import math

import pytest
import torch

from helpers import batch_context, loss_context
from reasonrl.config.train import TrainConfig
from reasonrl.errors import UserError
from reasonrl.distill import ContextScores
from reasonrl.models import build_tiny
from reasonrl.models.tokenizer import build_char_tokenizer
from reasonrl.parts.selfteach import EGRSD, SSOPD, template_problem
from reasonrl.recipes import get_recipe
from reasonrl.loop.run import train_run
from reasonrl.tasks import get_task
from reasonrl.config.validate import check_part

from fakes import SELFTEACH_COMPLETIONS, SELFTEACH_PROMPTS, expected_pair_kl, make_rollouts, selfteach_batch


@pytest.fixture(scope="module")
def tiny():
    model, tok = build_tiny("tiny", seed=0)
    return model, tok


def test_ssopd_pairs_pick_first_round_mixed_groups(tiny):
    _, tok = tiny
    p = SSOPD().pairs(selfteach_batch(tok))
    assert p["groups"].tolist() == [0, 1, 2]
    assert p["c_rows"].tolist() == [0, 4] and p["w_rows"].tolist() == [2, 5]
    assert p["pair_weight"].tolist() == pytest.approx([8 / 9, 8 / 9])
    assert p["weight"].tolist() == pytest.approx([8 / 9, 8 / 9, 0.0])


def test_ssopd_term_matches_the_hand_formula(tiny):
    model, tok = tiny
    b, part, temp = selfteach_batch(tok), SSOPD(coef=0.5), 0.8
    loss, m = part.loss_term(
        loss_context(
            logp=torch.zeros(12, 1), batch=b, rows=torch.arange(12), model=model, tok=tok, temperature=temp, n_seqs=12
        )
    )
    kls = [
        expected_pair_kl(
            model,
            tok,
            part.template.format(prompt=SELFTEACH_PROMPTS[w], solution=SELFTEACH_COMPLETIONS[c]),
            SELFTEACH_PROMPTS[w],
            SELFTEACH_COMPLETIONS[w],
            temp,
        )
        for c, w in ((0, 2), (4, 5))
    ]
    # lambda (1/N_x) sum_x w(x) D(x) = 0.5 * (1/3) * (8/9) * (D_0 + D_1)
    assert float(loss.detach()) == pytest.approx(0.5 / 3 * 8 / 9 * sum(kls), rel=1e-4)
    assert all(k > 1e-4 for k in kls)  # the two contexts differ, so the term is not trivially 0
    assert m["distill/pairs"] == 2.0 and m["distill/frontier_weight"] == pytest.approx((8 / 9 + 8 / 9 + 0) / 3)
    assert m["distill/ssopd_term"] == pytest.approx(float(loss.detach()))
    assert m["distill/divergence_term"] == pytest.approx(sum(kls) / 2, rel=1e-4)
    assert m["distill/tokens_term"] == len(SELFTEACH_COMPLETIONS[2]) + len(SELFTEACH_COMPLETIONS[5])


def test_ssopd_micro_batches_add_up_to_the_whole_batch(tiny):
    model, tok = tiny
    b, part = selfteach_batch(tok), SSOPD()
    kw = dict(batch=b, model=model, tok=tok, temperature=1.0, n_seqs=12)  # one minibatch: the whole batch
    whole, mw = part.loss_term(loss_context(logp=torch.zeros(1, 1), rows=torch.arange(12), **kw))
    model.zero_grad()
    whole.backward()
    g_whole = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    total, metrics = 0.0, []
    for rows in (torch.tensor([0, 1, 2, 9]), torch.tensor([3, 4, 5, 6]), torch.tensor([7, 8, 10, 11])):
        part_loss, m = part.loss_term(loss_context(logp=torch.zeros(1, 1), rows=rows, **kw))
        if part_loss.requires_grad:  # a micro-batch without a w* row adds a constant 0
            part_loss.backward()
        total, metrics = total + float(part_loss), metrics + [m]
    assert [m["distill/ssopd_term"] > 0 for m in metrics] == [True, True, False]  # w* rows 2 and 5 split apart
    assert total == pytest.approx(float(whole), rel=1e-5)
    assert sum(m["distill/ssopd_term"] for m in metrics) == pytest.approx(mw["distill/ssopd_term"], rel=1e-5)
    assert sum(m["distill/divergence_term"] for m in metrics) == pytest.approx(mw["distill/divergence_term"], rel=1e-5)
    for g, p in zip(g_whole, model.parameters()):
        torch.testing.assert_close(p.grad, g, rtol=1e-4, atol=1e-7)
    model.zero_grad()


def test_ssopd_teacher_carries_no_gradient_and_the_prefix_cap(tiny):
    model, tok = tiny
    b = selfteach_batch(tok)
    teacher, student, mask = SSOPD(max_prefix_tokens=3).teacher_student(
        b, torch.tensor([0]), torch.tensor([2]), model, tok, 1.0
    )
    assert not teacher.requires_grad and teacher.grad_fn is None and student.requires_grad
    assert teacher.shape == student.shape == (1, 3, student.shape[-1]) and mask.tolist() == [[1.0, 1.0, 1.0]]
    # the capped term is the hand formula on w*'s first 3 tokens ("2+3")
    loss, _ = SSOPD(max_prefix_tokens=3).loss_term(
        loss_context(
            logp=torch.zeros(1, 1), batch=b, rows=torch.tensor([2]), model=model, tok=tok, temperature=1.0, n_seqs=12
        )
    )
    ctx = SSOPD().template.format(prompt=SELFTEACH_PROMPTS[2], solution=SELFTEACH_COMPLETIONS[0])
    kl = expected_pair_kl(model, tok, ctx, SELFTEACH_PROMPTS[2], "2+3", 1.0)
    assert float(loss.detach()) == pytest.approx(1 / 3 * 8 / 9 * kl, rel=1e-4)


def test_ssopd_no_mixed_group_gives_zero_and_counts_none(tiny):
    model, tok = tiny
    b = selfteach_batch(tok)
    b.correct = torch.ones(4, 3)
    loss, m = SSOPD().loss_term(
        loss_context(logp=torch.zeros(1, 1), batch=b, rows=torch.arange(12), model=model, tok=tok, temperature=1.0)
    )
    assert float(loss) == 0.0 and m["distill/pairs"] == 0.0 and m["distill/frontier_weight"] == 0.0


def test_templates_are_checked():
    assert template_problem("{prompt}{solution}") is None
    assert "must contain" in template_problem("{prompt} only")
    assert "not a valid format string" in template_problem("{prompt}{solution}{other}")
    with pytest.raises(UserError, match=r"'egrsd.template' = '\{solution\}'"):
        check_part(EGRSD(template="{solution}"))


def _egrsd_case(part, H, q):
    """B=1, G=3, T=2; advantages [1, 0, -1]; row 2 has one token. The teacher pass is a stub that
    records what it is asked and returns the given (n, T) log-probs q and entropies H."""
    task = get_task("arithmetic")
    item = next(task.iter_items("train", 0))
    tok = build_char_tokenizer()
    s = torch.tensor([[-1.5, -1.0], [-0.3, -0.3], [-0.5, 0.0]])  # behaviour log-probs (student)
    ro = make_rollouts(tok, [item.prompt] * 3, ["ab", "cd", "e"], logprobs=s)
    asked = {}

    def score_under(contexts, ro_, rows, **reduce):
        asked.update(contexts=contexts, rows=rows.tolist(), reduce=reduce)
        return ContextScores(logprobs=torch.tensor(q), entropy=torch.tensor(H))

    ctx = batch_context(rollouts=ro, items=[item], task=task, score_under=score_under)
    out, m = part.shape_advantages(torch.tensor([[1.0, 0.0, -1.0]]), ctx)
    return out, m, asked, item


def test_egrsd_token_advantages_by_hand():
    # row 0 (A=+1): q=-0.5, s=-1.5 -> m=1, H=0.5 -> g = 0.1 + 0.9 e^-0.5 = 0.645878; t=2: q=s -> m=0
    # row 2 (A=-1): m = min(|-2 - (-0.5)|, 5) = 1.5, H=2 -> g = 0.1 + 0.9 e^-2 = 0.221802 -> -0.332703
    # row 1 (A=0) is not scored and stays 0
    out, m, asked, item = _egrsd_case(EGRSD(magnitude="abs"), H=[[0.5, 0.0], [2.0, 0.0]], q=[[-0.5, -1.0], [-2.0, 0.0]])
    assert out.shape == (1, 3, 2)
    torch.testing.assert_close(out[0], torch.tensor([[0.645878, 0.0], [0.0, 0.0], [-0.332703, 0.0]]), atol=1e-6, rtol=0)
    assert asked["rows"] == [0, 2] and asked["reduce"] == {"entropy": True}
    assert asked["contexts"][0].startswith(item.prompt + "Reference solution: " + item.demo)
    # metrics over the 3 real scored tokens: gates (0.645878, 1, 0.221802), magnitudes (1, 0, 1.5)
    assert m["egrsd/rows"] == 2.0 and m["egrsd/gate_mean"] == pytest.approx((0.645878 + 1 + 0.221802) / 3, abs=1e-6)
    assert m["egrsd/magnitude_mean"] == pytest.approx(2.5 / 3)


def test_egrsd_default_ratio_magnitude_by_hand():
    # the default magnitude clip(exp(q - s), 1/5, 5); s = [[-1.5, -1.0], ..., [-0.5]] (the case's behaviour log-probs)
    # row 0 (A=+1): t=1: exp(-0.5 + 1.5) = e = 2.718282, gate 0.645878 -> 1.755677; t=2: exp(0) = 1, H=0 -> g=1 -> 1
    # row 2 (A=-1): exp(-2 + 0.5) = e^-1.5 = 0.223130, gate 0.221802 -> -0.049491
    out, m, _, _ = _egrsd_case(EGRSD(), H=[[0.5, 0.0], [2.0, 0.0]], q=[[-0.5, -1.0], [-2.0, 0.0]])
    torch.testing.assert_close(out[0], torch.tensor([[1.755677, 1.0], [0.0, 0.0], [-0.049491, 0.0]]), atol=1e-6, rtol=0)
    assert m["egrsd/magnitude_mean"] == pytest.approx((2.718282 + 1 + 0.223130) / 3, abs=1e-6)


def test_egrsd_alpha_and_the_lookahead():
    # alpha 0.5 adds 0.5 A on every real token: row 0 +0.5, row 2 -0.5 on its one token
    out, _, _, _ = _egrsd_case(
        EGRSD(alpha=0.5, magnitude="abs"), H=[[0.5, 0.0], [2.0, 0.0]], q=[[-0.5, -1.0], [-2.0, 0.0]]
    )
    torch.testing.assert_close(out[0], torch.tensor([[1.145878, 0.5], [0.0, 0.0], [-0.832703, 0.0]]), atol=1e-6, rtol=0)
    # CL, K=1: row 0's H = [3, 0.1] -> H_hat_1 = min(3, 0.1) = 0.1 -> g = 0.1 + 0.9 e^-0.1 = 0.914353 (plain: 0.144808)
    q = [[-0.5, -1.0], [-2.0, 0.0]]
    cl, m, _, _ = _egrsd_case(EGRSD(lookahead=1, magnitude="abs"), H=[[3.0, 0.1], [2.0, 0.0]], q=q)
    plain, _, _, _ = _egrsd_case(EGRSD(magnitude="abs"), H=[[3.0, 0.1], [2.0, 0.0]], q=q)
    assert float(cl[0, 0, 0]) == pytest.approx(0.914353, abs=1e-6)
    assert float(plain[0, 0, 0]) == pytest.approx(0.144808, abs=1e-6)
    assert m["egrsd/lookahead_frac"] == pytest.approx(1 / 3)  # one of the 3 real scored tokens lowered


def test_egrsd_refuses_token_level_input():
    with pytest.raises(ValueError, match="token-level"):
        EGRSD().shape_advantages(torch.zeros(1, 2, 3), batch_context())


# ------------------------------------------------------------------ end to end


def _run(name, tiny_dir, tmp_path, **over):
    cfg = TrainConfig(
        model=str(tiny_dir),
        out=str(tmp_path / "run"),
        recipe=name,
        task="arithmetic",
        steps=3,
        task_options={"max_digits": 1},  # one-digit sums: the tiny model mixes right and wrong
        prompts_per_step=4,
        eval_every=0,
        final_eval_problems=0,
        save_every=0,
        micro_batch_size=3,
    )
    train_run(cfg, dataclasses.replace(get_recipe(name), group_size=4, **over))
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    for r in rows:
        assert all(math.isfinite(v) for v in r.values() if isinstance(v, float)), r
    return rows


@pytest.mark.slow
def test_ssopd_trains_end_to_end(tiny_dir, tmp_path):
    rows = _run("ssopd", tiny_dir, tmp_path)
    assert all({"distill/pairs", "distill/ssopd_term", "distill/frontier_weight"} <= set(r) for r in rows)
    acted = [r for r in rows if r["distill/pairs"] > 0]
    assert acted, [r["accuracy"] for r in rows]
    for r in acted:
        assert r["distill/ssopd_term"] > 0 and r["distill/divergence_term"] > 0 and r["distill/tokens_term"] >= 1
        assert r["distill/frontier_weight"] > 0  # a pair needs a mixed group, whose weight 4p(1-p) is > 0
    assert not any(k.startswith("egrsd/") for r in rows for k in r)


@pytest.mark.slow
@pytest.mark.parametrize("name,lookahead", [("egrsd", 0), ("cl_egrsd", 8)])
def test_egrsd_trains_end_to_end(name, lookahead, tiny_dir, tmp_path):
    assert get_recipe(name).egrsd.lookahead == lookahead
    rows = _run(name, tiny_dir, tmp_path)
    acted = [r for r in rows if r["egrsd/rows"] > 0]
    assert acted, [r["accuracy"] for r in rows]
    for r in acted:
        assert r["egrsd/tokens"] >= 1  # the weights' values with the real teacher: tests/test_egrsd_teacher.py
    assert any(r["egrsd/lookahead_frac"] > 0 for r in acted) == (lookahead > 0)
    assert not any(k.startswith("distill/") for r in rows for k in r)


def test_config_keys_turn_the_parts_on_change_them_and_are_validated():
    from reasonrl.config.train import apply_overrides, split_config
    from reasonrl.errors import UserError
    from reasonrl.config.validate import check_run

    # dotted keys (YAML gives strings for 1e-1) reach the fields; an optional part can be switched off or on
    r = apply_overrides(get_recipe("ssopd"), split_config({"ssopd": {"coef": "1e-1", "max_prefix_tokens": "16"}})[1])
    assert (r.ssopd.coef, r.ssopd.max_prefix_tokens, r.ssopd.divergence) == (0.1, 16, "forward_kl")
    assert apply_overrides(get_recipe("ssopd"), split_config({"ssopd": None})[1]).ssopd is None
    on = apply_overrides(get_recipe("grpo"), split_config({"egrsd": {"lookahead": 8}})[1])
    assert on.egrsd == EGRSD(lookahead=8) and len(on.calls("shape_advantages")) == 1
    # the cap's floor follows the magnitude form: 'ratio' clips to [1/cap, cap], so cap >= 1
    bad = dataclasses.replace(get_recipe("egrsd"), egrsd=EGRSD(magnitude="ratio"))
    object.__setattr__(bad.egrsd, "cap", 0.5)
    with pytest.raises(UserError, match=r"'egrsd.cap' = 0.5 .* >= 1"):
        check_run(TrainConfig(), bad)
    object.__setattr__(bad.egrsd, "cap", 1.0)
    check_run(TrainConfig(), bad)
