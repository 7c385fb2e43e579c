"""GPU smoke test and throughput of the rollout engine and a GRPO step (not for CI).

For each model size and dtype: builds a random Llama over the character tokenizer on the device,
times ``HFEngine.generate`` (prompts x n samples, fixed new-token budget) and one trainer update,
and checks that the behaviour log-probs equal a re-scoring pass (ratio 1 on-policy). Prints a
table and writes JSON.

    python benchmarks/speed/gpu_check.py --json benchmarks/results/gpu_check.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from reasonrl.models import build_char_tokenizer, score_completions
from reasonrl.rollout import HFEngine, SamplingParams

SIZES = {  # hidden, layers, heads, intermediate
    "small-3M": (256, 4, 4, 768),
    "base-85M": (768, 12, 12, 2048),
    "large-400M": (1024, 24, 16, 4096),
}


def build(size: str, dtype: torch.dtype, device: str):
    h, n, heads, inter = SIZES[size]
    tok = build_char_tokenizer()
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=h,
        num_hidden_layers=n,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        intermediate_size=inter,
        max_position_embeddings=1024,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg).to(device=device, dtype=dtype), tok


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def measure(size: str, dtype: torch.dtype, device: str, prompts: int, n: int, new_tokens: int, micro: int = 32) -> dict:
    model, tok = build(size, dtype, device)
    engine = HFEngine(model, tok, max_rows=prompts * n)
    sp = SamplingParams(temperature=1.0, max_new_tokens=new_tokens, seed=0)
    batch = [f"{i}+{2 * i}=?\n" for i in range(prompts)]
    engine.generate(batch[:2], 2, SamplingParams(max_new_tokens=4))  # warm-up
    sync(device)
    t0 = time.perf_counter()
    ro = engine.generate(batch, n, sp)
    sync(device)
    gen_s = time.perf_counter() - t0
    tokens = int(ro.completion_mask.sum())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6)
    model.train()
    t0 = time.perf_counter()
    n_tokens, gaps = float(ro.completion_mask.sum()), []
    for s in range(0, len(ro.texts), micro):  # backward per micro-batch: activations of one chunk at a time
        rows = slice(s, s + micro)
        lp, _ = score_completions(
            model,
            ro.prompt_ids[rows],
            ro.prompt_mask[rows],
            ro.completion_ids[rows],
            ro.completion_mask[rows],
            chunk_rows=micro,
        )
        mask = ro.completion_mask[rows].to(lp.device, lp.dtype)
        (-(lp * mask).sum() / n_tokens).backward()
        gaps.append(float((lp.detach() - ro.logprobs[rows].to(lp.device)).abs().max()))
    opt.step()
    sync(device)
    upd_s = time.perf_counter() - t0
    with torch.no_grad():
        model.eval()
        lp2, _ = score_completions(
            model, ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask, chunk_rows=64
        )
    return {
        "size": size,
        "dtype": str(dtype).replace("torch.", ""),
        "device": device,
        "rows": prompts * n,
        "new_tokens": tokens,
        "gen_s": gen_s,
        "gen_tokens_per_s": tokens / gen_s,
        "update_s": upd_s,
        "update_tokens_per_s": tokens / upd_s,
        "logprob_gap_before_step": max(gaps),
        "finite": bool(torch.isfinite(lp2).all()),
        "peak_mem_gb": (torch.cuda.max_memory_allocated() / 2**30) if device.startswith("cuda") else 0.0,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--sizes", default="small-3M,base-85M,large-400M")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--json", default="benchmarks/results/gpu_check.json")
    args = ap.parse_args()
    rows = []
    for size in args.sizes.split(","):
        for dt in args.dtypes.split(","):
            row = measure(size, getattr(torch, dt), args.device, args.prompts, args.n, args.new_tokens)
            rows.append(row)
            print(json.dumps(row), flush=True)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(
        json.dumps(
            {
                "device": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu",
                "torch": torch.__version__,
                "rows": rows,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
