"""Two versions of reasonrl's code on the same training steps: before/after of an engine change.

Each version runs in fresh processes (``PYTHONPATH=<its src>``), alternating A, B, A, B, ... so that a
shared machine's drift hits both alike; each process trains ``--steps`` GRPO steps of the real-model
profile of ``bench_vs_trl.py`` (4 prompts x 8 samples, <= 64 new tokens, LoRA r=16, the chat
arithmetic task) and reports per step: CPU and wall seconds, the generation's CPU seconds and the
update's wall seconds, the tokens generated (equal tokens: the two versions sampled the same).

    python benchmarks/speed/code_ab.py --model smollm2-135m-instruct --a /work/main/src --b src --rounds 2 --steps 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def child(model: str, steps: int) -> None:
    """One process: the trainer at the real-model settings, one JSON line per step."""
    import dataclasses
    import tempfile

    import torch

    sys.path.insert(0, str(HERE))
    from vs_trl_parts import write_chat_arithmetic  # the task file only: no reasonrl code of its own
    from reasonrl.config.train import TrainConfig
    from reasonrl.models import load_model
    from reasonrl.recipes import get_recipe
    from reasonrl.config.sections import Lora
    from reasonrl.tasks import get_task
    from reasonrl.loop.trainer import Trainer

    torch.set_num_threads(1)
    train, test = write_chat_arithmetic(Path(tempfile.mkdtemp()))
    task = get_task(str(train), test_path=str(test), reward="numeric", extract="last_number")
    m, tok = load_model(model)
    base = get_recipe("grpo")
    recipe = dataclasses.replace(
        base,
        group_size=8,
        optim=dataclasses.replace(base.optim, lr=1e-4, warmup_steps=0, schedule="constant", beta2=0.999),
        sampling=dataclasses.replace(base.sampling, max_new_tokens=64, temperature=1.0),
    )
    cfg = TrainConfig(steps=steps, prompts_per_step=4, seed=0, eval_every=0, save_every=0, lora=Lora(r=16, alpha=32))
    tr = Trainer(m, tok, task, recipe, cfg, Path(tempfile.mkdtemp()))
    rollout, gen = tr.batches.rollout, {}

    def timed_rollout(n):
        c = time.process_time()
        out = rollout(n)
        gen["cpu"] = time.process_time() - c
        return out

    tr.batches.rollout = timed_rollout
    for step in range(steps):
        c, w = time.process_time(), time.perf_counter()
        met = tr.train_step()
        print(
            json.dumps(
                {
                    "step": step,
                    "cpu": time.process_time() - c,
                    "wall": time.perf_counter() - w,
                    "gen_cpu": gen["cpu"],
                    "update_wall": met["time/update"],
                    "tokens": met["tokens/generated"],
                    "load": os.getloadavg()[0],
                }
            ),
            flush=True,
        )


def run(src: str, model: str, steps: int) -> list[dict]:
    env = {**os.environ, "PYTHONPATH": str(Path(src).resolve()), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, __file__, "--child", "--model", model, "--steps", str(steps)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--a", help="the first version's src folder (before)")
    ap.add_argument("--b", help="the second version's src folder (after)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--json", default="benchmarks/results/real_model/code_ab.json")
    ap.add_argument("--child", action="store_true")
    args = ap.parse_args()
    if args.child:
        return child(args.model, args.steps)
    runs: dict[str, list[list[dict]]] = {"a": [], "b": []}
    for _ in range(args.rounds):
        for key in ("a", "b"):
            runs[key].append(run(getattr(args, key), args.model, args.steps))
            print(key, json.dumps(runs[key][-1]), flush=True)
    fields = ("cpu", "wall", "gen_cpu", "update_wall")
    med = {k: {f: statistics.median(s[f] for r in rs for s in r) for f in fields} for k, rs in runs.items()}
    same = [[s["tokens"] for s in r] for r in runs["a"]] == [[s["tokens"] for s in r] for r in runs["b"]]
    print(f"{'':>4} " + " ".join(f"{f:>12}" for f in fields))
    for key in ("a", "b"):
        print(f"{key:>4} " + " ".join(f"{med[key][f]:12.2f}" for f in fields))
    print("b / a: " + " ".join(f"{med['b'][f] / med['a'][f]:.3f}" for f in fields), f"| same tokens: {same}")
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)

    def commit(src):
        return subprocess.run(["git", "-C", src, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()

    out.write_text(
        json.dumps(
            {
                "a": args.a,
                "b": args.b,
                "a_commit": commit(args.a),
                "b_commit": commit(args.b),
                "median": med,
                "same_tokens": same,
                "runs": runs,
                "command": "python " + " ".join(sys.argv),
                "date": time.strftime("%Y-%m-%d %H:%M"),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
