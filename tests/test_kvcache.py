"""The decode loop's growing KV cache (rollout.kvcache.GrowingLayer): each step writes its position
into a buffer instead of concatenating onto the whole cache; what attention reads must be exactly
what transformers' concatenating layer holds, through growth, row dropping and repetition."""

import torch
from transformers.cache_utils import DynamicLayer

from reasonrl.rollout.kvcache import DecodeCache, GrowingLayer


def states(rows, length, seed):  # (rows, H=2, length, d=3)
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, 2, length, 3, generator=g), torch.randn(rows, 2, length, 3, generator=g)


def test_a_growing_layer_holds_what_a_concatenating_layer_holds():
    plain, k0, v0 = DynamicLayer(), *states(4, 5, 0)
    plain.update(k0, v0)
    grow = GrowingLayer(k0, v0, capacity=7)  # room for 2 more positions, then it doubles
    for step in range(4):
        k, v = states(4, 1, step + 1)
        got, want = grow.update(k, v), plain.update(k, v)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert grow.get_seq_length() == 9 == plain.get_seq_length() and grow._k.shape[-2] == 14  # 7 -> 14 at position 8
    # rows 3 and 1 kept (in that order), then each repeated twice: the same rows as the plain layer's
    for layer in (grow, plain):
        layer.batch_select_indices(torch.tensor([3, 1]))
        layer.batch_repeat_interleave(2)
    assert torch.equal(grow.keys, plain.keys) and torch.equal(grow.values, plain.values)
    assert torch.equal(grow.keys[:, :, :5], k0[[3, 3, 1, 1]])  # the prefill's positions, rows 3, 3, 1, 1
    k, v = states(4, 1, 9)
    assert torch.equal(grow.update(k, v)[0], plain.update(k, v)[0])  # writing goes on after the copy
    grow.crop(-2)
    plain.crop(-2)
    assert torch.equal(grow.keys, plain.keys) and grow.get_seq_length() == 8


def test_reserve_turns_a_prefilled_cache_into_growing_layers():
    cache = DecodeCache()
    k, v = states(2, 4, 0)
    cache.update(k, v, 0)
    cache.update(k + 1, v + 1, 1)
    cache.reserve(10)
    assert all(isinstance(layer, GrowingLayer) for layer in cache.layers) and cache.get_seq_length() == 4
    assert torch.equal(cache.layers[1].keys, k + 1) and cache.layers[0]._k.shape == (2, 2, 10, 3)
