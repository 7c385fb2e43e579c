"""How the trainer's model is held across ranks (``dist.strategy``), behind one small interface.

:class:`Replicated` (``ddp``, and any run in one process): every rank holds the whole model and
optimiser; the gradients of each rank's micro-batches are summed by one bucketed all-reduce per
optimiser step (:meth:`reasonrl.dist.group.TorchGroup.sum_grads`). :class:`reasonrl.dist.fsdp.Sharded`
(``fsdp`` with more than one process) shards them with FSDP2. The trainer calls the same methods
either way and never asks which strategy it has:

- ``wrap(model)`` once, before the optimiser is built; ``trainable`` the parameters it optimises;
- ``updating(model)`` around a step's optimiser steps (FSDP: sharded inside, gathered outside);
- ``micro_batches(live, pad, size)`` the (rows, weight) passes of one optimiser step on this rank;
- ``reduce(params, scalars)`` after them: gradients and scalars summed over ranks;
- ``full_state`` / ``load_checkpoint`` for checkpoints, ``full_weights`` for the final model.
"""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import torch

from ..loop.checkpoint import load_checkpoint
from .group import Single

STRATEGIES = ("ddp", "fsdp")


class Replicated:
    """Every rank holds the whole model (DDP's layout; one process is the case of one rank)."""

    def __init__(self, group: Single):
        self.group = group
        self.trainable: list[torch.nn.Parameter] = []

    def wrap(self, model):
        # the trainable parameters alone: frozen base weights get no gradient, AdamW state or decay
        self.trainable = [p for p in model.parameters() if p.requires_grad]
        return model

    @contextmanager
    def updating(self, model) -> Iterator[None]:
        yield

    def micro_batches(self, live: torch.Tensor, pad: torch.Tensor, size: int) -> list[tuple[torch.Tensor, float]]:
        """This rank's rows ``live`` in micro-batches of ``size``, each of weight 1 (``pad``, the rows
        of a zero-weight pass, is for strategies whose ranks must run equal counts)."""
        return [(m, 1.0) for m in live.split(size)] if len(live) else []  # split() of nothing gives one empty part

    def reduce(self, params: list[torch.Tensor], scalars: list[float]) -> list[float]:
        return self.group.sum_grads(params, scalars)

    def full_state(self, model, optimizer) -> tuple[dict[str, torch.Tensor] | None, dict[str, Any] | None]:
        """(model weights, optimiser state) to write, None for what the model and optimiser save themselves."""
        return None, None

    def full_weights(self, model) -> dict[str, torch.Tensor] | None:
        return None

    def load_checkpoint(self, path: Path, model, optimizer, scheduler, modules: dict[str, Any] | None = None) -> dict[str, Any]:
        return load_checkpoint(path, model, optimizer, scheduler, modules=modules)
