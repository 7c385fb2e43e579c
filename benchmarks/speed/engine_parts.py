"""The engine's CPU cuts of issue 42, one at a time, in one process (CPU seconds; alternating rounds):

- generation of 4 prompts x 8 samples, <= 64 tokens, LoRA r=16: the concatenating KV cache with finished rows
  kept until half are done (before), the in-place cache (``GrowingLayer``), and finished rows dropped at once
  (``compact_below`` 1.0, the CPU default); and the same without adapters (what LoRA costs a generation);
- the training forward + backward of 16 rows of 4 prompts (46 prompt, 64 completion tokens): each prompt once
  (``shared_prefix_logits``) or once per row.

    python benchmarks/speed/engine_parts.py --model smollm2-135m-instruct --rounds 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

import reasonrl.models.scoring as scoring
from reasonrl.models import load_model
from reasonrl.models.lora import apply_lora
from reasonrl.rollout import HFEngine, SamplingParams
from reasonrl.rollout.kvcache import DecodeCache
from reasonrl.config.sections import Lora

SYSTEM = "You are a helpful math assistant. Solve the problem and end with the final answer as a number."
PROMPTS = [
    [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"What is {a} + {b}?"}]
    for a, b in [(12, 34), (56, 78), (23, 45), (67, 89)]
]


def generation(model, tok, in_place: bool, compact_below: float) -> tuple[float, int]:
    """CPU seconds and tokens of one seeded generation under the given engine settings."""
    reserve = DecodeCache.reserve
    if not in_place:  # transformers' concatenating layers, as before
        DecodeCache.reserve = lambda self, capacity: None
    try:
        engine = HFEngine(model, tok, compact_below=compact_below)
        c = time.process_time()
        ro = engine.generate(PROMPTS, 8, SamplingParams(temperature=1.0, max_new_tokens=64), seeds=[1, 2, 3, 4])
        return time.process_time() - c, int(ro.lengths.sum())
    finally:
        DecodeCache.reserve = reserve


def update(model, shared: bool) -> float:
    """CPU seconds of the training forward + backward of 16 rows of 4 prompts."""
    g = torch.Generator().manual_seed(0)
    prompts = torch.randint(3, 49000, (4, 46), generator=g).repeat_interleave(4, 0)
    completions = torch.randint(3, 49000, (16, 64), generator=g)
    share = scoring.shared_prefix_logits
    if not shared:
        scoring.shared_prefix_logits = lambda *a, **k: None
    try:
        model.zero_grad()
        c = time.process_time()
        logp, _ = scoring.score_completions(
            model, prompts, torch.ones_like(prompts), completions, torch.ones_like(completions), chunk_rows=16
        )
        logp.sum().backward()
        return time.process_time() - c
    finally:
        scoring.shared_prefix_logits = share


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", default="benchmarks/results/real_model/engine_parts.json")
    args = ap.parse_args()
    torch.set_num_threads(1)
    base, tok = load_model(args.model)
    lora = apply_lora(load_model(args.model)[0], Lora(r=16, alpha=32), 0)
    gens = {
        "concat cache, compact 0.5 (before)": (lora, False, 0.5),
        "in-place cache, compact 0.5": (lora, True, 0.5),
        "in-place cache, compact 1.0 (now)": (lora, True, 1.0),
        "no adapters, now": (base, True, 1.0),
    }
    out: dict[str, list] = {k: [] for k in [*gens, "update, prompt per row", "update, prompt once (now)"]}
    for _ in range(args.rounds):
        for name, (model, in_place, compact) in gens.items():
            out[name].append(generation(model, tok, in_place, compact))
        lora.train()
        out["update, prompt per row"].append(update(lora, False))
        out["update, prompt once (now)"].append(update(lora, True))
    med = {k: statistics.median(v[0] if isinstance(v, tuple) else v for v in vals) for k, vals in out.items()}
    for k, v in med.items():
        print(f"{k:<40} {v:8.2f} CPU s")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(
        json.dumps(
            {
                "median_cpu_s": med,
                "runs": out,
                "command": "python " + " ".join(sys.argv),
                "date": time.strftime("%Y-%m-%d %H:%M"),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
