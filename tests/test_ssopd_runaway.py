"""SSOPD's runaway (issue #26) and the options that guard it: w* among the rows that ended by EOS,
the teacher's weights (live, the run's initial model, an EMA), the logged p(EOS) and truncation share.

How each guard was checked to fail (the cause reintroduced, the test run, then restored):
- the default-w* test fails with ``w_star: str = "any"`` (the spec's literal rule) as the default;
- the one-step test fails with the divergence's arguments swapped in ``SSOPD.loss_term``
  (``token_divergence(teacher, student, ...)``: no gradient reaches the student) and with the sign
  of the term flipped (``loss - ...``);
- the EMA tests fail with ``e.mul_(decay).add_(p, alpha=decay)`` in ``ema_update`` and with
  ``after_step`` returning before the update;
- the initial-teacher test fails when ``teacher_model`` yields ``ctx.model`` for ``initial``.
"""

import copy
import dataclasses
import math

import pytest
import torch

from helpers import loss_context
from reasonrl.config.train import TrainConfig
from reasonrl.distill.ema import WithWeights, ema_update, trainable_snapshot
from reasonrl.losses.selfteach import ssopd_pairs
from reasonrl.parts.protocol import UpdateContext
from reasonrl.parts.selfteach import SSOPD, last_token_eos
from reasonrl.recipes import get_recipe
from reasonrl.tasks import get_task
from reasonrl.loop.trainer import Trainer

from fakes import SELFTEACH_COMPLETIONS, SELFTEACH_PROMPTS, expected_pair_kl, selfteach_batch


@pytest.fixture(scope="module")
def fresh():
    """The tiny model as initialised (seed 0): its contexts give different distributions, all these need."""
    from reasonrl.models import build_tiny

    return build_tiny("tiny", seed=0)


def test_w_star_among_rows_that_ended_by_eos_by_hand():
    # spec 1 (d): lengths [120, 80, 200, 150], rewards [1, 1, 0, 0] -> c* = 1, w* = 2 (the longest wrong);
    # row 2 cut off at the budget -> w* = row 3 (150) under "eos"; both wrong rows cut off -> no pair
    correct, lengths = torch.tensor([[1, 1, 0, 0]]), torch.tensor([[120, 80, 200, 150]])
    assert [t.tolist() for t in ssopd_pairs(correct, lengths)] == [[1], [2]]
    ended = torch.tensor([[True, True, False, True]])
    assert [t.tolist() for t in ssopd_pairs(correct, lengths, ended)] == [[1], [3]]
    assert [t.tolist() for t in ssopd_pairs(correct, lengths, torch.tensor([[True, True, False, False]]))] == [
        [-1],
        [-1],
    ]


def test_a_truncated_w_star_is_never_selected_by_default():
    from reasonrl.models.tokenizer import build_char_tokenizer

    tok = build_char_tokenizer()
    b = selfteach_batch(tok)
    # group 0: wrong rows 1 ("1\nA:9", 5 chars) and 2 ("2+3=5\nA:18", 10 chars); row 2 ran into the budget
    b.ro.finish_reasons = ["eos", "eos", "length"] + ["eos"] * 9
    p = SSOPD().pairs(b)
    assert p["w_rows"].tolist() == [1, 5] and not bool(p["w_truncated"].any())
    assert float(p["wrong_truncated"]) == pytest.approx(1 / 3)  # wrong first-round rows 1, 2 and 5: one cut off
    spec = SSOPD(w_star="any").pairs(b)  # the abstract's literal rule stays reachable
    assert spec["w_rows"].tolist() == [2, 5] and spec["w_truncated"].tolist() == [True, False]


def test_one_ssopd_step_lowers_the_divergence_on_w_stars_tokens(fresh):
    model = copy.deepcopy(fresh[0]).train()
    tok = fresh[1]
    b, part = selfteach_batch(tok), SSOPD()
    ctx = loss_context(
        logp=torch.zeros(1), batch=b, rows=torch.arange(12), model=model, tok=tok, temperature=1.0, n_seqs=12
    )

    def divergences():  # each pair's token-mean forward KL, written out independently of the part
        return [
            expected_pair_kl(
                model,
                tok,
                part.template.format(prompt=SELFTEACH_PROMPTS[w], solution=SELFTEACH_COMPLETIONS[c]),
                SELFTEACH_PROMPTS[w],
                SELFTEACH_COMPLETIONS[w],
                1.0,
            )
            for c, w in ((0, 2), (4, 5))
        ]

    before = divergences()
    loss, _ = part.loss_term(ctx)
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= 0.05 * p.grad
    after = divergences()
    assert all(a < b_ for a, b_ in zip(after, before)), (before, after)


def test_p_eos_at_w_stars_last_token_by_hand():
    # vocab 3, EOS = 2. Row 0: mask [1, 1, 0] -> last position 1: teacher logits (0, 0, ln 2) -> p = 2/4;
    # student (0, 0, 0) -> 1/3. Row 1: no masked token -> 0, 0.
    teacher = torch.zeros(2, 3, 3)
    teacher[0, 1, 2] = math.log(2.0)
    teacher[0, 0, 2] = 5.0  # not the last token: ignored
    student = torch.zeros(2, 3, 3)
    mask = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    t, s = last_token_eos(teacher, student, mask, eos=2, temperature=1.0)
    assert t.tolist() == pytest.approx([0.5, 0.0]) and s.tolist() == pytest.approx([1 / 3, 0.0])
    # tempered at 0.5: logits doubled -> teacher (0, 0, 2 ln 2): 4 / 6
    t, _ = last_token_eos(teacher, student, mask, eos=2, temperature=0.5)
    assert float(t[0]) == pytest.approx(4 / 6)


def test_ema_update_and_scoring_with_the_ema_weights_by_hand():
    model = torch.nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(1.0)
    ema = trainable_snapshot(model)
    with torch.no_grad():
        model.weight.fill_(3.0)
    # 0.75 * 1 + 0.25 * 3 = 1.5; the gap to the policy is |3 - 1.5| = 1.5
    assert ema_update(ema, model, 0.75) == pytest.approx(1.5)
    assert float(ema["weight"]) == pytest.approx(1.5)
    # the teacher's forward uses 1.5, the policy's own weight stays 3
    assert float(WithWeights(model, ema)(torch.tensor([[2.0]]))) == pytest.approx(3.0)
    assert float(model(torch.tensor([[2.0]]))) == pytest.approx(6.0)


def test_initial_teacher_scores_under_the_reference(fresh):
    model, tok = fresh
    moved = copy.deepcopy(model)  # the policy after some training: every weight moved
    with torch.no_grad():
        for p in moved.parameters():
            p.add_(0.05 * torch.randn_like(p))

    class Scope:  # the trainer's reference scope: the initial model
        def __enter__(self):
            return model

        def __exit__(self, *exc):
            return False

    b, part = selfteach_batch(tok), SSOPD(teacher="initial", clip=None)  # unclipped: the hand KL below is D itself
    assert part.needs == {"reference", "policy_in_loss"} and SSOPD().needs == {"policy_in_loss"}
    loss, _ = part.loss_term(
        loss_context(
            logp=torch.zeros(1),
            batch=b,
            rows=torch.tensor([2]),
            model=moved,
            tok=tok,
            temperature=1.0,
            n_seqs=12,
            reference=Scope,
        )
    )
    # teacher = the initial model under the template, student = the moved policy on the plain prompt
    comp = tok(SELFTEACH_COMPLETIONS[2], add_special_tokens=False)["input_ids"]

    def logprobs(m, text):
        ids = tok(text, add_special_tokens=False)["input_ids"] + comp
        with torch.no_grad():
            return m(input_ids=torch.tensor([ids])).logits[0, len(ids) - len(comp) - 1 : -1].log_softmax(-1)

    lt = logprobs(model, part.template.format(prompt=SELFTEACH_PROMPTS[2], solution=SELFTEACH_COMPLETIONS[0]))
    ls = logprobs(moved, SELFTEACH_PROMPTS[2])
    kl = float((lt.exp() * (lt - ls)).sum(-1).mean())
    assert float(loss.detach()) == pytest.approx(1 / 3 * 8 / 9 * kl, rel=1e-4)  # lambda w / N_x D, N_x = 3
    with pytest.raises(RuntimeError, match="reference"):
        part.loss_term(
            loss_context(logp=torch.zeros(1), batch=b, rows=torch.tensor([2]), model=moved, tok=tok, n_seqs=12)
        )


def _trainer(tiny, tmp_path, recipe):
    cfg = TrainConfig(
        recipe="ssopd",
        task="arithmetic",
        task_options={"max_digits": 1},
        steps=2,
        prompts_per_step=4,
        eval_every=0,
        save_every=0,
        final_eval_problems=0,
        micro_batch_size=8,
        max_rows=64,
    )
    return Trainer(copy.deepcopy(tiny[0]).train(), tiny[1], get_task("arithmetic", max_digits=1), recipe, cfg, tmp_path)


@pytest.mark.slow
def test_ema_teacher_is_checkpointed_and_resumes_exactly(sharp_tiny, tmp_path):
    recipe = dataclasses.replace(
        get_recipe("ssopd"),
        group_size=4,
        ssopd=SSOPD(teacher="ema", ema_decay=0.5),
        sampling=dataclasses.replace(get_recipe("ssopd").sampling, max_new_tokens=16),
    )
    straight = _trainer(sharp_tiny, tmp_path / "a", recipe)
    initial = trainable_snapshot(straight.model)
    m1 = straight.train_step()
    ema1 = {k: v.clone() for k, v in straight.batches.parts.state("ssopd")["ema"].items()}
    # after one step: e = 0.5 * initial + 0.5 * theta_1
    theta1 = trainable_snapshot(straight.model)
    assert any(not torch.equal(theta1[k], initial[k]) for k in initial)  # the step moved the policy
    for k in ema1:
        torch.testing.assert_close(ema1[k], 0.5 * initial[k] + 0.5 * theta1[k])
    assert m1["distill/ema_gap"] == pytest.approx(max(float((theta1[k] - ema1[k]).abs().max()) for k in ema1))
    path = straight.save()
    m2 = straight.train_step()
    resumed = _trainer(sharp_tiny, tmp_path / "a", recipe)
    assert resumed.resume() == 1 and path.exists()
    for k, v in resumed.batches.parts.state("ssopd")["ema"].items():
        torch.testing.assert_close(v, ema1[k], rtol=0, atol=0)
    r2 = resumed.train_step()
    for key in ("distill/ssopd_term", "distill/ema_gap", "loss/total"):
        assert r2[key] == pytest.approx(m2[key], rel=1e-6, abs=1e-9), key
    for k, v in resumed.batches.parts.state("ssopd")["ema"].items():
        torch.testing.assert_close(v, straight.batches.parts.state("ssopd")["ema"][k], rtol=0, atol=1e-7)


def test_after_step_without_ema_state_fails_loudly():
    ctx = UpdateContext(model=torch.nn.Linear(1, 1), optimizer=None, step=1, seed=0, state={})
    with pytest.raises(RuntimeError, match="EMA"):
        SSOPD(teacher="ema").after_step(ctx)
    assert SSOPD().after_step(ctx) == (None, {})
