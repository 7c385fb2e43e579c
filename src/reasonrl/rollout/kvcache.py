"""The decode loop's KV caches: keys kept in the compute dtype, and static caches reused across calls.

Under mixed precision (float32 weights, the decoder under bf16 autocast) the value projection's
output is bf16 but the rotary step multiplies bf16 keys by float32 cos/sin tables and promotes them
back to float32: a plain cache holds keys in float32 and values in bf16, 1.5x the memory of a bf16
cache, and attention (autocast's SDPA or matmul) casts the whole float32 key cache back to bf16 at
every step. The caches here store keys in the values' dtype, which is the compute dtype in every
precision (float32, pure bf16, bf16 autocast); since attention rounds the keys to that dtype anyway,
the stored keys are the ones attention used before, bit for bit.

A static cache is kept per (rows, width, dtype, device) and reset in place between calls, as
transformers' ``generate`` keeps its own: its tensors are marked static (fixed addresses), so a
compiled step's CUDA graphs are recorded once per shape, not again for every chunk, step and
evaluation. Row counts are rounded up to buckets (:func:`bucket_rows`) and widths to a multiple of
:data:`WIDTH_MULTIPLE` positions, so a run records a handful of shapes.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache, StaticCache
from transformers.cache_utils import DynamicLayer

WIDTH_MULTIPLE = 64  # static-cache positions are rounded up to this (models.memory.STATIC_WIDTH_MULTIPLE agrees)
ROW_STEP = 64  # row buckets: powers of two up to this, multiples of it above


class _KeysAsValues:
    """Cache mixin: keys are stored (and returned) in the dtype of the values they come with."""

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        return super().update(key_states.to(value_states.dtype), value_states, layer_idx, *args, **kwargs)


class DecodeCache(_KeysAsValues, DynamicCache):
    """transformers' DynamicCache with keys in the compute dtype (see the module docstring).
    :meth:`reserve` turns its layers into :class:`GrowingLayer` s after the prefill."""

    def reserve(self, capacity: int) -> None:
        """Give every layer room for ``capacity`` positions (prefill included), so that decoding
        writes each new position in place (:class:`GrowingLayer`)."""
        self.layers = [
            GrowingLayer(layer.keys, layer.values, capacity) if layer.is_initialized else layer for layer in self.layers
        ]


class GrowingLayer(DynamicLayer):
    """A dynamic cache layer whose keys and values live in buffers with room for ``capacity`` positions.

    transformers' DynamicLayer concatenates each new position onto the whole cache, copying every
    layer's keys and values at every step (quadratic in the length; 15% of a decode step's time for a
    135M model on a CPU, docs/results.md). Here a step writes its position into the buffer and the
    layer's ``keys`` / ``values`` are views of the positions written so far: the same values, so
    attention computes the same numbers. Dropping rows copies the written positions of the kept rows
    once. Writing past ``capacity`` doubles it (a copy, as a concatenation would)."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, capacity: int):  # (B, H, L, d) each
        super().__init__()
        self.is_initialized, self.device, self.length = True, keys.device, keys.shape[-2]
        self._k, self._v = (self._room(x, x.shape[0], max(capacity, self.length)) for x in (keys, values))
        self._views()

    def _room(self, x: torch.Tensor, rows: int, capacity: int, index: torch.Tensor | None = None) -> torch.Tensor:
        """A (rows, H, capacity, d) buffer holding ``x``'s written positions (its rows ``index``)."""
        buf = x.new_empty(rows, x.shape[1], capacity, x.shape[-1])
        buf[:, :, : self.length] = (x if index is None else x[index])[:, :, : self.length]
        return buf

    def _views(self) -> None:
        self.keys, self.values = self._k[:, :, : self.length], self._v[:, :, : self.length]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        n = key_states.shape[-2]
        if self.length + n > self._k.shape[-2]:
            cap = max(2 * self._k.shape[-2], self.length + n)
            self._k, self._v = (self._room(x, x.shape[0], cap) for x in (self._k, self._v))
        self._k[:, :, self.length : self.length + n] = key_states
        self._v[:, :, self.length : self.length + n] = value_states
        self.length += n
        self._views()
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.length

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self._k, self._v = (self._room(x, len(indices), x.shape[-2], indices) for x in (self._k, self._v))
        self._views()

    def batch_repeat_interleave(self, repeats: int) -> None:
        index = torch.arange(self._k.shape[0], device=self._k.device).repeat_interleave(repeats)
        self.batch_select_indices(index)

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove > 0:
            raise ValueError(f"GrowingLayer.crop({tokens_to_remove}): give a negative count of positions to remove")
        self.length += tokens_to_remove
        self._views()

    def reset(self) -> None:
        self.length = 0
        self._views()


class StaticDecodeCache(_KeysAsValues, StaticCache):
    """transformers' StaticCache with keys in the compute dtype (see the module docstring)."""


def bucket_rows(rows: int, cap: int) -> int:
    """The static cache's row count for a chunk of ``rows``: the next power of two up to
    :data:`ROW_STEP`, the next multiple of it above, never above ``cap`` (the engine's ``max_rows``,
    which the memory estimate budgets) unless ``rows`` itself is."""
    bucket = 1 << max(0, rows - 1).bit_length() if rows <= ROW_STEP else -(-rows // ROW_STEP) * ROW_STEP
    return max(rows, min(bucket, cap))


def static_width(positions: int) -> int:
    """Positions of a static cache holding ``positions`` (prompt + new tokens), rounded up to a multiple of
    :data:`WIDTH_MULTIPLE` so that batches whose prompts differ a little in length share one compiled graph."""
    return -(-positions // WIDTH_MULTIPLE) * WIDTH_MULTIPLE


def _pad_rows(x: torch.Tensor, rows: int) -> torch.Tensor:  # (R, H, P, d) -> (rows, H, P, d)
    """Filler rows repeat row 0 (finite keys and values: a filler row's attention stays finite)."""
    return x if len(x) == rows else torch.cat([x, x[:1].expand(rows - len(x), *x.shape[1:])])


class StaticCaches:
    """An engine's static caches, one per (rows, width, dtype, device), kept between calls."""

    def __init__(self):
        self.by_shape: dict[tuple, StaticDecodeCache] = {}

    def filled(self, config, dense: DynamicCache, rows: int, width: int) -> StaticDecodeCache:
        """The cache of this shape, reset in place and holding ``dense``'s prefill (R <= rows rows of
        P positions; rows past R repeat row 0, whose outputs the caller discards)."""
        first = dense.layers[0].values  # (R, H, P, d)
        key = (rows, width, first.dtype, first.device)
        if key not in self.by_shape:  # allocated (and marked static) on the first update below
            self.by_shape[key] = StaticDecodeCache(config=config, max_cache_len=width)
        cache = self.by_shape[key]
        cache.reset()  # zeroed in place: the tensors keep their addresses (and CUDA graphs their recordings)
        for layer, src in zip(cache.layers, dense.layers):
            layer.update(_pad_rows(src.keys, rows), _pad_rows(src.values, rows))
        return cache

    def nbytes(self) -> int:
        """Bytes held by every cache's keys and values."""
        return sum(
            x.nbytes
            for c in self.by_shape.values()
            for layer in c.layers
            if layer.is_initialized
            for x in (layer.keys, layer.values)
        )

    def clear(self) -> None:
        self.by_shape.clear()
