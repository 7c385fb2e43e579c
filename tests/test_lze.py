"""LZE (spec distill-and-data.md section 10): every (d) example worked by hand, plus the state's
pruning, replay, selection, checkpoint round trip and bad input. No model involved."""

from dataclasses import dataclass

import pytest
import torch

from reasonrl.data.lze import (
    LZE,
    energy,
    ema_update,
    first_sight,
    replay_count,
    round_down,
    select_count,
    top_k_jitter,
    warmup_ratio,
    zero_advantage_groups,
)
from reasonrl.data.pool import epoch_of, pool_stream, take_pool
from reasonrl.data.selector import SelectContext, prompt_hash, savings
from reasonrl.errors import UserError

T = lambda *v: torch.tensor(v, dtype=torch.float64)  # noqa: E731


@dataclass(frozen=True)
class It:
    key: str
    prompt: str = ""


def _observe_first(p0):
    d, ema = first_sight(T(p0), 0.05)
    e = energy(d, T(p0), ema, 0.3)
    return d, e, ema_update(ema, T(p0), 0.9)


def test_spec_prompt_a_energies_and_ema():
    # first p = 0.5: d_init = 1 - 0.5 = 0.5, m = 0, E = 0.5 * 4 * 0.5 * 0.5 * 1 = 0.5;
    # ema 0.5 -> 0.9*0.5 + 0.1*0.5 = 0.5
    d, e, ema = _observe_first(0.5)
    assert d.item() == pytest.approx(0.5) and e.item() == pytest.approx(0.5) and ema.item() == pytest.approx(0.5)
    # then p = 0.75: m = min(2 * 0.25, 1) = 0.5, E = 0.5 * (4 * 0.75 * 0.25 = 0.75) * 1.15 = 0.43125
    assert energy(d, T(0.75), ema, 0.3).item() == pytest.approx(0.43125)
    assert ema_update(ema, T(0.75), 0.9).item() == pytest.approx(0.525)  # 0.45 + 0.075


def test_spec_prompt_b_and_c():
    # B: p = 0 -> d_init = 1, E = 0, ema = 0; later p = 0.5: m = min(2 * 0.5, 1) = 1, E = 1 * 1 * 1.3 = 1.3
    d, e, ema = _observe_first(0.0)
    assert (d.item(), e.item(), ema.item()) == (1.0, 0.0, 0.0)
    assert energy(d, T(0.5), ema, 0.3).item() == pytest.approx(1.3)
    # C: p = 1 -> d_init = max(1 - 1, 0.05) = 0.05
    assert _observe_first(1.0)[0].item() == pytest.approx(0.05)


def test_spec_selection_count_and_only_active_groups():
    # n = 10, ratio 0.4, min 0.3: max(floor(4), floor(3)) = 4
    assert select_count(10, 0.4, 0.3) == 4
    assert select_count(10, 0.2, 0.3) == 3  # the floor wins: max(2, 3)
    assert select_count(3, 0.1, 0.1) == 1  # floor(0.3) = 0 -> at least 1
    assert select_count(100, 0.29, 0.1) == 29  # 100 * 0.29 = 28.999... in binary: not 28
    e = T(0, 0.2, 0, 0.9, 0, 0, 0.4, 0, 0, 0)  # only 3 active: exactly those, whatever the jitter
    keep = top_k_jitter(e, 4, 0.05, torch.Generator().manual_seed(0))
    assert keep.nonzero().squeeze(-1).tolist() == [1, 3, 6]


def test_top_k_without_jitter_is_the_top_k_and_k_ge_n_keeps_all():
    e = T(0.1, 0.5, 0.3, 0.9, 0.7)
    gen = torch.Generator().manual_seed(0)
    assert top_k_jitter(e, 2, 0.0, gen).nonzero().squeeze(-1).tolist() == [3, 4]  # 0.9 and 0.7
    assert top_k_jitter(T(0, 0, 0), 3, 0.05, gen).all()  # k >= n: every group, active or not
    assert not top_k_jitter(T(0, 0, 0), 2, 0.05, gen).any()  # nothing active: nothing


def test_jitter_reorders_close_energies_but_keeps_k():
    # energies 1e-3 apart with sigma = 0.05 * max(range, 0.01) = 5e-4 per Gumbel: both orders occur
    e = T(0.500, 0.501)
    gen = torch.Generator().manual_seed(0)
    picks = {tuple(top_k_jitter(e, 1, 0.05, gen).tolist()) for _ in range(50)}
    assert picks == {(True, False), (False, True)}


def test_warmup_ratio_is_linear_from_one_to_the_target():
    # target 0.7 over 3 epochs: epoch 1 -> 1 - 0.3/3 = 0.9, epoch 2 -> 0.8, epoch 3 and later -> 0.7
    assert [round(warmup_ratio(0.7, e, 3), 10) for e in (1, 2, 3, 5)] == [0.9, 0.8, 0.7, 0.7]
    assert warmup_ratio(0.4, 1, 0) == 0.4  # the scripts' 0: the target at once


def test_round_down_subsamples_to_a_multiple():
    keep = torch.tensor([True, True, False, True, True, True])  # 5 kept, multiple 2 -> 4 of those 5
    out = round_down(keep, 2, torch.Generator().manual_seed(0))
    assert int(out.sum()) == 4 and not (out & ~keep).any()
    assert round_down(keep, 1, torch.Generator()).equal(keep)


def test_zero_advantage_groups_and_replay_count():
    adv = torch.tensor([[0.0, 0.0], [0.5, -0.5], [0.0, 1e-3]])
    assert zero_advantage_groups(adv).tolist() == [True, False, False]
    assert zero_advantage_groups(adv[:, :, None].expand(3, 2, 4)).tolist() == [True, False, False]
    # max(1, floor(0.1 * n)): 0 pruned -> 0, 5 -> 1, 10 -> 1, 25 -> 2
    assert [replay_count(n, 0.1) for n in (0, 5, 10, 25)] == [0, 1, 1, 2]


def _ctx(items, correct, scores, adv=None):
    B, G = correct.shape
    adv = correct - correct.mean(-1, keepdim=True) if adv is None else adv
    return SelectContext(
        items=items,
        correct=correct,
        advantages=adv,
        scores=scores,
        kinds=torch.zeros(B, dtype=torch.long),
        tokens=torch.full((B,), 10.0),
        n_params=100,
        minibatches=1,
    )


def _see(st, items, ps, epoch, G=8):
    """Admit then observe ``items`` with pass rates ``ps`` (k of G correct)."""
    admitted = [it for it in items if st.admit(it, epoch)]
    correct = torch.tensor([[1.0] * round(p * G) + [0.0] * (G - round(p * G)) for p in ps])
    return admitted, st.observe(items, correct), correct


def test_spec_prune_after_two_solved_epochs_then_replay_and_reactivate():
    st = LZE().build(seed=0)
    x = It("x", "1+1=")
    for epoch in (0, 1):  # p = 1 in epochs 0 and 1: streak 2 -> pruned after epoch 1
        assert _see(st, [x], [1.0], epoch)[0] == [x]
    assert st.prompts["x"][3] is True
    # epoch 2: one pruned prompt -> replay max(1, floor(0.1)) = 1: it is rolled out; p = 7/8 < 1 reactivates it
    admitted, _, _ = _see(st, [x], [0.875], 2)
    assert admitted == [x] and st.prompts["x"][3] is False and st.prompts["x"][2] == 0
    assert st.pending["reactivated"] == 1


def test_a_replayed_prompt_solved_again_stays_pruned_and_the_others_are_skipped():
    st = LZE().build(seed=0)
    a, b = It("a", "a"), It("b", "b")
    for epoch in (0, 1):
        _see(st, [a, b], [1.0, 1.0], epoch)
    admitted, _, _ = _see(st, [a, b], [1.0, 1.0], 2)  # 2 pruned -> 1 replayed, 1 skipped
    assert len(admitted) == 1 and st.pending["skipped"] == 1
    assert st.prompts["a"][3] and st.prompts["b"][3]  # the replayed one had p = 1: still pruned


def test_epoch_zero_records_only_then_top_k_from_epoch_one():
    st = LZE(selection_ratio=0.4, warmup_transition_epochs=0).build(seed=0)
    items = [It(f"k{i}", f"p{i}") for i in range(10)]
    ps = [0.5, 0.25, 0.75, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0]  # 3 groups with 0 < p < 1
    _, e, correct = _see(st, items, ps, 0)
    keep, m = st.select(_ctx(items, correct, e))
    assert keep.tolist() == [0 < p < 1 for p in ps]  # epoch 0: all but the zero-advantage groups
    assert m["select/dropped_zero_adv"] == 7 and m["select/kept_frac"] == pytest.approx(0.3)
    _, e, correct = _see(st, items, ps, 1)
    keep, m = st.select(_ctx(items, correct, e))
    assert m["select/k"] == 4 and m["select/active"] == 3 and keep.tolist() == [0 < p < 1 for p in ps]
    # savings: 7 dropped groups x 10 tokens = 70 tokens, x 6 x 100 params = 42000 FLOPs
    assert m["select/update_tokens_saved"] == 70 and m["select/update_flops_saved"] == 42000


def test_top_k_drops_active_groups_beyond_k():
    st = LZE(selection_ratio=0.2, min_selection_ratio=0.2, jitter=0.0, warmup_transition_epochs=0).build(seed=0)
    items = [It(f"k{i}") for i in range(5)]
    ps = [0.5, 0.25, 0.75, 0.125, 0.375]
    _see(st, items, ps, 0)
    # same p again: m = 0, E = (1 - p) * 4p(1 - p): p = .5 -> .5 * 1 = .5; .25 -> .75 * .75 = .5625;
    # .75 -> .25 * .75 = .1875; .125 -> .875 * .4375 = .3828; .375 -> .625 * .9375 = .5859 (the largest)
    _, e, correct = _see(st, items, ps, 1)
    assert e.tolist() == pytest.approx([0.5, 0.5625, 0.1875, 0.3828125, 0.5859375])
    keep, _ = st.select(_ctx(items, correct, e))  # k = max(1, floor(5 * 0.2)) = 1: the highest energy alone
    assert keep.tolist() == [False, False, False, False, True]


def test_state_round_trip_is_exact_and_refuses_other_datasets():
    st = LZE(prune_streak=1).build(seed=3)
    items = [It(f"k{i}", f"p{i}") for i in range(6)]
    _see(st, items, [1.0, 0.5, 0.25, 1.0, 0.75, 0.5], 0)
    saved = st.state_dict()
    twin = LZE(prune_streak=1).build(seed=99)
    twin.load_state_dict(saved, {it.key: prompt_hash(it.prompt) for it in items})
    for s in (st, twin):  # the same admissions (replay RNG) and the same jitter draws (torch RNG) follow
        adm, e, c = _see(s, items, [0.5, 0.5, 0.25, 1.0, 0.75, 0.5], 1)
        s.out = (adm, s.select(_ctx(items, c, e))[0].tolist())
    assert st.out == twin.out
    with pytest.raises(UserError, match=r"2 prompt key\(s\) this run's pool does not.*another dataset"):
        LZE().build(0).load_state_dict(saved, {it.key: prompt_hash(it.prompt) for it in items[:4]})
    with pytest.raises(UserError, match=r"other prompt texts under 1 key"):
        LZE().build(0).load_state_dict(saved, {**{it.key: prompt_hash(it.prompt) for it in items}, "k0": "x"})


def test_a_key_seen_with_another_prompt_is_reported_by_name():
    st = LZE().build(0)
    _see(st, [It("7+5", "7+5=")], [0.5], 0)
    with pytest.raises(UserError, match=r"key '7\+5' names two different prompts"):
        st.admit(It("7+5", "7 + 5 ="), 0)


def test_pool_takes_distinct_items_and_cycles_seeded_epochs():
    stream = iter([It("a", "A"), It("b", "B"), It("a", "A"), It("c", "C"), It("d", "D")])
    pool = take_pool(stream, 3, "task 't'")
    assert [it.key for it in pool] == ["a", "b", "c"]  # the repeated 'a' is skipped
    s = pool_stream(pool, seed=0)
    first, second = [next(s).key for _ in range(3)], [next(s).key for _ in range(3)]
    assert sorted(first) == sorted(second) == ["a", "b", "c"]
    assert [next(pool_stream(pool, seed=0)).key for _ in range(2)] == [first[0]] * 2  # seeded
    assert [epoch_of(i, 3) for i in (0, 2, 3, 7)] == [0, 0, 1, 2] and epoch_of(9, 0) == 0
    with pytest.raises(UserError, match=r"key 'a' names two prompts, 'A' and 'A2'"):
        take_pool(iter([It("a", "A"), It("a", "A2")]), 2, "task 't'")
    with pytest.raises(UserError, match=r"data.pool=5: task 't' has only 2 distinct"):
        take_pool(iter([It("a", "A"), It("b", "B")]), 5, "task 't'")


def test_savings_counts_the_dropped_groups():
    ctx = _ctx([It("a"), It("b")], torch.tensor([[1.0, 0.0], [1.0, 1.0]]), T(0.5, 0.0))
    ctx.tokens = torch.tensor([30.0, 12.0])
    # group b dropped: 12 tokens saved, 6 * 100 * 12 = 7200 FLOPs
    assert savings(ctx, torch.tensor([True, False])) == {
        "select/update_tokens": 30.0,
        "select/update_tokens_saved": 12.0,
        "select/update_flops_saved": 7200.0,
    }
