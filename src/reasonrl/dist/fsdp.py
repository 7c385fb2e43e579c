"""FSDP2 (``dist.strategy=fsdp``): every rank holds 1/world of each parameter, of its gradient and of
AdamW's state (``torch.distributed.fsdp.fully_shard``: one group per decoder layer, the classes the
model lists in ``_no_split_modules``, and one for the rest), so training state that does not fit one
device is spread over the ranks.

Two phases per step, the way verl feeds its rollout engine from FSDP:

- **gathered** (everything but the update: generation, scoring, reference log-probs, evaluation):
  each group is all-gathered once and stays whole (``reshard_after_forward`` off), so a forward runs
  no collective and the ranks may run different numbers of them (each generates its own prompts);
- **sharded** (a step's optimiser steps, :meth:`Sharded.updating`): each forward all-gathers a layer
  and frees it after, each backward reduce-scatters its gradient, summed rather than averaged (the
  loss is normalised by the whole minibatch's counts, as in the replicated path). These collectives
  pair up across ranks only if every rank runs the same number of forward/backward passes, which
  the rank split does not give (zero-advantage rows are skipped, a rank may own fewer live groups):
  the ranks agree on the largest count and the others add zero-weight passes (one row of the
  minibatch with its loss times 0: a zero gradient). A part whose loss term runs the model on
  inputs of its own (a data-dependent number of forwards) declares the need ``policy_in_loss`` and
  is refused with this strategy before anything is loaded (``reasonrl.config.validate``).

Checkpoints and the final model are gathered whole to rank 0's CPU memory (``get_model_state_dict``
/ ``get_optimizer_state_dict`` with ``full_state_dict``) and written in the single process's format
(HF safetensors, AdamW's state keyed by parameter index), so a run resumes with any number of
processes and either strategy.
"""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import torch

from ..errors import UserError
from .group import Single
from .strategy import Replicated


def _fsdp():
    try:
        from torch.distributed.fsdp import FSDPModule, fully_shard
    except ImportError as err:  # the public FSDP2 API arrived in torch 2.6
        raise UserError(f"dist.strategy=fsdp needs torch >= 2.6 (torch.distributed.fsdp.fully_shard); this is "
                        f"torch {torch.__version__}: upgrade torch or use dist.strategy=ddp") from err
    return FSDPModule, fully_shard


def _options():
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    # full tensors, on rank 0's CPU only (the other ranks get empty dicts): what a checkpoint writes
    return StateDictOptions(full_state_dict=True, cpu_offload=True)


def layer_modules(model) -> list[torch.nn.Module]:
    """The model's repeated blocks, by HF's own list of modules not to split (``_no_split_modules``);
    none for a model without one (then the whole model is one group, still sharded)."""
    names = set(getattr(model, "_no_split_modules", None) or ())
    return [m for m in model.modules() if type(m).__name__ in names]


class Sharded(Replicated):
    def __init__(self, group: Single):
        super().__init__(group)
        self.modules: list[Any] = []  # the FSDP modules, layers first, the root last
        self.names: list[list[str]] = []  # every name of each trainable parameter (a tied one has two)

    def wrap(self, model):
        from torch.distributed.device_mesh import init_device_mesh

        FSDPModule, fully_shard = _fsdp()
        mesh = init_device_mesh(next(model.parameters()).device.type, (self.group.world,))
        for layer in layer_modules(model):
            fully_shard(layer, mesh=mesh, reshard_after_forward=True)
        fully_shard(model, mesh=mesh, reshard_after_forward=False)  # the root is needed again first in backward
        self.modules = [m for m in model.modules() if isinstance(m, FSDPModule)][::-1]
        for m in self.modules:
            m.set_gradient_divide_factor(1.0)  # a sum, not FSDP's default mean over ranks
            m.set_force_sum_reduction_for_comms(True)  # gloo has no PREMUL_SUM/AVG reduce-scatter
            m.set_reduce_scatter_unused_params(True, recurse=False)  # equal collectives if a rank leaves one unused
        super().wrap(model)  # sharded now: the optimiser's parameters are the DTensor shards
        every = {}
        for name, p in model.named_parameters(remove_duplicate=False):
            every.setdefault(id(p), []).append(name)
        self.names = [every[id(p)] for p in self.trainable]
        self._gather()
        return model

    def _gather(self) -> None:
        """Unshard every group and keep it whole: forwards then run no collective."""
        for m in self.modules:
            m.set_reshard_after_forward(False, recurse=False)
            m.unshard()

    def _shard(self) -> None:
        """Free the gathered copies; the layers re-gather in each forward and free after it."""
        for m in self.modules:
            m.reshard()
        for m in self.modules[:-1]:
            m.set_reshard_after_forward(True, recurse=False)

    @contextmanager
    def updating(self, model) -> Iterator[None]:
        self._shard()
        try:
            yield
        finally:
            self._gather()  # with the new weights: the optimiser stepped the shards

    def micro_batches(self, live: torch.Tensor, pad: torch.Tensor, size: int) -> list[tuple[torch.Tensor, float]]:
        """This rank's micro-batches, then zero-weight passes over ``pad`` up to the largest count of
        any rank, so every rank runs the same forward/backward collectives."""
        mine = super().micro_batches(live, pad, size)
        count = torch.tensor([len(mine)], dtype=torch.int64)
        torch.distributed.all_reduce(count, op=torch.distributed.ReduceOp.MAX)
        return mine + [(pad, 0.0)] * (int(count) - len(mine))

    def reduce(self, params: list[torch.Tensor], scalars: list[float]) -> list[float]:
        return self.group.sum_grads([], scalars)  # the backward passes already reduce-scattered the gradients

    def full_state(self, model, optimizer) -> tuple[dict[str, torch.Tensor] | None, dict[str, Any] | None]:
        """Every rank takes part; rank 0 gets (weights, optimiser state by parameter index), others None."""
        from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

        self._shard()  # the state-dict API reads the shards
        weights = get_model_state_dict(model, options=_options())
        optim = get_optimizer_state_dict(model, optimizer, options=_options())
        self._gather()
        return (self._unaliased(weights), indexed(optim, self.names)) if self.group.is_main else (None, None)

    def full_weights(self, model) -> dict[str, torch.Tensor] | None:
        from torch.distributed.checkpoint.state_dict import get_model_state_dict

        self._shard()
        weights = get_model_state_dict(model, options=_options())
        self._gather()
        return self._unaliased(weights) if self.group.is_main else None

    def _unaliased(self, weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The gathered state without the second names of tied parameters (``lm_head.weight`` tied to
        the embedding): gathered, the two are separate tensors, so ``save_pretrained`` cannot see the
        tie and would write both; one process's file has the first name only."""
        aliases = {alias for names in self.names for alias in names[1:]}
        return {k: v for k, v in weights.items() if k not in aliases}

    def load_checkpoint(self, path: Path, model, optimizer, scheduler, modules: dict[str, Any] | None = None) -> dict[str, Any]:
        """Every rank reads the checkpoint whole (the run folder is on a filesystem they share) and
        keeps its shards of the weights and of AdamW's state. ``modules``: none (parts that own modules
        are refused with fsdp before the run starts, run_checks.fsdp_problems)."""
        if modules:
            raise RuntimeError(f"dist.strategy=fsdp does not hold part modules ({', '.join(modules)})")
        from safetensors.torch import load_file
        from torch.distributed.checkpoint.state_dict import (StateDictOptions, set_model_state_dict,
                                                             set_optimizer_state_dict)

        from ..loop.checkpoint import check_weights

        if (Path(path) / "adapter_model.safetensors").exists():
            raise UserError(f"checkpoint {path} holds LoRA adapters, which dist.strategy=fsdp does not train: "
                            "resume it with dist.strategy=ddp")
        full = StateDictOptions(full_state_dict=True, strict=False)
        self._shard()
        result = set_model_state_dict(model, load_file(str(Path(path) / "model.safetensors")), options=full)
        check_weights(path, model, result.missing_keys, result.unexpected_keys)
        blob = torch.load(Path(path) / "trainer_state.pt", weights_only=False)
        set_optimizer_state_dict(model, optimizer, named(blob["optimizer"], self.names), options=full)
        scheduler.load_state_dict(blob["scheduler"])
        self._gather()
        return blob["state"]


def indexed(optim: dict[str, Any], names: list[list[str]]) -> dict[str, Any]:
    """An optimiser state keyed by parameter name (torch.distributed.checkpoint's) -> keyed by index,
    as ``optimizer.state_dict()`` writes it in one process. ``names[i]``: parameter i's names."""
    index = {n: i for i, aliases in enumerate(names) for n in aliases}
    state = {index[k]: v for k, v in optim["state"].items()}
    groups = [{**g, "params": [index[n] for n in g["params"]]} for g in optim["param_groups"]]
    return {"state": dict(sorted(state.items())), "param_groups": groups}


def named(optim: dict[str, Any], names: list[list[str]]) -> dict[str, Any]:
    """The inverse of :func:`indexed` (each parameter under its first name)."""
    state = {names[i][0]: v for i, v in optim["state"].items()}
    groups = [{**g, "params": [names[i][0] for i in g["params"]]} for g in optim["param_groups"]]
    return {"state": state, "param_groups": groups}
