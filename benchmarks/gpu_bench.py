"""reasonrl vs TRL's GRPOTrainer on one GPU, side by side in one process (not for CI; timings are
reported, never asserted).

The same random model over the project's character vocabulary, built from a config (nothing is
downloaded): Qwen2-0.5B-shaped (hidden 896, 24 layers, 14 heads / 2 KV heads, MLP 4864), 16
prompts x 8 samples, <= 128 new tokens, the same random 0/1 reward (a hash of the completion), one
optimiser step per batch, lr 1e-6, temperature 1. Runs: reasonrl in bf16 and fp32 with the
dynamic KV cache and with the static cache + CUDA graphs (``rollout.static_cache=true
rollout.compile=true``), TRL 1.16 GRPOTrainer (its HF-generate path) in bf16 and fp32; then a
Qwen2-1.5B-shaped model (hidden 1536, 28 layers, 12 / 2 heads, MLP 8960) in bf16 with LoRA
(r 16, alpha 32, all linear layers) and with full fine-tuning, to show what fits and how fast.

Per run: median seconds per step after the warm-up steps, generate seconds, new tokens/s while
generating, update seconds (step minus generate: scoring, backward, optimiser), peak GPU memory
(``torch.cuda.max_memory_allocated``), and TRL / reasonrl ratios per dtype. A run that runs out of
memory is reported as such. Prints a table and writes JSON.

    python benchmarks/gpu_bench.py                       # all runs, benchmarks/results/gpu_bench.json
    python benchmarks/gpu_bench.py --only reasonrl-bf16-static,trl-bf16 --steps 5
    python benchmarks/gpu_bench.py --smoke               # CPU, tiny shapes, 1 step (tests run this)
"""
from __future__ import annotations

import argparse
import dataclasses
import gc
import hashlib
import importlib.util
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

SHAPES = {  # hidden, layers, heads, kv heads, MLP
    "0.5B": (896, 24, 14, 2, 4864),
    "1.5B": (1536, 28, 12, 2, 8960),
    "smoke": (64, 2, 4, 2, 128),
}


@dataclasses.dataclass(frozen=True)
class Run:
    name: str
    fw: str  # reasonrl | trl
    dtype: str  # bf16 | fp32
    shape: str = "0.5B"
    static: bool = False  # reasonrl: static KV cache (+ CUDA graphs on a GPU)
    lora: int = 0  # LoRA rank; 0 = full fine-tuning


RUNS = [
    Run("reasonrl-bf16", "reasonrl", "bf16"), Run("reasonrl-bf16-static", "reasonrl", "bf16", static=True),
    Run("trl-bf16", "trl", "bf16"),
    Run("reasonrl-fp32", "reasonrl", "fp32"), Run("reasonrl-fp32-static", "reasonrl", "fp32", static=True),
    Run("trl-fp32", "trl", "fp32"),
    Run("reasonrl-1.5B-bf16-lora", "reasonrl", "bf16", "1.5B", lora=16),
    Run("reasonrl-1.5B-bf16-full", "reasonrl", "bf16", "1.5B"),
]


@dataclasses.dataclass
class Setup:
    device: str
    prompts: int = 16
    group: int = 8
    max_new: int = 128
    steps: int = 5
    warmup: int = 2
    smoke: bool = False


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def rand_reward(prompts, completions, **_):  # the same 0/1 for both frameworks: a hash of the text
    return [float(int(hashlib.md5(c.encode()).hexdigest(), 16) % 2) for c in completions]


def build(tok, run: Run, device: str):
    h, n, heads, kv, mlp = SHAPES[run.shape]
    cfg = Qwen2Config(vocab_size=len(tok), hidden_size=h, intermediate_size=mlp, num_hidden_layers=n,
                      num_attention_heads=heads, num_key_value_heads=kv, max_position_embeddings=2048,
                      tie_word_embeddings=True, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
                      bos_token_id=None)
    torch.manual_seed(0)
    return Qwen2ForCausalLM(cfg).to(device=device, dtype=torch.bfloat16 if run.dtype == "bf16" else torch.float32)


def prompts(n: int) -> list[str]:
    from reasonrl.tasks import get_task, take_items
    return [it.prompt for it in take_items(get_task("arithmetic"), "train", n, seed=0, unique=False)]


def run_reasonrl(run: Run, s: Setup) -> dict:
    from reasonrl.config import Lora, RolloutOpts, TrainConfig
    from reasonrl.models import build_char_tokenizer
    from reasonrl.recipes import get_recipe
    from reasonrl.tasks import get_task
    from reasonrl.trainer import Trainer
    tok = build_char_tokenizer()
    model = build(tok, run, s.device)
    r = get_recipe("grpo")
    r = dataclasses.replace(r, group_size=s.group, task_reward_weight=0.0, extra_rewards=((rand_reward, 1.0),),
                            optim=dataclasses.replace(r.optim, lr=1e-6, warmup_steps=0, schedule="constant"),
                            sampling=dataclasses.replace(r.sampling, max_new_tokens=s.max_new, temperature=1.0))
    graphs = run.static and s.device.startswith("cuda")  # CUDA graphs need a GPU; on a CPU the static cache alone
    cfg = TrainConfig(steps=s.steps, prompts_per_step=s.prompts, seed=0, eval_every=0, save_every=0,
                      device=s.device, dtype="bfloat16" if run.dtype == "bf16" else "float32",
                      lora=Lora(r=run.lora, alpha=2.0 * run.lora) if run.lora else Lora(),
                      rollout=RolloutOpts(static_cache=run.static, compile=graphs))
    tr = Trainer(model, tok, get_task("arithmetic"), r, cfg, Path(tempfile.mkdtemp()))
    step_s, gen_s, lens = [], [], []
    for i in range(s.steps):
        sync(s.device)
        t0 = time.perf_counter()
        m = tr.train_step()
        sync(s.device)
        step_s.append(time.perf_counter() - t0)
        gen_s.append(m["time/generate"])
        lens.append(m["length/mean"])
        print(f"  {run.name} step {i + 1}: {step_s[-1]:.2f} s, generate {gen_s[-1]:.2f} s, "
              f"mean length {lens[-1]:.1f}", flush=True)
    return {"step": step_s, "gen": gen_s, "len": lens}


def run_trl(run: Run, s: Setup) -> dict:
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer
    from reasonrl.models import build_char_tokenizer
    tok = build_char_tokenizer()
    model = build(tok, run, s.device)
    data = Dataset.from_list([{"prompt": p} for p in prompts(s.prompts * s.steps)])
    step_s, gen_s = [], []

    class Clock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            sync(s.device)
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            sync(s.device)
            step_s.append(time.perf_counter() - self.t0)
            print(f"  {run.name} step {len(step_s)}: {step_s[-1]:.2f} s", flush=True)

    generate = model.generate

    def timed(*a, **k):  # TRL's HF-generate path calls the model's own generate
        sync(s.device)
        t0 = time.perf_counter()
        out = generate(*a, **k)
        sync(s.device)
        gen_s.append(time.perf_counter() - t0)
        return out

    model.generate = timed
    args = GRPOConfig(output_dir=tempfile.mkdtemp(), per_device_train_batch_size=s.prompts * s.group,
                      num_generations=s.group, gradient_accumulation_steps=1, max_completion_length=s.max_new,
                      learning_rate=1e-6, lr_scheduler_type="constant", warmup_steps=0, max_steps=s.steps, beta=0.0,
                      loss_type="grpo", temperature=1.0, report_to="none", logging_steps=1, save_strategy="no", seed=0,
                      bf16=run.dtype == "bf16", use_cpu=not s.device.startswith("cuda"), shuffle_dataset=False,
                      dataloader_num_workers=0)
    trainer = GRPOTrainer(model=model, reward_funcs=rand_reward, args=args, train_dataset=data,
                          processing_class=tok, callbacks=[Clock()])
    trainer.train()
    lens = [h["completions/mean_length"] for h in trainer.state.log_history if "completions/mean_length" in h]
    return {"step": step_s, "gen": gen_s, "len": lens}


def summarise(run: Run, raw: dict, s: Setup) -> dict:
    k = slice(min(s.warmup, len(raw["step"]) - 1), None)  # medians after the warm-up steps
    step, gen, length = (statistics.median(raw[x][k]) for x in ("step", "gen", "len"))
    return {**dataclasses.asdict(run), "s_per_step": step, "s_generate": gen, "s_update": step - gen,
            "mean_new_tokens": length, "gen_tokens_per_s": length * s.prompts * s.group / gen,
            "peak_mem_gb": torch.cuda.max_memory_allocated() / 2**30 if s.device.startswith("cuda") else None,
            "raw": raw}


def measure(run: Run, s: Setup) -> dict:
    if s.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    try:
        raw = (run_reasonrl if run.fw == "reasonrl" else run_trl)(run, s)
        return summarise(run, raw, s)
    except torch.cuda.OutOfMemoryError as e:  # reported in the table: what does not fit is a result
        return {**dataclasses.asdict(run), "error": f"out of memory: {str(e).splitlines()[0]}"}
    finally:
        gc.collect()
        if s.device.startswith("cuda"):
            torch.cuda.empty_cache()


def ratios(rows: list[dict]) -> dict:
    """TRL / reasonrl seconds per step (> 1: reasonrl faster) and reasonrl / TRL peak memory, per
    dtype and reasonrl run."""
    ok = [r for r in rows if "error" not in r]
    trl = {(r["dtype"], r["shape"]): r for r in ok if r["fw"] == "trl"}
    out = {}
    for r in ok:
        peer = trl.get((r["dtype"], r["shape"]))
        if r["fw"] == "reasonrl" and peer:
            out[r["name"]] = {"speedup_vs_trl": peer["s_per_step"] / r["s_per_step"],
                              "memory_vs_trl": (r["peak_mem_gb"] / peer["peak_mem_gb"]) if r["peak_mem_gb"] else None}
    return out


def table(rows: list[dict], rat: dict) -> str:
    head = ("| run | s/step | generate s | new tokens/s | update s | peak GB | TRL s/step / this | "
            "this GB / TRL GB |\n|---|---|---|---|---|---|---|---|")
    lines = [head]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['name']} | {r['error']} | | | | | | |")
            continue
        q = rat.get(r["name"], {})
        mem = "n/a" if r["peak_mem_gb"] is None else f"{r['peak_mem_gb']:.1f}"
        sp = f"{q['speedup_vs_trl']:.2f}x" if q else ""
        mr = f"{q['memory_vs_trl']:.2f}x" if q.get("memory_vs_trl") else ""
        lines.append(f"| {r['name']} | {r['s_per_step']:.2f} | {r['s_generate']:.2f} | {r['gen_tokens_per_s']:,.0f} | "
                     f"{r['s_update']:.2f} | {mem} | {sp} | {mr} |")
    return "\n".join(lines)


def plan(a) -> tuple[list[Run], Setup]:
    if a.smoke:  # CPU, tiny shapes, one step: the script's code paths, not its figures
        s = Setup(device="cpu", prompts=2, group=2, max_new=8, steps=1, warmup=0, smoke=True)
        runs = [Run("reasonrl-fp32", "reasonrl", "fp32", "smoke"),
                Run("reasonrl-fp32-static", "reasonrl", "fp32", "smoke", static=True),
                Run("reasonrl-smoke-lora", "reasonrl", "fp32", "smoke", lora=4)]
        if importlib.util.find_spec("trl") is not None:
            runs.append(Run("trl-fp32", "trl", "fp32", "smoke"))
        return runs, s
    if not torch.cuda.is_available():
        raise SystemExit("gpu_bench.py: no CUDA device (use --smoke to run the script's paths on a CPU)")
    runs = [r for r in RUNS if not a.only or r.name in a.only.split(",")]
    unknown = set(a.only.split(",")) - {r.name for r in RUNS} if a.only else set()
    if unknown:
        raise SystemExit(f"gpu_bench.py --only: unknown runs {sorted(unknown)}; known: {[r.name for r in RUNS]}")
    if importlib.util.find_spec("trl") is None and any(r.fw == "trl" for r in runs):
        raise SystemExit("gpu_bench.py: TRL is not installed (pip install -e '.[trl]'), or leave it out with --only")
    return runs, Setup(device="cuda", steps=a.steps, warmup=a.warmup)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--smoke", action="store_true", help="CPU, tiny shapes, one step (TRL only if installed)")
    ap.add_argument("--only", default="", help="comma-separated run names (default: all)")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2, help="steps left out of the medians")
    ap.add_argument("--json", default=None, help="default: benchmarks/results/gpu_bench[_smoke].json")
    a = ap.parse_args()
    runs, s = plan(a)
    t0 = time.perf_counter()
    rows = [measure(r, s) for r in runs]
    rat = ratios(rows)
    print(table(rows, rat))
    wall = time.perf_counter() - t0
    print(f"wall time {wall:.0f} s on {torch.cuda.get_device_name() if s.device == 'cuda' else 'cpu'}")
    path = Path(a.json or Path(__file__).parent / "results" / f"gpu_bench{'_smoke' if s.smoke else ''}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"setup": dataclasses.asdict(s), "runs": rows, "ratios": rat, "wall_s": wall,
                                "torch": torch.__version__}, indent=1))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
