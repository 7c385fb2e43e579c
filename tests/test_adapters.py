"""The generic seams a population of adapters needs (issue #30): rows carry the adapter they were sampled
under (``Rollouts.adapters``, kept through row selection and concatenation), the trainer scores each row
under its adapter (``score_by_adapter``: the same numbers as scoring each adapter's rows alone, gradients
into that adapter only), adapter factors read and written in place, and an optimiser state reset."""

import numpy as np
import pytest
import torch

from helpers import text_rollouts
from reasonrl.config.train import Lora
from reasonrl.models import build_tiny, score_completions
from reasonrl.models.lora import (
    add_adapters,
    adapter_factors,
    adapter_modules,
    adapter_parameters,
    apply_lora,
    reset_optimizer_state,
    score_by_adapter,
    set_adapter_factors,
    use_adapter,
)
from reasonrl.rollout import concat_rollouts, select_rows


@pytest.fixture(scope="module")
def two_adapters():
    model, _ = build_tiny("tiny", seed=0)
    model = add_adapters(apply_lora(model, Lora(r=2, alpha=4.0), seed=0), ["x"], lambda n: 5)
    with torch.no_grad():  # B = 0 at init: give x a non-zero delta so its outputs differ from default's
        for _, b in adapter_modules(model, "x").values():
            b.normal_(0, 0.5, generator=torch.Generator().manual_seed(1))
    return model


def _tokens():
    g = torch.Generator().manual_seed(0)
    return (
        torch.randint(3, 90, (3, 5), generator=g),
        torch.ones(3, 5, dtype=torch.long),
        torch.randint(3, 90, (3, 4), generator=g),
        torch.ones(3, 4, dtype=torch.long),
    )


def _score(model, toks, idx):
    t = toks if idx is None else tuple(x[idx] for x in toks)
    return score_completions(model, *t, chunk_rows=8)


def test_each_row_is_scored_under_its_own_adapter(two_adapters):
    model, toks = two_adapters, _tokens()
    mixed, _ = score_by_adapter(model, ["x", "default", "x"], lambda idx: _score(model, toks, idx))
    with torch.no_grad():
        with use_adapter(model, "x"):
            x_alone = _score(model, toks, torch.tensor([0, 2]))[0]
        d_alone = _score(model, toks, torch.tensor([1]))[0]  # default: the active one
    assert torch.allclose(mixed[[0, 2]], x_alone, atol=1e-6) and torch.allclose(mixed[[1]], d_alone, atol=1e-6)
    assert not torch.allclose(x_alone[0], _score(model, toks, torch.tensor([0]))[0][0].detach())  # they differ
    assert model.active_adapter == "default"  # switched back
    plain, _ = score_by_adapter(model, None, lambda idx: _score(model, toks, idx))  # no adapters named: one call
    assert plain.shape == (3, 4)


def test_gradients_reach_only_the_adapters_of_the_rows(two_adapters):
    model, toks = two_adapters, _tokens()
    model.zero_grad(set_to_none=True)
    lp, _ = score_by_adapter(model, ["x", "x", "x"], lambda idx: _score(model, toks, idx))
    lp.sum().backward()
    got = {
        name: any(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in adapter_parameters(model, name).values())
        for name in ("x", "default")
    }
    assert got == {"x": True, "default": False}
    assert all(p.requires_grad for p in adapter_parameters(model, "default").values())  # flags restored
    model.zero_grad(set_to_none=True)


def test_factors_read_and_write_in_place_and_keep_the_rank(two_adapters):
    model = two_adapters
    f = adapter_factors(model, "x")
    assert all(a.shape[0] == 2 and b.shape[1] == 2 and a.dtype == np.float64 for a, b in f.values())
    params = {id(p) for p in adapter_parameters(model, "default").values()}
    set_adapter_factors(model, "default", f)  # default becomes a copy of x, in the same parameters
    assert {id(p) for p in adapter_parameters(model, "default").values()} == params
    g = adapter_factors(model, "default")
    assert all(np.allclose(g[m][0], f[m][0]) and np.allclose(g[m][1], f[m][1]) for m in f)
    bad = {m: (a[:1], b[:, :1]) for m, (a, b) in f.items()}  # rank 1 into a rank-2 slot
    with pytest.raises(ValueError, match="rank must stay"):
        set_adapter_factors(model, "default", bad)
    with pytest.raises(ValueError, match="no LoRA modules"):
        adapter_factors(model, "nobody")


def test_reset_optimizer_state_forgets_only_the_given_parameters():
    p, q = torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.ones(2))
    opt = torch.optim.AdamW([p, q], lr=0.1)
    (p.sum() + q.sum()).backward()
    opt.step()
    assert reset_optimizer_state(opt, [p]) == 1 and p not in opt.state and q in opt.state
    assert reset_optimizer_state(opt, [p]) == 0  # nothing left to forget
    assert [len(v) for v in opt.state_dict()["state"].values()] == [3]  # step, exp_avg, exp_avg_sq of q only


def test_rows_keep_their_adapter_through_selection_and_concatenation():
    a = text_rollouts(["p"], ["x1", "x2"], 2)
    a.adapters = ["t0", "t1"]
    b = text_rollouts(["q"], ["y"], 1)  # no adapters: the active one (None)
    joined = concat_rollouts([a, b], 0)
    assert joined.adapters == ["t0", "t1", None]
    assert select_rows(joined, [2, 0]).adapters == [None, "t0"]
    assert concat_rollouts([b, b], 0).adapters is None
