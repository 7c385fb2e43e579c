"""NudgeRL's recipe part (parts/nudge.py, arXiv 2605.15726): hinted sub-groups, their advantages, the
bare-prompt distillation term, and the nudgerl recipe end to end on the tiny model."""

import json
import math

import pytest
import torch
from helpers import batch_context, loss_context, text_rollouts

from reasonrl.loop.batch import Batch, BatchMaker
from reasonrl.config.train import TrainConfig
from reasonrl.distill import encode_contexts, score_under_context
from reasonrl.parts import GenRequest, HintSampling
from reasonrl.parts.nudge import distill_loss
from reasonrl.recipes import get_recipe
from reasonrl.rollout import HFEngine, SamplingParams
from reasonrl.loop.run import train_run
from reasonrl.tasks import get_task
from reasonrl.errors import UserError
from reasonrl.config.validate import check_part

MARK = "Context (exploration condition)"


class HintedTask:
    """Arithmetic items with three fixed hints each (the hints' text does not matter here)."""

    def __init__(self):
        self.inner = get_task("arithmetic")

    def hints(self, item):
        return [f"first {item.key}", f"second {item.key}", f"third {item.key}"]


def _items(n, seed=3):
    stream = get_task("arithmetic").iter_items("train", seed)
    return [next(stream) for _ in range(n)]


def _request(engine, items, first, part=HintSampling(), G=8, seed=11):
    return GenRequest(
        items=items,
        first=first,
        engine=engine,
        task=HintedTask(),
        group_size=G,
        sampling=SamplingParams(temperature=1.0, max_new_tokens=12),
        seed=seed,
    )


class RecordingEngine:
    """Stands in for HFEngine: records the prompts and seeds it is asked for, returns no rollouts."""

    device = "cpu"

    def generate(self, prompts, n, sampling, seeds=None):
        self.prompts, self.n, self.seeds = list(prompts), n, list(seeds)
        return text_rollouts(self.prompts, ["1"] * len(self.prompts), 1)


# ---------------------------------------------------------------- advantages


def test_spec_example_through_the_shaper_and_other_rounds_keep_theirs():
    # spec (d): dropout [1, 0], hint 1 [1, 1, 0], hint 2 [0, 0, 0], lambda 1.1. mu = 3/8 = 0.375,
    # mu_1 = 2/3, mu_2 = 0. Dropout a = r - mu: 0.625, -0.375. Hint 1: (r - 2/3) + 1.1 (2/3 - 0.375)
    # = r - 0.66667 + 0.32083: 0.65417, 0.65417, -0.34583. Hint 2: 0 + 1.1 (0 - 0.375) = -0.4125 (x3).
    # mean -0.003125, population std 0.502134 -> (a - mean) / (std + 1e-5) below.
    rewards = torch.tensor([[1.0, 0, 1, 1, 0, 0, 0, 0], [1.0, 0, 1, 0, 1, 0, 1, 0]])
    contexts = torch.tensor([[0, 0, 1, 1, 1, 2, 2, 2], [0] * 8])
    before = torch.tensor([[9.0] * 8, [0.5, -0.5] * 4])  # the estimator's; group 2 is a second-round group
    ctx = batch_context(rewards=rewards, correct=rewards, contexts=contexts, kinds=torch.tensor([0, 1]))
    adv, m = HintSampling().shape_advantages(before, ctx)
    want = torch.tensor([1.2509, -0.7406, 1.3090, 1.3090, -0.6825, -0.8153, -0.8153, -0.8153])
    assert torch.allclose(adv[0], want, atol=2e-4)
    assert torch.equal(adv[1], before[1])
    # first-round rows only: hinted 2 of 6 correct, bare 1 of 2
    assert m == {"nudge/hinted_accuracy": pytest.approx(2 / 6), "nudge/bare_accuracy": pytest.approx(0.5)}


def test_the_shaper_refuses_token_level_advantages():
    ctx = batch_context(
        rewards=torch.zeros(1, 2),
        correct=torch.zeros(1, 2),
        contexts=torch.zeros(1, 2, dtype=torch.long),
        kinds=torch.zeros(1, dtype=torch.long),
    )
    with pytest.raises(ValueError, match="per rollout"):
        HintSampling().shape_advantages(torch.zeros(1, 2, 5), ctx)


# ---------------------------------------------------------------- sub-groups


def test_dropout_layout_is_seeded_by_the_task_position_and_matches_the_prompts():
    part, eng = HintSampling(), RecordingEngine()
    items = _items(40)
    ro, m = part.generate(_request(eng, items, first=100))
    ids = ro.context_ids.view(40, 8)
    assert ro.n == 8 and eng.n == 1 and len(eng.prompts) == 320
    for i, item in enumerate(items):
        row = ids[i].tolist()
        assert row == sorted(row) and set(row) <= {0, 1, 2}  # bare rows first, then hint 1's, hint 2's
        assert row.count(0) == (4 - row.count(1)) + (4 - row.count(2))  # bare = d_1 + d_2
        assert row == part.contexts(100 + i, 11)  # the same draw again from the position alone
        for c, prompt in zip(row, eng.prompts[i * 8 : (i + 1) * 8]):
            # sequential sampler: hints 1 and 2 are the task's first two; the hinted prompt ends as the bare one
            assert (
                prompt == item.prompt
                if c == 0
                else (
                    prompt.endswith("\n" + item.prompt)
                    and MARK in prompt
                    and ["first", "second"][c - 1] + " " + item.key in prompt
                )
            )
    # Binomial(4, 0.5) per hint: 320 coins, mean 0.5; seeded, so this draw is fixed (a loose band)
    assert 0.4 < float((ids == 0).float().mean()) < 0.6
    assert len({tuple(r) for r in ids.tolist()}) > 5  # positions draw different layouts
    assert m["nudge/hinted_frac"] == pytest.approx(float((ids > 0).float().mean()))
    assert m["nudge/dropout_frac"] == pytest.approx(1 - m["nudge/hinted_frac"])
    # p_drop 0 keeps every rollout on its hint, 1 drops them all
    assert HintSampling(p_drop=0.0).contexts(7, 11) == [1, 1, 1, 1, 2, 2, 2, 2]
    assert HintSampling(p_drop=1.0).contexts(7, 11) == [0] * 8


def test_random_sampler_is_keyed_by_position_and_errors_are_loud():
    part, eng = HintSampling(sampler="random", p_drop=0.0), RecordingEngine()
    items = _items(12)
    part.generate(_request(eng, items, first=0))
    first = list(eng.prompts)
    part.generate(_request(eng, items[5:6], first=5))  # the same item alone: the same hints, same seeds
    assert eng.prompts == first[40:48]
    picked = {p.split("approach: ")[1].split(" ")[0] for p in first}
    assert picked == {"first", "second", "third"}  # random picks reach beyond the first two
    with pytest.raises(ValueError, match=r"group_size=6 .* 2 \* 4 = 8"):
        HintSampling().generate(_request(eng, items, first=0, G=6))
    with pytest.raises(ValueError, match="has 3 hints, hints.n_hints=4"):
        HintSampling(n_hints=4, per_hint=2).generate(_request(eng, items, first=0))
    with pytest.raises(UserError, match="'hints.sampler' = 'shuffled'"):
        check_part(HintSampling(sampler="shuffled"), get_recipe("nudgerl"))
    with pytest.raises(UserError, match=r"'hints.template' = '\{hint\}' .* \{prompt\}"):
        check_part(HintSampling(template="{hint}"), get_recipe("nudgerl"))


def test_rows_do_not_depend_on_batch_composition(sharp_tiny):
    model, tok = sharp_tiny
    engine, part, items = HFEngine(model, tok), HintSampling(), _items(3)
    alone, _ = part.generate(_request(engine, items[1:2], first=21))
    batch, _ = part.generate(_request(engine, items, first=20))
    rows = slice(8, 16)  # item 1 of the batch: task position 21 both times
    assert alone.texts == batch.texts[rows] and alone.prompts == batch.prompts[rows]
    assert torch.equal(alone.context_ids, batch.context_ids[rows])
    T = alone.completion_ids.shape[1]
    assert torch.equal(alone.completion_ids, batch.completion_ids[rows, :T])
    assert torch.allclose(alone.logprobs, batch.logprobs[rows, :T], atol=1e-5)
    assert len(set(alone.texts)) > 1  # rows of one prompt are not copies of each other


# ---------------------------------------------------------------- distillation


def test_distill_loss_by_hand():
    # row 0: A = 2, log-probs -1, -2 over 2 tokens -> 2 * (-3) / 2 = -3; row 1: A = -1, one token -0.5
    # -> 0.5; row 2: no tokens -> 0. Sum -2.5; loss = -(-2.5) / n_seqs 4 = 0.625.
    logp = torch.tensor([[-1.0, -2.0, -7.0], [-0.5, -3.0, 0.0], [-1.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    loss, m = distill_loss(logp, torch.tensor([[2.0], [-1.0], [5.0]]), mask, n_seqs=4)
    assert float(loss) == pytest.approx(0.625)
    assert m["nudge/bare_logp"] == pytest.approx((-1.5 - 0.5) / 2)  # per-sequence means of live rows


def _batch(model, tok):
    part = HintSampling()
    items = _items(2)
    ro, _ = part.generate(_request(HFEngine(model, tok), items, first=0))
    R = len(ro.texts)
    adv = torch.linspace(-1.0, 1.0, R)  # (R,) any advantages
    b = Batch(
        items=items,
        ro=ro,
        rewards=torch.zeros(2, 8),
        correct=torch.zeros(2, 8),
        advantages=adv,
        loss_mask=ro.completion_mask.float(),
    )
    return part, b


def _term(part, b, model, tok, rows, n_seqs):
    c_len = int(b.ro.completion_mask[rows].sum(-1).max())
    ids, mask = encode_contexts(tok, [b.ro.prompts[r] for r in rows])  # each row's own (hinted) prompt
    logp = score_under_context(
        model, ids, mask, b.ro.completion_ids[rows, :c_len], b.ro.completion_mask[rows, :c_len], grad=True
    ).logprobs
    return part.loss_term(
        loss_context(
            logp=logp,
            mask=b.loss_mask[rows, :c_len],
            batch=b,
            rows=rows,
            model=model,
            tok=tok,
            temperature=1.0,
            norm_len=12,
            n_seqs=n_seqs,
        )
    )


def test_distill_term_scores_under_the_bare_prompt_and_micro_batches_add_up(sharp_tiny):
    model, tok = sharp_tiny
    part, b = _batch(model, tok)
    R = len(b.ro.texts)
    assert (b.ro.context_ids > 0).any() and (b.ro.context_ids == 0).any()
    every = torch.arange(R)
    whole, m = _term(part, b, model, tok, every, n_seqs=R)
    # independently: every row re-scored under its item's bare prompt, no reuse
    ids, mask = encode_contexts(tok, [b.items[r // 8].prompt for r in range(R)])
    bare = score_under_context(model, ids, mask, b.ro.completion_ids, b.ro.completion_mask).logprobs
    per_seq = (b.advantages[:, None] * bare * b.loss_mask).sum(-1) / b.loss_mask.sum(-1)
    assert float(whole.detach()) == pytest.approx(float(-0.1 * per_seq.sum() / R), rel=1e-4, abs=1e-6)
    assert m["nudge/distill_term"] == pytest.approx(float(whole.detach()))
    # a shuffled split into micro-batches (each trimmed to its own length) sums to the whole, values and grads
    parts = torch.randperm(R, generator=torch.Generator().manual_seed(0)).split(5)
    split = sum(_term(part, b, model, tok, rows, n_seqs=R)[0] for rows in parts)
    assert float(split.detach()) == pytest.approx(float(whole.detach()), rel=1e-4, abs=1e-6)
    p = next(model.parameters())
    g_whole = torch.autograd.grad(whole, p)[0]
    g_split = torch.autograd.grad(split, p)[0]
    assert g_whole.abs().sum() > 0 and torch.allclose(g_whole, g_split, atol=1e-6)


def test_distill_term_skips_later_round_groups(sharp_tiny):
    model, tok = sharp_tiny
    part, b = _batch(model, tok)
    b.kinds = torch.tensor([0, 1])  # group 2 came from a second round
    rows = torch.arange(16)
    only_first, _ = _term(part, b, model, tok, rows, n_seqs=16)
    b.loss_mask = b.loss_mask.clone()
    b.loss_mask[8:] = 0  # the same as group 2 contributing nothing
    b.kinds = None
    assert float(only_first.detach()) == pytest.approx(
        float(_term(part, b, model, tok, rows, n_seqs=16)[0].detach()), abs=1e-6
    )


# ---------------------------------------------------------------- end to end


def test_nudgerl_trains_end_to_end(tiny_dir, tmp_path, monkeypatch):
    seen = []
    make = BatchMaker.make
    monkeypatch.setattr(BatchMaker, "make", lambda self, n: seen.append(make(self, n)) or seen[-1])
    cfg = TrainConfig(
        model=str(tiny_dir),
        out=str(tmp_path / "run"),
        recipe="nudgerl",
        task="arithmetic",
        steps=3,
        task_options={"max_digits": 1},
        prompts_per_step=3,
        eval_every=0,
        final_eval_problems=4,
        final_eval_k=0,
        save_every=0,
    )
    train_run(cfg, get_recipe("nudgerl"))  # G = 8 = 2 hints x 4
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    for r in rows:
        assert all(math.isfinite(v) for v in r.values() if isinstance(v, float)), r
        assert r["nudge/hinted_frac"] + r["nudge/dropout_frac"] == pytest.approx(1.0)
        # every group of one reward (all right or all wrong) has all-zero NudgeRL advantages, so L_d is 0
        assert (r["nudge/distill_term"] == 0.0) == (r["frac_zero_var_groups"] == 1.0) and "nudge/bare_logp" in r
        assert {"nudge/hinted_accuracy", "nudge/bare_accuracy"} & set(r)
    assert any("nudge/bare_accuracy" in r for r in rows) and any("nudge/hinted_accuracy" in r for r in rows)
    assert any(r["nudge/distill_term"] != 0.0 for r in rows), [
        (r["accuracy"], r.get("nudge/hinted_accuracy"), r.get("nudge/bare_accuracy")) for r in rows
    ]
    assert len(seen) == 3
    for b in seen:
        ids = b.ro.context_ids
        assert ids is not None and ids.shape == (24,) and set(ids.tolist()) <= {0, 1, 2}
        for c, prompt, item in zip(ids.tolist(), b.ro.prompts, [it for it in b.items for _ in range(8)]):
            assert (prompt == item.prompt) == (c == 0) and prompt.endswith(item.prompt)
