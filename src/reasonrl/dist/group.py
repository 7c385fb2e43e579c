"""The trainer's whole view of torch.distributed: who am I, share these groups, sum these gradients.

A :class:`Single` group is one process and does nothing; a :class:`TorchGroup` wraps the default
process group that ``torchrun`` (or ``reasonrl train --nproc N``) sets up. Every rank holds the
whole batch (rollouts are gathered after generation) and the same model, optimiser and RNG state;
the work that is split is generation (prompts dealt to ranks) and the update (each rank runs the
forward/backward of the groups it owns, ``group index % world``), after which one all-reduce per
optimiser step sums the gradients. Loss normalisers are computed from the whole batch, which
every rank holds, so the summed gradient is the single-process gradient.

Why not ``DistributedDataParallel``: ranks run different numbers of micro-batches (rows with zero
advantage are skipped, filters drop groups), and DDP needs the same number of backward calls on
every rank. One bucketed all-reduce after the local accumulation is what DDP computes with
``no_sync`` on every micro-batch but the last, without that constraint.
"""
from __future__ import annotations

import datetime
import os
import time
from typing import Any, Callable, Sequence

import torch

BUCKET_BYTES = 25 * 2 ** 20  # gradients are summed in buckets of about this size (DDP's default)


class Single:
    """One process: every collective is the identity."""

    world, rank, is_main = 1, 0, True
    seconds = 0.0  # time spent in collectives (the trainer logs it per step as time/comm)

    def owns(self, groups: torch.Tensor) -> torch.Tensor:  # (g,) group indices -> (g,) bool
        return torch.ones_like(groups, dtype=torch.bool)

    def gather(self, obj: Any) -> list[Any]:
        return [obj]

    def broadcast(self, obj: Any) -> Any:
        return obj

    def sum_grads(self, params: Sequence[torch.Tensor], scalars: Sequence[float]) -> list[float]:
        return list(scalars)

    def barrier(self) -> None:
        pass

    def close(self) -> None:
        pass


class TorchGroup(Single):
    """The default torch.distributed process group (gloo on the CPU, NCCL on GPUs)."""

    def __init__(self, device: torch.device):
        import torch.distributed as dist

        self.dist, self.device = dist, device
        self.world, self.rank = dist.get_world_size(), dist.get_rank()
        self.is_main = self.rank == 0

    def owns(self, groups: torch.Tensor) -> torch.Tensor:
        return groups % self.world == self.rank

    def gather(self, obj: Any) -> list[Any]:
        t0, out = time.perf_counter(), [None] * self.world
        self.dist.all_gather_object(out, obj)
        self.seconds += time.perf_counter() - t0
        return out

    def broadcast(self, obj: Any) -> Any:
        box = [obj if self.is_main else None]
        self.dist.broadcast_object_list(box, src=0)
        return box[0]

    def sum_grads(self, params: Sequence[torch.Tensor], scalars: Sequence[float]) -> list[float]:
        """Sum every parameter's gradient and ``scalars`` over ranks, in place. A parameter no rank
        gave a gradient keeps ``grad=None`` (AdamW then skips it, as in one process)."""
        t0, dev = time.perf_counter(), params[0].device if params else self.device
        flags = torch.tensor([float(p.grad is not None) for p in params] + list(scalars), dtype=torch.float64, device=dev)
        self.dist.all_reduce(flags)
        has = flags[:len(params)] > 0
        for p, h in zip(params, has.tolist()):
            if h and p.grad is None:
                p.grad = torch.zeros_like(p)
            elif not h:
                p.grad = None
        for bucket in _buckets([p.grad for p in params if p.grad is not None]):
            flat = torch.cat([g.reshape(-1) for g in bucket])
            self.dist.all_reduce(flat)
            offset = 0
            for g in bucket:
                g.copy_(flat[offset:offset + g.numel()].view_as(g))
                offset += g.numel()
        self.seconds += time.perf_counter() - t0
        return flags[len(params):].tolist()

    def barrier(self) -> None:
        self.dist.barrier()

    def close(self) -> None:
        self.dist.destroy_process_group()


def _buckets(grads: list[torch.Tensor]) -> list[list[torch.Tensor]]:
    """Consecutive gradients of one dtype and device, about BUCKET_BYTES each."""
    out: list[list[torch.Tensor]] = []
    size = 0
    for g in grads:
        same = out and out[-1][0].dtype == g.dtype and out[-1][0].device == g.device
        if not same or size + g.numel() * g.element_size() > BUCKET_BYTES:
            out.append([])
            size = 0
        out[-1].append(g)
        size += g.numel() * g.element_size()
    return out


def launched_by_torchrun() -> bool:
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def init_group(device: str, backend: str = "auto", timeout_s: float = 1800) -> tuple[Single, str]:
    """(the process group, this rank's device). Under torchrun (``WORLD_SIZE`` > 1) joins the default
    group: ``auto`` is NCCL when ``device`` is CUDA (each rank on ``cuda:LOCAL_RANK``) and gloo
    otherwise; a single process gets :class:`Single` and ``device`` unchanged."""
    if not launched_by_torchrun():
        return Single(), device
    import torch.distributed as dist

    local = int(os.environ.get("LOCAL_RANK", "0"))
    if device.startswith("cuda"):
        device = f"cuda:{local}"
        torch.cuda.set_device(device)
    chosen = backend if backend != "auto" else ("nccl" if device.startswith("cuda") else "gloo")
    if not dist.is_initialized():
        dist.init_process_group(chosen, timeout=datetime.timedelta(seconds=timeout_s))
    return TorchGroup(torch.device(device)), device


def on_main(group: Single, fn: Callable[[], Any]) -> Any:
    """Run ``fn`` on rank 0 alone and give every rank its result; an exception there is raised on
    every rank (so a user error stops all of them instead of leaving the others waiting)."""
    result, error = None, None
    if group.is_main:
        try:
            result = fn()
        except Exception as err:  # noqa: BLE001 - re-raised below on every rank
            error = err
    result, error = group.broadcast((result, error))
    if error is not None:
        raise error
    return result
