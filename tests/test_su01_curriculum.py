"""SU-01's reverse-perplexity SFT curriculum (spec distill-and-data section 13): the pure ordering,
the per-example NLL forward and the pretrain plumbing."""

import math

import pytest
import torch

from reasonrl.data.curriculum import check_curriculum, perplexities, reverse_ppl_order
from reasonrl.models import build_tiny
from reasonrl.loop.sft import SFTConfig, curriculum_stream, demo_nll, sft, sft_batch
from reasonrl.tasks import get_task


def test_spec_example_nll_to_ppl_to_descending_order():
    # spec (d): NLLs [0.5, 2.0, 1.0] -> PPL [e^0.5, e^2, e^1] = [1.649, 7.389, 2.718] -> order [1, 2, 0]
    ppl = perplexities([0.5, 2.0, 1.0])
    assert ppl == pytest.approx([1.6487, 7.3891, 2.7183], abs=1e-4)
    assert reverse_ppl_order(ppl) == [1, 2, 0]


def test_ties_keep_their_original_order_and_nan_is_refused():
    # NLL [0, ln 3, 0, ln 3] -> PPL [1, 3, 1, 3]: the two 3s first (index 1 before 3), then the 1s (0 before 2)
    assert reverse_ppl_order(perplexities([0.0, math.log(3), 0.0, math.log(3)])) == [1, 3, 0, 2]
    with pytest.raises(ValueError, match="example 1"):
        reverse_ppl_order([1.0, float("nan")])
    with pytest.raises(ValueError, match="unknown curriculum"):
        check_curriculum("ppl")
    with pytest.raises(ValueError, match="unknown curriculum"):
        SFTConfig(curriculum="shuffled")


def test_demo_nll_is_each_example_s_own_sft_loss():
    # one example alone: its mean NLL is exactly the SFT loss of a batch holding only it (HF's mean over labels)
    model, tok = build_tiny("tiny", seed=0)
    items = [next(iter(get_task("arithmetic").iter_items("train", s))) for s in range(3)]
    nll = demo_nll(model, tok, items, batch_size=2)  # batches of 2 and 1: padding must not change a row's value
    with torch.no_grad():
        alone = [model(**sft_batch([it], tok), use_cache=False).loss.item() for it in items]
    assert nll == pytest.approx(alone, rel=1e-4)


def test_reverse_ppl_stream_is_the_same_pool_sorted_and_none_keeps_the_task_order():
    model, tok = build_tiny("tiny", seed=0)
    task = get_task("arithmetic")
    cfg = SFTConfig(steps=3, batch_size=4, seed=1, curriculum="reverse_ppl")
    stream, ppl = curriculum_stream(model, tok, task, cfg)
    ordered = [next(stream) for _ in range(12)]
    plain = task.iter_items("train", 1)
    pool = [next(plain) for _ in range(12)]
    assert sorted(it.key for it in ordered) == sorted(it.key for it in pool)  # the same items, reordered
    assert ppl == sorted(ppl, reverse=True) and len(ppl) == 12
    assert ppl == pytest.approx(perplexities(demo_nll(model, tok, ordered)), rel=1e-4)
    none, none_ppl = curriculum_stream(model, tok, task, SFTConfig(steps=3, batch_size=4, seed=1))
    assert [next(none).key for _ in range(12)] == [it.key for it in pool] and none_ppl == []


def test_sft_with_the_curriculum_logs_descending_batch_perplexity():
    model, tok = build_tiny("tiny", seed=0)
    logs = []
    sft(
        model,
        tok,
        get_task("arithmetic"),
        SFTConfig(steps=3, batch_size=4, eval_every=0, curriculum="reverse_ppl"),
        log=logs.append,
    )
    seen = [m["curriculum/ppl"] for m in logs]
    assert len(seen) == 3 and seen[0] >= seen[1] >= seen[2]


def test_pretrain_names_a_bad_curriculum():
    from typer.testing import CliRunner

    from reasonrl.cli import app

    res = CliRunner().invoke(app, ["pretrain", "--curriculum", "ppl", "--steps", "1"])
    assert res.exit_code != 0 and "--curriculum 'ppl'" in str(res.exception)
