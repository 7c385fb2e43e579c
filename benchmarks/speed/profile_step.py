"""Where one reasonrl GRPO step goes on a model, with ``bench_vs_trl.py``'s settings: the phase split of
every step (generate / reward / forward / backward / rest, ``vs_trl_parts.Phases``) and, for the last
step, torch.profiler's operators by self CPU time. Writes JSON beside the printout.

    python benchmarks/speed/profile_step.py --model smollm2-135m-instruct --steps 3 --threads 1

It runs on an older checkout too (``PYTHONPATH=<its src>``: a before/after profile of a change).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

import reasonrl.loop.trainer as trainer_mod
from bench_vs_trl import PROFILES, build_task
from reasonrl.config.train import TrainConfig
from reasonrl.models import load_model
from reasonrl.recipes import get_recipe
from reasonrl.config.sections import Lora
from reasonrl.loop.trainer import Trainer
from vs_trl_parts import Phases, step_phases


def make_trainer(model_name, task, s, steps: int, seed: int = 0) -> Trainer:
    model, tok = load_model(model_name)
    base = get_recipe("grpo")
    recipe = dataclasses.replace(
        base,
        group_size=s.group,
        optim=dataclasses.replace(base.optim, lr=s.lr, warmup_steps=0, schedule="constant", beta2=0.999),
        sampling=dataclasses.replace(base.sampling, max_new_tokens=s.max_new, temperature=s.temperature),
    )
    cfg = TrainConfig(
        steps=steps,
        prompts_per_step=s.prompts,
        seed=seed,
        eval_every=0,
        save_every=0,
        lora=Lora(r=s.lora_r, alpha=s.lora_alpha),
    )
    return Trainer(model, tok, task, recipe, cfg, Path(tempfile.mkdtemp()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--json", default="benchmarks/results/real_model/profile.json")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    s = PROFILES["real"]
    task = build_task(s, Path(tempfile.mkdtemp()), {})
    trainer, phases, steps = make_trainer(args.model, task, s, args.steps), Phases(), []
    b = trainer.batches
    targets = [
        (trainer_mod, "score_rows", "forward"),
        (b, "rollout", "generate"),
        (b, "reward_terms", "reward"),
        (b, "reward", "reward"),
        (b, "prepare", "reward"),
    ]
    targets = [
        t for t in targets if hasattr(t[0], t[1])
    ]  # an older version has no reward_terms (nested calls count once)
    with phases.wrap(targets):
        for i in range(args.steps):
            last = i == args.steps - 1
            prof = profile(activities=[ProfilerActivity.CPU]) if last else None
            t0, c0 = time.perf_counter(), time.process_time()
            if prof:
                prof.__enter__()
            m = trainer.train_step()
            if prof:
                prof.__exit__(None, None, None)
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            steps.append(
                {
                    "tokens": m["tokens/generated"],
                    "rows_skipped": m["update/rows_skipped_frac"],
                    "load": os.getloadavg()[0],
                    **step_phases(wall, cpu, phases.take()),
                }
            )
            print(json.dumps(steps[-1]), flush=True)
    table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.top)
    print(table)
    ops = [
        {"op": e.key, "self_cpu_s": e.self_cpu_time_total / 1e6, "calls": e.count}
        for e in sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[: args.top]
    ]
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "model": args.model,
                "settings": dataclasses.asdict(s),
                "steps": steps,
                "last_step_ops": ops,
                "torch_threads": torch.get_num_threads(),
                "command": "python " + " ".join(sys.argv),
                "date": time.strftime("%Y-%m-%d %H:%M"),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
