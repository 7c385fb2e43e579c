"""The output head's precision under mixed precision (bf16 decoder over float32 weights), chosen by
the gap between the sampler's and the learner's log-probs of the same tokens (issue 27, item 5).

The decoder runs under bf16 autocast in both passes; only the output head changes:

* ``fp32``: float32 weights and input (the residual stream is float32), float32 matmul: today's head.
* ``tf32``: what TF32 tensor cores compute on a GPU, emulated on the CPU: the head's input and
  weight rounded to TF32's 10-bit mantissa (round to nearest even), float32 products and sums.
* ``bf16``: input and weight cast to bf16 (autocast's behaviour), bf16 logits, float32 log-softmax.

The sampler is ``HFEngine`` (KV-cache decode), the learner ``score_completions`` (one full forward
at temperature 1) on the same model: their gap is what a clipped loss sees as an off-policy ratio
on on-policy data. ``truth`` is the distance from an all-float32 model's log-probs of the same
tokens. The shipped base model (trained on arithmetic) answers the arithmetic task's prompts,
``--batches`` batches of 32 prompts x 8 samples, <= 48 new tokens, temperature 1.

Decision rule, fixed before measuring: the cheapest head (bf16, then tf32, then fp32) whose
sampler/learner gap, mean and 99.9th percentile over all tokens, is at most 1.25x the fp32 head's.
Prints a table and writes JSON; on a CPU only (TF32 is emulated, so no speed is measured here).

    python benchmarks/studies/head_precision.py               # benchmarks/results/head_precision.json
"""

from __future__ import annotations

import argparse
import copy
import json
import time
import types
from pathlib import Path

import torch
import torch.nn.functional as F

from reasonrl.models import load_model, score_completions
from reasonrl.models.memory import prepare_for_training
from reasonrl.rollout import HFEngine, SamplingParams
from reasonrl.tasks import get_task, take_items

HEADS = ("fp32", "tf32", "bf16")  # most to least precise; cost falls the other way
TOLERANCE = 1.25  # a head is acceptable when its gaps are at most this times the fp32 head's


def round_tf32(x: torch.Tensor) -> torch.Tensor:
    """float32 -> the nearest value with a 10-bit mantissa (ties to even), as a GPU feeds a TF32 matmul."""
    bits = x.contiguous().view(torch.int32)
    lsb = (bits >> 13) & 1  # the last kept mantissa bit, for ties to even
    return ((bits + 0xFFF + lsb) & ~0x1FFF).view(torch.float32)


def _tf32_forward(self, x):  # (.., d) -> (.., V) float32
    return F.linear(round_tf32(x.float()), round_tf32(self.weight.float()))


def _bf16_forward(self, x):  # bf16 logits (autocast's head), read as float32 by the sampler and the learner
    return F.linear(x.to(torch.bfloat16), self.weight.to(torch.bfloat16)).float()


def with_head(model, head: str):
    """A copy of the mixed-precision ``model`` whose output head computes as ``head``."""
    out = copy.deepcopy(model)
    lm = out.get_output_embeddings()
    if lm.bias is not None:
        raise SystemExit("head_precision.py: an output head with a bias is not emulated")
    if head != "fp32":
        lm.forward = types.MethodType(_tf32_forward if head == "tf32" else _bf16_forward, lm)
    return out


def gaps(model, truth_model, ro) -> dict[str, torch.Tensor]:
    """Per-token |sampler - learner| and |learner - all-float32| log-probs over the generated tokens."""
    mask = ro.completion_mask.bool()
    with torch.no_grad():
        learner, _ = score_completions(model, ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask)
        truth, _ = score_completions(truth_model, ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask)
    return {"gap": (learner - ro.logprobs)[mask].abs(), "truth": (learner - truth)[mask].abs()}


def summary(x: torch.Tensor) -> dict[str, float]:
    x = x.double()
    return {"mean": float(x.mean()), "p99.9": float(x.quantile(0.999)), "max": float(x.max()), "tokens": x.numel()}


def measure(batches: int, prompts: int, samples: int, max_new: int) -> dict:
    truth_model, tok = load_model(None)
    mixed = prepare_for_training(copy.deepcopy(truth_model), "bfloat16", master_fp32=True, checkpointing=False).eval()
    items = take_items(get_task("arithmetic"), "train", prompts * batches, seed=0, unique=True)
    sp = SamplingParams(temperature=1.0, max_new_tokens=max_new)
    out = {}
    for head in HEADS:
        model, found = with_head(mixed, head), {"gap": [], "truth": []}
        t0 = time.perf_counter()
        for b in range(batches):
            chunk = [it.prompt for it in items[b * prompts : (b + 1) * prompts]]
            ro = HFEngine(model, tok).generate(chunk, samples, sp, seeds=list(range(b * prompts, (b + 1) * prompts)))
            for k, v in gaps(model, truth_model, ro).items():
                found[k].append(v)
        out[head] = {k: summary(torch.cat(v)) for k, v in found.items()}
        out[head]["seconds"] = time.perf_counter() - t0
        print(f"  {head}: {out[head]['seconds']:.0f} s", flush=True)
    return out


def choose(rows: dict) -> str:
    """The cheapest head whose gap (mean and 99.9th percentile) is within TOLERANCE of fp32's."""
    ref = rows["fp32"]["gap"]
    for head in reversed(HEADS):
        g = rows[head]["gap"]
        if g["mean"] <= TOLERANCE * ref["mean"] and g["p99.9"] <= TOLERANCE * ref["p99.9"]:
            return head
    return "fp32"


def table(rows: dict) -> str:
    lines = [
        "| head | sampler/learner gap: mean | p99.9 | max | learner vs all-fp32: mean | p99.9 | max | tokens |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for head, r in rows.items():
        g, t = r["gap"], r["truth"]
        lines.append(
            f"| {head} | {g['mean']:.2e} | {g['p99.9']:.2e} | {g['max']:.2e} | {t['mean']:.2e} | "
            f"{t['p99.9']:.2e} | {t['max']:.2e} | {g['tokens']} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--max-new", type=int, default=48)
    ap.add_argument("--json", default=str(Path(__file__).parents[1] / "results" / "head_precision.json"))
    a = ap.parse_args()
    torch.manual_seed(0)
    rows = measure(a.batches, a.prompts, a.samples, a.max_new)
    chosen = choose(rows)
    print(table(rows))
    print(f"chosen (cheapest head within {TOLERANCE}x of fp32's gap, mean and p99.9): {chosen}")
    path = Path(a.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {
                "rows": rows,
                "chosen": chosen,
                "tolerance": TOLERANCE,
                "torch": torch.__version__,
                "settings": vars(a),
                "threads": torch.get_num_threads(),
            },
            indent=1,
        )
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
