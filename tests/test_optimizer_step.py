"""The optimiser step's host reads (issue 27): one read of the total gradient norm, whose finiteness
covers every parameter, instead of one ``isfinite`` read per parameter tensor (~290 for a 0.5B
model); a non-finite step is still skipped as before. ``count_reads`` (tests/harness.py) is also the decode loop's
counter (tests/test_gpu_path.py)."""

import math

import pytest
import torch

from reasonrl.config.train import Lora
from reasonrl.loop.schedule import clip_if_finite

from harness import count_reads


def test_clip_if_finite_by_hand():
    a, b, frozen = (torch.nn.Parameter(torch.zeros(n)) for n in (2, 1, 3))
    a.grad, b.grad = torch.tensor([3.0, 4.0]), torch.tensor([12.0])
    # norm sqrt(9 + 16 + 144) = 13; max 6.5: every gradient times 6.5 / (13 + 1e-6) ~ 0.5
    assert clip_if_finite([a, b, frozen], 6.5) == 13.0
    assert torch.allclose(a.grad, torch.tensor([1.5, 2.0])) and torch.allclose(b.grad, torch.tensor([6.0]))
    assert clip_if_finite([a, b], 100.0) == pytest.approx(6.5, abs=1e-5)  # below the max: untouched
    assert torch.allclose(b.grad, torch.tensor([6.0]))
    kept = b.grad.clone()
    for bad in (float("nan"), float("inf")):
        a.grad = torch.tensor([bad, 1.0])
        assert clip_if_finite([a, b], 1.0) is None  # one bad value anywhere makes the norm non-finite
        assert torch.equal(b.grad, kept)  # and nothing is clipped
    assert clip_if_finite([frozen], 1.0) == 0.0  # no gradients: norm 0


def test_clip_if_finite_reads_the_device_once(monkeypatch):
    params = [torch.nn.Parameter(torch.ones(3)) for _ in range(40)]
    for p in params:
        p.grad = torch.ones(3)
    # 40 x 3 ones: norm sqrt(120) = 10.954
    assert sum(count_reads(monkeypatch, lambda: clip_if_finite(params, 1.0)).values()) == 1


def test_an_optimiser_step_reads_the_device_the_same_whatever_the_parameter_count(tiny_dir, monkeypatch):
    from harness import one_step

    counts, n_params = [], []
    for lora in (Lora(), Lora(r=4, alpha=8.0)):  # LoRA starts with B = 0: the same rollouts and micro-batches
        tr, batch, _, _ = one_step(tiny_dir, lora=lora, lr=0.0)
        paused, adamw = [False], tr.opt.step

        def step():  # AdamW's step counts live on the host (unless capturable): its reads are not the device's
            paused[0] = True  # noqa: B023 - step is this iteration's trainer's, called in it only
            adamw()  # noqa: B023
            paused[0] = False  # noqa: B023

        tr.opt.step = step
        rows = torch.arange(len(batch.ro.texts))
        counts.append(count_reads(monkeypatch, lambda: tr._optimizer_step(batch, rows), paused))  # noqa: B023 - called at once
        n_params.append(len(tr.params))
    assert n_params[0] != n_params[1]
    assert counts[0] == counts[1]  # before: one isfinite read per parameter tensor


def test_a_nan_gradient_skips_the_step_as_before(tiny_dir):
    # a finite loss whose gradient holds one NaN: the step is skipped, its gradients dropped, no
    # grad_norm logged, the LR schedule still advances; without it the next step is taken
    from harness import one_step

    tr, batch, _, _ = one_step(tiny_dir, lr=1e-3)
    rows, weights = torch.arange(len(batch.ro.texts)), tr.params[3]
    hook = weights.register_hook(lambda g: g.flatten().index_fill(0, torch.tensor([0]), float("nan")).view_as(g))
    before, scheduled = [p.detach().clone() for p in tr.params], tr.sched.last_epoch
    out = tr._optimizer_step(batch, rows)
    assert out["nonfinite"] == 1.0 and "grad_norm" not in out and math.isfinite(out["loss/total"])
    assert all(p.grad is None for p in tr.params) and all(torch.equal(a, b) for a, b in zip(before, tr.params))
    assert tr.sched.last_epoch == scheduled + 1
    hook.remove()
    out = tr._optimizer_step(batch, rows)
    assert out["nonfinite"] == 0.0 and out["grad_norm"] > 0
    assert any(not torch.equal(a, b) for a, b in zip(before, tr.params))
