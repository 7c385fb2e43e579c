"""FSDP2 (``dist.strategy=fsdp``) against one process and against 2-process ddp, in one run of this script.

(a) equality: the default run (grpo on arithmetic, the shipped base model) for ``--steps`` steps in
1 process, 2 gloo processes with the default strategy (ddp) and 2 with ``dist.strategy=fsdp``, all
with ``micro_batch_size=4`` (every run splits its rows into the same micro-batches); the largest
absolute difference of the logged metrics and of ``final/model.safetensors`` from the 1-process run.
Also each run's wall time and the peak RSS of its largest process (``os.wait4``: the launcher and
the ranks it waited for).
(b) memory per rank, measured, not estimated: 2 gloo ranks (``torch.multiprocessing.spawn``) load
the same model, wrap it with each strategy (``Replicated`` / ``Sharded``), run one forward, backward
and AdamW step on a fixed batch, and sum the bytes of the storages each rank holds: trainable
parameters, gradients and AdamW state during the update (DTensors by ``to_local()``), and the
parameters held outside it (FSDP: the gathered copies for rollout, beside the shards).
Prints tables and writes ``--json``.

    OMP_NUM_THREADS=1 python benchmarks/speed/fsdp_bench.py --steps 6
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

CHECKED = ("reward/mean", "accuracy", "loss/total", "grad_norm", "entropy/mean")
RUNS = (("1 process", 1, []), ("2 ranks ddp", 2, []), ("2 ranks fsdp", 2, ["dist.strategy=fsdp"]))
COMMON = ["final_eval_problems=0", "eval_every=0", "micro_batch_size=4"]


def train(name: str, nproc: int, extra: list[str], steps: int, out: Path) -> dict:
    cmd = [
        sys.executable,
        "-m",
        "reasonrl",
        "train",
        f"--steps={steps}",
        f"--out={out}",
        f"--nproc={nproc}",
        *COMMON,
        *extra,
    ]
    log = out.with_suffix(".log")
    t0 = time.perf_counter()
    with log.open("w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env={**os.environ, "OMP_NUM_THREADS": "1"})
        _, status, usage = os.wait4(proc.pid, 0)  # this run's tree alone (RUSAGE_CHILDREN would mix the runs)
        proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    if proc.returncode:
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{log.read_text()[-3000:]}")
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return {
        "name": name,
        "nproc": nproc,
        "settings": [*COMMON, *extra],
        "wall_s": wall,
        "peak_rss_mib": usage.ru_maxrss / 1024,  # KiB on Linux
        "update_s": statistics.mean(r["time/update"] for r in rows),
        "comm_s": statistics.mean(r.get("time/comm", 0.0) for r in rows),
        "metrics": rows,
    }


def differences(one: dict, other: dict, out: Path) -> dict:
    from safetensors.torch import load_file

    per_key = {k: max(abs(a[k] - b[k]) for a, b in zip(one["metrics"], other["metrics"])) for k in CHECKED}
    w1, w2 = (load_file(str(out / r["name"].replace(" ", "_") / "final" / "model.safetensors")) for r in (one, other))
    assert set(w1) <= set(w2), sorted(set(w1) - set(w2))
    return {
        "max_metric_diff": max(per_key.values()),
        "metric_diff": per_key,
        "max_weight_diff": max(float((w1[k].float() - w2[k].float()).abs().max()) for k in w1),
        "extra_weight_keys": sorted(set(w2) - set(w1)),
    }  # fsdp's gathered state keeps a tied alias


def storage_bytes(tensors) -> tuple[int, int]:
    """(bytes of the distinct storages behind ``tensors``, elements of the tensors); a DTensor counts its
    shard. By storage: FSDP's shards and gradients are views of one flat buffer (its padding included)."""
    from torch.distributed.tensor import DTensor

    local = [t.to_local() if isinstance(t, DTensor) else t for t in tensors if t is not None]
    seen = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in local}
    return sum(seen.values()), sum(t.numel() for t in local)


def held(model, strategy, opt) -> dict:
    params, grads = strategy.trainable, [p.grad for p in strategy.trainable]
    state = [v for p in params for v in opt.state[p].values() if torch.is_tensor(v)]
    out = {"params": storage_bytes(params), "grads": storage_bytes(grads), "adamw": storage_bytes(state)}
    out = {k: {"bytes": b, "elements": n} for k, (b, n) in out.items()}
    out["total_bytes"] = sum(v["bytes"] for v in out.values())
    return out


def measure(make, group) -> dict:
    from reasonrl.models import load_model

    torch.manual_seed(0)
    model, tok = load_model(None)  # the shipped base, float32: what the training runs train
    model.train()
    strategy = make(group)
    strategy.wrap(model)
    opt = torch.optim.AdamW(strategy.trainable, lr=1e-5)
    ids = torch.randint(2, len(tok), (4, 32), generator=torch.Generator().manual_seed(0))
    with strategy.updating(model):
        model(input_ids=ids, labels=ids).loss.backward()
        strategy.reduce(strategy.trainable, [1.0])
        opt.step()
        during = held(model, strategy, opt)  # the sharded phase: shards, their gradients and state
    outside = storage_bytes(list(model.parameters()) + strategy.trainable)  # gathered copies (fsdp) + shards
    return {
        **during,
        "params_outside_update_bytes": outside[0],
        "model_elements": sum(p.numel() for p in model.parameters()),
    }


def memory_worker(rank: int, rdv: str, out: str) -> None:
    import torch.distributed as dist

    from reasonrl.dist.fsdp import Sharded
    from reasonrl.dist.group import TorchGroup
    from reasonrl.dist.strategy import Replicated

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{rdv}", rank=rank, world_size=2)
    group = TorchGroup(torch.device("cpu"))
    res = {name: measure(make, group) for name, make in (("ddp", Replicated), ("fsdp", Sharded))}
    Path(f"{out}.{rank}").write_text(json.dumps(res))
    dist.destroy_process_group()


def memory(tmp: Path) -> dict:
    import torch.multiprocessing as mp

    mp.spawn(memory_worker, args=(str(tmp / "rdv"), str(tmp / "mem")), nprocs=2)
    ranks = [json.loads((tmp / f"mem.{r}").read_text()) for r in (0, 1)]
    return {name: [r[name] for r in ranks] for name in ("ddp", "fsdp")}


def mib(b: int) -> str:
    return f"{b / 2**20:.2f}"


def report(runs: list[dict], mem: dict) -> None:
    print("| run | wall s | update s/step | comm s/step | peak RSS MiB | max metric diff | max weight diff |")
    print("|---|---|---|---|---|---|---|")
    for r in runs:
        d = r.get("vs_1_process", {})
        print(
            f"| {r['name']} | {r['wall_s']:.1f} | {r['update_s']:.3f} | {r['comm_s']:.3f} | "
            f"{r['peak_rss_mib']:.0f} | {d.get('max_metric_diff', 0):.2e} | {d.get('max_weight_diff', 0):.2e} |"
        )
    print("\n| strategy | rank | params MiB | grads MiB | AdamW MiB | total MiB | params outside the update MiB |")
    print("|---|---|---|---|---|---|---|")
    for name, ranks in mem.items():
        for rank, m in enumerate(ranks):
            print(
                f"| {name} | {rank} | {mib(m['params']['bytes'])} | {mib(m['grads']['bytes'])} | "
                f"{mib(m['adamw']['bytes'])} | {mib(m['total_bytes'])} | {mib(m['params_outside_update_bytes'])} |"
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--json", default="benchmarks/results/fsdp_bench.json")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        mem = memory(Path(tmp))
        runs = [train(name, n, extra, args.steps, Path(tmp) / name.replace(" ", "_")) for name, n, extra in RUNS]
        for r in runs[1:]:
            r["vs_1_process"] = differences(runs[0], r, Path(tmp))
    report(runs, mem)
    summary = {
        "command": f"OMP_NUM_THREADS=1 python benchmarks/speed/fsdp_bench.py --steps {args.steps}",
        "steps": args.steps,
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "checked": CHECKED,
        "runs": [{k: v for k, v in r.items() if k != "metrics"} for r in runs],
        "memory_per_rank": mem,
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
