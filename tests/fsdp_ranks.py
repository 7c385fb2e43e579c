"""The rank side of test_fsdp's two-process check, in a module of its own: each spawned rank imports
it, and it imports torch and reasonrl.dist alone (a test module's imports cost seconds per rank)."""

from __future__ import annotations

import torch
import torch.distributed as dist

from reasonrl.dist.fsdp import Sharded
from reasonrl.dist.group import TorchGroup

X = torch.tensor([[1.0, 0.0], [0.0, 1.0], [2.0, 2.0], [3.0, 1.0]])  # four rows; loss = sum of W x over rows


def sharded_step_worker(rank: int, path: str, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{path}", rank=rank, world_size=2)
    model = torch.nn.Linear(2, 2, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
    strategy = Sharded(TorchGroup(torch.device("cpu")))
    strategy.wrap(model)
    opt = torch.optim.AdamW(strategy.trainable, lr=0.1, weight_decay=0.0)
    live = torch.tensor([0, 1, 2]) if rank == 0 else torch.tensor([3])  # 3 micro-batches of one row vs 1
    passes = []
    with strategy.updating(model):
        for rows, weight in strategy.micro_batches(live, torch.tensor([0]), 1):
            passes.append(weight)
            loss = model(X[rows]).sum()
            (loss if weight else loss * 0.0).backward()
        total = strategy.reduce(strategy.trainable, [float(len(live))])
        grad = strategy.trainable[0].grad.full_tensor()
        opt.step()
    weights, optim = strategy.full_state(model, opt)
    torch.save({"passes": passes, "total": total, "grad": grad, "weights": weights, "optim": optim}, f"{out}.{rank}")
    dist.destroy_process_group()
