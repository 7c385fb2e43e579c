"""FEST (arXiv 2605.15012; shared/specs/distill-and-data.md section 5): DPO / SFT terms, decay, demo loader,
part, recipe."""

import dataclasses
import json
import math
import random
from types import SimpleNamespace

import pytest
import torch

from helpers import loss_context
from reasonrl.config.train import TrainConfig, apply_overrides, split_config
from reasonrl.data.demos import Demo, load_demos
from reasonrl.errors import UserError
from reasonrl.losses.dpo import demo_weight, dpo_sigmoid, pick_rejected, sequence_logp, sft_nll
from reasonrl.models import build_tiny
from reasonrl.parts.fest import FEST, FestPairs, Tokens, anchors, demo_draws, encode_demos
from reasonrl.parts.protocol import Channel
from reasonrl.recipes import get_recipe
from reasonrl.loop.run import train_run
from reasonrl.tasks import get_task
from reasonrl.config.validate import check_run


# ------------------------------------------------------------------ maths


def test_dpo_spec_example():
    # spec (d): beta 0.1, l(y+) = -10, ref -12, l(y-) = -20, ref -19 -> z = 0.1 (2 - (-1)) = 0.3,
    # -log sigmoid(0.3) = log(1 + e^-0.3) = log(1.7408182) = 0.5543552
    loss, m = dpo_sigmoid(
        torch.tensor([-10.0]), torch.tensor([-12.0]), torch.tensor([-20.0]), torch.tensor([-19.0]), beta=0.1
    )
    assert loss.item() == pytest.approx(0.55436, abs=1e-5)
    # implicit rewards: 0.1 * 2 = 0.2 and 0.1 * (-1) = -0.1; margin 0.3; chosen above rejected
    assert (m["chosen_reward"].item(), m["rejected_reward"].item()) == pytest.approx((0.2, -0.1))
    assert (m["margin"].item(), m["accuracy"].item()) == pytest.approx((0.3, 1.0))


def test_dpo_own_example_wrong_way_round_and_gradient():
    # beta 0.5: chosen (-3) - (-2) = -1 -> reward -0.5; rejected (-1) - (-2) = 1 -> reward 0.5; z = -1,
    # loss = log(1 + e^1) = 1.3132617, accuracy 0; dL/dl_c = -beta sigmoid(-z) = -0.5 * 0.7310586 = -0.3655293
    pc = torch.tensor([-3.0], requires_grad=True)
    loss, m = dpo_sigmoid(pc, torch.tensor([-2.0]), torch.tensor([-1.0]), torch.tensor([-2.0]), beta=0.5)
    assert loss.item() == pytest.approx(1.3132617, abs=1e-6)
    assert (m["margin"].item(), m["accuracy"].item()) == pytest.approx((-1.0, 0.0))
    loss.sum().backward()
    assert pc.grad.item() == pytest.approx(-0.3655293, abs=1e-6)
    # a huge margin neither overflows nor loses the loss: -log sigmoid(100) = 3.7e-44 -> 0; -log sigmoid(-100) = 100
    big, _ = dpo_sigmoid(torch.tensor([1000.0, -1000.0]), torch.zeros(2), torch.zeros(2), torch.zeros(2), beta=0.1)
    assert big.tolist() == pytest.approx([0.0, 100.0], abs=1e-4)
    with pytest.raises(ValueError, match="beta"):
        dpo_sigmoid(pc, pc, pc, pc, beta=0.0)
    with pytest.raises(ValueError, match="one shape"):
        dpo_sigmoid(torch.zeros(2), torch.zeros(2), torch.zeros(3), torch.zeros(2))


def test_sequence_logp_sum_mean_and_sft_nll():
    logp = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.5, -2.0], [0.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [0, 0, 0]])
    # row 0: -1 - 2 = -3 (the -3 is padding), mean -1.5; row 1: -3, mean -1; an empty row: 0
    assert sequence_logp(logp, mask).tolist() == pytest.approx([-3.0, -3.0, 0.0])
    assert sequence_logp(logp, mask, length_norm=True).tolist() == pytest.approx([-1.5, -1.0, 0.0])
    assert sft_nll(logp, mask).tolist() == pytest.approx([1.5, 1.0, 0.0])


def test_demo_weight_spec_decay_and_the_options():
    # spec (d): alpha after 0 / 1 / 3 passes = 1, 0.5, 0.125 (alpha_0 = 1, gamma = 0.5)
    assert [demo_weight(e) for e in (0, 1, 3)] == pytest.approx([1.0, 0.5, 0.125])
    assert demo_weight(2, alpha0=2.0, gamma=0.1) == pytest.approx(0.02)  # 2 * 0.1^2
    # linear over E = 4: 1 - 1/4 = 0.75; after E passes 0 and stays 0
    assert [demo_weight(e, schedule="linear", total_passes=4) for e in (1, 4, 9)] == pytest.approx([0.75, 0, 0])
    # cosine over E = 4: (1 + cos(pi * 2/4)) / 2 = 0.5 at e = 2; (1 + cos(pi/4)) / 2 = 0.8535534 at e = 1
    assert [demo_weight(e, schedule="cosine", total_passes=4) for e in (0, 1, 2, 4, 7)] == pytest.approx(
        [1.0, 0.8535534, 0.5, 0.0, 0.0]
    )
    with pytest.raises(ValueError, match="unknown demo weight schedule"):
        demo_weight(0, schedule="step")


def test_pick_rejected_prefers_incorrect_and_the_all_correct_options():
    correct = torch.tensor([[1, 0, 0, 1], [1, 1, 1, 1], [0, 1, 0, 1]])
    logp = torch.tensor([[-1.0, -2, -3, -4], [-5, -2, -9, -1], [-1, -1, -1, -1]])
    # one / skip: demo 0's first wrong is column 1, demo 1 has none (skipped), demo 2's first wrong is column 0
    demo, col = pick_rejected(correct, logp)
    assert (demo.tolist(), col.tolist()) == ([0, 2], [1, 0])
    demo, col = pick_rejected(correct, logp, negatives="all")
    assert (demo.tolist(), col.tolist()) == ([0, 0, 2, 2], [1, 2, 0, 2])
    # lowest likelihood: demo 1's least likely rollout is column 2 (-9)
    demo, col = pick_rejected(correct, logp, all_correct="lowest_likelihood")
    assert (demo.tolist(), col.tolist()) == ([0, 1, 2], [1, 2, 0])
    demo, col = pick_rejected(torch.ones(2, 3), torch.zeros(2, 3))
    assert demo.numel() == col.numel() == 0
    with pytest.raises(ValueError, match="negatives"):
        pick_rejected(correct, logp, negatives="two")


def test_demo_draws_cycle_passes_and_continue_after_a_resume():
    draws = demo_draws(3, 0, 7, seed=5)
    assert [e for _, e in draws] == [0, 0, 0, 1, 1, 1, 2]  # pass = draw // 3
    for e in (0, 1):  # every pass shows each demo once
        assert sorted(i for i, p in draws if p == e) == [0, 1, 2]
    assert demo_draws(3, 0, 4, seed=5) + demo_draws(3, 4, 3, seed=5) == draws  # the draw count alone decides
    orders = {tuple(i for i, _ in demo_draws(6, 0, 6, seed=s)) for s in range(5)}
    assert len(orders) > 1  # the order is seeded, not fixed


def test_anchors_spread_pairs_over_trained_rows():
    mask = torch.tensor([[1, 0], [1, 1], [0, 0], [1, 0], [1, 1]])  # row 2 is not trained
    # live rows [0, 1, 3, 4]; 2 pairs: live[0 * 4 // 2] = 0, live[1 * 4 // 2] = 3
    assert anchors(mask, 2).tolist() == [0, 3]
    # 5 pairs: live[(0, 4, 8, 12, 16) // 5 = (0, 0, 1, 2, 3)] = (0, 0, 1, 3, 4)
    assert anchors(mask, 5).tolist() == [0, 0, 1, 3, 4]
    assert anchors(torch.zeros(3, 2), 4).numel() == 0


# ------------------------------------------------------------------ TRL agreement


@pytest.mark.slow  # importing TRL's trainer stack alone takes ~10-30 s on 2 shared cores
def test_dpo_term_agrees_with_trl_sigmoid_dpo(tmp_path):
    pytest.importorskip("trl", reason="TRL not installed (pip install 'reasonrl[trl]'); the comparison needs it")
    from datasets import Dataset
    from trl import DPOConfig, DPOTrainer

    from reasonrl.models.scoring import score_completions

    model, tok = build_tiny("tiny", seed=0)
    ref, _ = build_tiny("tiny", seed=1)  # a different reference, so the log-ratios are not all 0
    rng = random.Random(0)
    text = lambda n: "".join(rng.choice("0123456789+=\nA:") for _ in range(n))  # noqa: E731
    rows = {
        "prompt": [text(rng.randint(3, 8)) for _ in range(4)],
        "chosen": [text(rng.randint(2, 9)) for _ in range(4)],
        "rejected": [text(rng.randint(2, 9)) for _ in range(4)],
    }
    args = DPOConfig(
        output_dir=str(tmp_path),
        beta=0.3,
        loss_type=["sigmoid"],
        per_device_train_batch_size=4,
        report_to=[],
        use_cpu=True,
        max_length=None,
        save_strategy="no",
    )
    trainer = DPOTrainer(
        model=model, ref_model=ref, args=args, train_dataset=Dataset.from_dict(rows), processing_class=tok
    )
    batch = next(iter(trainer.get_train_dataloader()))  # rows: 4 chosen, then 4 rejected; right-padded
    with torch.no_grad():
        theirs = float(trainer.compute_loss(trainer.model, batch))
    logs = {k: v[-1] for k, v in trainer._metrics["train"].items()}

    # ours on TRL's own rows (right-padded; completion_mask marks the completion tokens): a plain forward of
    # each model, the token log-probs summed over the completion by sequence_logp, then dpo_sigmoid
    ids, att, comp = batch["input_ids"], batch["attention_mask"], batch["completion_mask"]

    def token_logp(m):  # (8, L-1): log p(token t+1 | tokens <= t)
        with torch.no_grad():
            logits = m(input_ids=ids, attention_mask=att).logits[:, :-1].float()
        return logits.log_softmax(-1).gather(-1, ids[:, 1:, None]).squeeze(-1)

    pol, rf = sequence_logp(token_logp(model), comp[:, 1:]), sequence_logp(token_logp(ref), comp[:, 1:])  # (8,)
    loss, m = dpo_sigmoid(pol[:4], rf[:4], pol[4:], rf[4:], beta=0.3)  # rows: 4 chosen, then their 4 rejected
    assert loss.mean().item() == pytest.approx(theirs, abs=1e-6)
    assert m["margin"].mean().item() == pytest.approx(logs["rewards/margins"], abs=1e-6)
    assert m["chosen_reward"].mean().item() == pytest.approx(logs["rewards/chosen"], abs=1e-6)
    assert m["rejected_reward"].mean().item() == pytest.approx(logs["rewards/rejected"], abs=1e-6)
    assert m["accuracy"].mean().item() == pytest.approx(logs["rewards/accuracies"], abs=1e-6)

    # the part's own scoring (prompts left-padded, as rollouts) reads the same log-probs up to float rounding
    def split(i):
        keep = att[i].bool()
        return ids[i][keep & ~comp[i].bool()].tolist(), ids[i][comp[i].bool()].tolist()

    t = encode_demos(tok, [tok.decode(split(i)[0]) for i in range(8)], [""] * 8)
    cid = [split(i)[1] for i in range(8)]
    T = max(map(len, cid))
    cids = torch.tensor([c + [tok.pad_token_id] * (T - len(c)) for c in cid])
    cm = torch.tensor([[1] * len(c) + [0] * (T - len(c)) for c in cid])
    with torch.no_grad():
        lp, _ = score_completions(model, t.prompt_ids, t.prompt_mask, cids, cm, entropies=False)
    assert sequence_logp(lp, cm).tolist() == pytest.approx(pol.tolist(), abs=1e-3)


# ------------------------------------------------------------------ the loss term


@pytest.fixture(scope="module")
def tiny():
    return build_tiny("tiny", seed=0)


def _seq_logp(model, tok, prompt: str, completion_ids: list[int]) -> float:
    """Sum of the completion tokens' log-probs, one unpadded forward (independent of the part's paths)."""
    ids = tok(prompt, add_special_tokens=False)["input_ids"] + completion_ids
    logits = model(input_ids=torch.tensor([ids])).logits[0]  # (L, V)
    lp = logits[len(ids) - len(completion_ids) - 1 : -1].log_softmax(-1)  # (T, V) predicting the completion
    return lp.gather(-1, torch.tensor(completion_ids)[:, None]).sum()


def _pairs(tok):
    chosen = encode_demos(tok, ["1+2=?\n", "4+4=?\n"], ["1+2=3\nA:3", "A:8"])
    rej = encode_demos(tok, ["1+2=?\n", "1+2=?\n", "4+4=?\n"], ["A:4", "7\nA:7", "A:9"])
    return FestPairs(
        chosen=chosen,
        alpha=torch.tensor([1.0, 0.5]),
        demo=torch.tensor([0, 0, 1]),
        rejected=rej,
        ref_chosen=torch.tensor([-20.0, -9.0, -12.0]),
        ref_rejected=torch.tensor([-8.0, -15.0, -11.0]),
    )


def test_dpo_loss_term_matches_the_formula_and_micro_batches_add_up(tiny):
    model, tok = tiny
    pairs = _pairs(tok)
    batch = SimpleNamespace(loss_mask=torch.ones(4, 3))  # anchors: rows 0, 1, 2
    data = Channel(values={"pairs": pairs})
    part = FEST(beta=0.2)
    loss, m = part.loss_term(
        loss_context(logp=None, batch=batch, rows=torch.arange(4), model=model, data=data, n_seqs=4)
    )
    eos = [tok.eos_token_id]
    enc = lambda s: tok(s, add_special_tokens=False)["input_ids"] + eos  # noqa: E731
    lc = [_seq_logp(model, tok, "1+2=?\n", enc("1+2=3\nA:3"))] * 2 + [_seq_logp(model, tok, "4+4=?\n", enc("A:8"))]
    lr = [_seq_logp(model, tok, p, enc(c)) for p, c in (("1+2=?\n", "A:4"), ("1+2=?\n", "7\nA:7"), ("4+4=?\n", "A:9"))]
    z = [0.2 * ((c - rc) - (r - rr)) for c, rc, r, rr in zip(lc, (-20.0, -9.0, -12.0), lr, (-8.0, -15.0, -11.0))]
    per = [-torch.nn.functional.logsigmoid(x) for x in z]
    expected = (1.0 * per[0] + 1.0 * per[1] + 0.5 * per[2]) / 3  # alpha of demo 0, 0, 1; mean over P = 3 pairs
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
    assert m["fest/sup_term"] == pytest.approx(expected.item(), rel=1e-5)
    assert m["fest/dpo_loss_term"] == pytest.approx(sum(p.item() for p in per) / 3, rel=1e-5)
    assert m["fest/margin_term"] == pytest.approx(sum(x.item() for x in z) / 3, rel=1e-5)
    loss.backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())
    model.zero_grad(set_to_none=True)
    # micro-batches {0, 3} and {1, 2}: pairs 0 and (1, 2) computed once each, the parts add up to the whole
    a, ma = part.loss_term(
        loss_context(logp=None, batch=batch, rows=torch.tensor([0, 3]), model=model, data=data, n_seqs=4)
    )
    b, mb = part.loss_term(
        loss_context(logp=None, batch=batch, rows=torch.tensor([1, 2]), model=model, data=data, n_seqs=4)
    )
    assert (a + b).item() == pytest.approx(loss.item(), rel=1e-5)
    assert ma["fest/accuracy_term"] + mb["fest/accuracy_term"] == pytest.approx(m["fest/accuracy_term"])
    # a batch without FEST's data (or no pair) adds nothing
    none, mn = part.loss_term(
        loss_context(logp=None, batch=SimpleNamespace(loss_mask=torch.ones(2, 2)), rows=torch.arange(2), model=model)
    )
    assert none.item() == 0.0 and mn == {}


def test_sft_loss_term_is_the_weighted_token_mean_nll(tiny):
    model, tok = tiny
    chosen = encode_demos(tok, ["1+2=?\n", "4+4=?\n"], ["1+2=3\nA:3", "A:8"])
    pairs = FestPairs(chosen=chosen, alpha=torch.tensor([1.0, 0.25]), demo=torch.arange(2))
    batch = SimpleNamespace(loss_mask=torch.ones(2, 1))
    loss, m = FEST(sup_loss="sft").loss_term(
        loss_context(
            logp=None, batch=batch, rows=torch.arange(2), model=model, data=Channel(values={"pairs": pairs}), n_seqs=2
        )
    )
    eos = [tok.eos_token_id]
    n0 = len(tok("1+2=3\nA:3", add_special_tokens=False)["input_ids"]) + 1
    nll0 = -_seq_logp(model, tok, "1+2=?\n", tok("1+2=3\nA:3", add_special_tokens=False)["input_ids"] + eos) / n0
    nll1 = -_seq_logp(model, tok, "4+4=?\n", tok("A:8", add_special_tokens=False)["input_ids"] + eos) / 4  # A : 8 EOS
    assert loss.item() == pytest.approx(((1.0 * nll0 + 0.25 * nll1) / 2).item(), rel=1e-5)
    assert m["fest/sft_nll_term"] == pytest.approx(((nll0 + nll1) / 2).item(), rel=1e-5)


def test_encode_demos_layout(tiny):
    _, tok = tiny
    t = encode_demos(tok, ["1+2=?\n", "10+20=?\n"], ["A:3", "A:30"])
    assert isinstance(t, Tokens)
    assert t.prompt_mask.tolist() == [[0, 0, 1, 1, 1, 1, 1, 1], [1] * 8]  # left-padded
    assert t.completion_mask.tolist() == [[1, 1, 1, 1, 0], [1] * 5]  # right-padded, EOS included
    assert t.completion_ids[0, 3].item() == tok.eos_token_id


# ------------------------------------------------------------------ demonstrations


def test_load_demos_reads_rows_and_names_bad_ones(tmp_path):
    good = tmp_path / "demos.jsonl"
    good.write_text(
        '{"prompt": "1+2=?\\n", "completion": "A:3"}\n\n'
        '{"prompt": "4+4=?\\n", "completion": "A:8", "answer": "8", "key": "4+4"}\n'
    )
    assert load_demos(good) == [Demo("1+2=?\n", "A:3"), Demo("4+4=?\n", "A:8", "8", "4+4")]
    assert [d.line for d in load_demos(good)] == [1, 3]  # the blank line 2 is skipped
    cases = {
        '{"prompt": "x"}': r"demos\.jsonl:2: missing required field 'completion'",
        '{"prompt": "x", "completion": 3}': r":2: field 'completion' must be text",
        '{"prompt": "x", "completion": "y", "answr": "1"}': r":2: unknown field\(s\) \['answr'\]",
        '["x", "y"]': r":2: a demonstration row must be a JSON object",
        '{"prompt": "x", "completion": "  "}': r":2: field 'completion' is empty",
        '{"prompt": "x",': r":2: not valid JSON",
    }
    for row, pattern in cases.items():
        bad = tmp_path / "bad" / "demos.jsonl"
        bad.parent.mkdir(exist_ok=True)
        bad.write_text('{"prompt": "1+2=?\\n", "completion": "A:3"}\n' + row + "\n")
        with pytest.raises(UserError, match=pattern):
            load_demos(bad)
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(UserError, match="has no rows"):
        load_demos(tmp_path / "empty.jsonl")
    with pytest.raises(UserError, match="does not exist"):
        load_demos(tmp_path / "nope.jsonl")


def test_demo_set_from_the_task_and_from_a_file(tmp_path):
    task = get_task("arithmetic", max_digits=1)
    items = FEST(n_demos=5).demo_set(task, seed=0)
    assert len({it.key for it in items}) == 5 and all(
        it.demo and task.verify(it.demo, it.answer, it.meta) == 1 for it in items
    )
    assert [it.key for it in FEST(n_demos=5).demo_set(task, seed=0)] == [it.key for it in items]  # fixed per seed
    path = tmp_path / "d.jsonl"
    path.write_text(
        '{"prompt": "1+2=?\\n", "completion": "1+2=3\\nA:3"}\n'
        '{"prompt": "4+4=?\\n", "completion": "A:8", "answer": "8"}\n'
        '{"prompt": "5+4=?\\n", "completion": "A:9", "key": "k"}\n'
    )
    items = FEST(demos=str(path)).demo_set(task, seed=0)
    assert [(it.key, it.answer, it.demo) for it in items] == [
        ("1+2=?\n", "3", "1+2=3\nA:3"),
        ("4+4=?\n", "8", "A:8"),
        ("k", "9", "A:9"),
    ]  # the answer extracted when absent
    assert len(FEST(demos=str(path), n_demos=2).demo_set(task, seed=0)) == 2  # a seeded sample of the file
    path.write_text(
        '{"prompt": "1+2=?\\n", "completion": "A:3"}\n\n{"prompt": "4+4=?\\n", "completion": "no answer"}\n'
    )
    with pytest.raises(UserError, match=r"d\.jsonl:3: the demonstration has no 'answer'"):  # line 3: a blank line 2
        FEST(demos=str(path)).demo_set(task, seed=0)


# ------------------------------------------------------------------ config


def test_config_keys_reach_the_part_and_are_validated(tmp_path):
    r = apply_overrides(get_recipe("fest"), split_config({"fest": {"sup_loss": "sft", "gamma": "0.25"}})[1])
    assert (r.fest.sup_loss, r.fest.gamma, r.fest.beta) == ("sft", 0.25, 0.1)
    assert "reference" not in r.needs and "reference" in get_recipe("fest").needs  # sft needs no reference
    assert "reference" not in dataclasses.replace(get_recipe("fest"), fest=FEST(reference="behaviour")).needs
    assert apply_overrides(get_recipe("fest"), split_config({"fest": None})[1]).fest is None
    on = apply_overrides(get_recipe("grpo"), split_config({"fest": {"n_demos": 8}})[1])
    assert on.fest == FEST(n_demos=8) and len(on.rounds) == 1 and len(on.calls("loss_term")) == 1
    with pytest.raises(UserError, match="fest.reference"):
        check_run(
            TrainConfig(), apply_overrides(get_recipe("fest"), split_config({"fest": {"reference": "teacher"}})[1])
        )
    bad = dataclasses.replace(get_recipe("fest"), fest=FEST())
    object.__setattr__(bad.fest, "demos", str(tmp_path / "missing.jsonl"))
    with pytest.raises(UserError, match=r"'fest.demos' .* a JSONL file that exists"):
        check_run(TrainConfig(), bad)


# ------------------------------------------------------------------ end to end


def _run(tiny_dir, tmp_path, **fest):
    # n_demos = demos_per_step = 2: every step is one whole pass, so alpha = 1, 0.5, 0.25 at steps 1, 2, 3
    recipe = get_recipe("fest")
    recipe = dataclasses.replace(
        recipe,
        group_size=4,
        sampling=dataclasses.replace(recipe.sampling, max_new_tokens=16),
        fest=FEST(n_demos=2, demos_per_step=2, **fest),
    )
    cfg = TrainConfig(
        model=str(tiny_dir),
        out=str(tmp_path / "run"),
        recipe="fest",
        task="arithmetic",
        steps=3,
        task_options={"max_digits": 1},
        prompts_per_step=2,
        eval_every=0,
        final_eval_problems=0,
        save_every=0,
        micro_batch_size=3,
    )
    train_run(cfg, recipe)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    for r in rows:
        assert all(math.isfinite(v) for v in r.values() if isinstance(v, float)), r
    assert [(r["fest/demos"], r["fest/pass"], r["fest/alpha"]) for r in rows] == [
        (2, 0, 1.0),
        (2, 1, 0.5),
        (2, 2, 0.25),
    ]
    return rows


@pytest.mark.slow
def test_fest_trains_end_to_end(tiny_dir, tmp_path):
    rows = _run(tiny_dir, tmp_path)
    acted = [r for r in rows if r["fest/pairs"] > 0]
    assert acted, [r["fest/demo_accuracy"] for r in rows]
    for r in rows:  # one incorrect rollout per demo with one, none for an all-correct demo
        assert r["fest/pairs"] == 2 - r["fest/demos_all_correct"]
        assert 0 <= r["fest/demo_accuracy"] <= 1
    if rows[0]["fest/pairs"]:  # step 1: the policy is the initial model, so every margin is 0 and DPO = log 2;
        # alpha = 1 on the first pass and one minibatch: the term is (1/P) sum_j 1 * log 2 = log 2
        assert rows[0]["fest/margin_term"] == pytest.approx(0.0, abs=1e-5)
        assert rows[0]["fest/dpo_loss_term"] == pytest.approx(math.log(2), abs=1e-5)
        assert rows[0]["fest/sup_term"] == pytest.approx(math.log(2), abs=1e-5)


@pytest.mark.slow
def test_fest_sft_switch_end_to_end(tiny_dir, tmp_path):
    rows = _run(tiny_dir, tmp_path, sup_loss="sft")
    for r in rows:  # every demonstration is a term; no rollouts of the demo prompts, no DPO metrics
        assert r["fest/pairs"] == 2 and "fest/demo_accuracy" not in r and "fest/dpo_loss_term" not in r
        assert r["fest/sft_nll_term"] > 0  # the values by hand: the SFT unit test above
