"""reasonrl vs TRL's GRPOTrainer on one GPU, each configuration in its own process (not for CI;
timings are reported, never asserted).

The same random model over the project's character vocabulary, built from a config (nothing is
downloaded): Qwen2-0.5B-shaped (hidden 896, 24 layers, 14 heads / 2 KV heads, MLP 4864), 16
prompts x 8 samples, <= 128 new tokens, the same random 0/1 reward (a hash of the completion), one
optimiser step per batch, lr 1e-6, temperature 1. Precisions, compared like for like:

* ``fp32``: float32 weights, gradients, optimiser states and compute (both frameworks).
* ``bf16``: pure bf16, the weights held in bf16 (reasonrl ``master_fp32=false``; TRL ``bf16=True``
  on a bf16 model): half the memory, updates below bf16's resolution lost.
* ``mixed``: bf16 compute over float32 master weights (reasonrl's default for ``dtype=bfloat16``:
  the decoder under autocast, the output head float32; TRL ``bf16=True`` on a float32 model, the
  HF Trainer's autocast around its loss).

reasonrl runs with the dynamic KV cache and with the static cache + CUDA graphs
(``rollout.static_cache=true rollout.compile=true``); then a Qwen2-1.5B-shaped model (hidden 1536,
28 layers, 12 / 2 heads, MLP 8960) in mixed precision with LoRA (r 16, alpha 32, all linear layers)
and with full fine-tuning, to show what fits and how fast.

Each row runs in a fresh process (``--child``), so compiled graphs, CUDA graphs and the caching
allocator's pools of one row never carry into another's time or peak; whatever a row raises, or a
process that dies, is that row's error and the table still prints. Per row: median seconds per
step after the warm-up steps, generate seconds, new tokens/s while generating, update seconds
(step minus generate), peak GPU memory (``torch.cuda.max_memory_allocated``), and TRL / reasonrl
ratios within one precision. Prints a table and writes JSON.

    python benchmarks/speed/gpu_bench.py                       # all rows, benchmarks/results/gpu_bench.json
    python benchmarks/speed/gpu_bench.py --only reasonrl-bf16-static,trl-bf16 --steps 5
    python benchmarks/speed/gpu_bench.py --smoke               # CPU, tiny shapes, 1 step, every row (a test runs this)
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SHAPES = {  # hidden, layers, heads, kv heads, MLP
    "0.5B": (896, 24, 14, 2, 4864),
    "1.5B": (1536, 28, 12, 2, 8960),
    "smoke": (64, 2, 4, 2, 128),
}
PRECISIONS = {"fp32": "fp32", "bf16": "bf16 (pure: bf16 weights)", "mixed": "mixed (bf16 compute, fp32 weights)"}


@dataclasses.dataclass(frozen=True)
class Run:
    name: str
    fw: str  # reasonrl | trl
    precision: str  # fp32 | bf16 | mixed (the module docstring)
    shape: str = "0.5B"
    static: bool = False  # reasonrl: static KV cache + torch.compile (CUDA graphs on a GPU)
    lora: int = 0  # LoRA rank; 0 = full fine-tuning


RUNS = [
    Run("reasonrl-fp32", "reasonrl", "fp32"),
    Run("reasonrl-fp32-static", "reasonrl", "fp32", static=True),
    Run("trl-fp32", "trl", "fp32"),
    Run("reasonrl-bf16", "reasonrl", "bf16"),
    Run("reasonrl-bf16-static", "reasonrl", "bf16", static=True),
    Run("trl-bf16", "trl", "bf16"),
    Run("reasonrl-mixed", "reasonrl", "mixed"),
    Run("reasonrl-mixed-static", "reasonrl", "mixed", static=True),
    Run("trl-mixed", "trl", "mixed"),
    Run("reasonrl-1.5B-mixed-lora", "reasonrl", "mixed", "1.5B", lora=16),
    Run("reasonrl-1.5B-mixed-full", "reasonrl", "mixed", "1.5B"),
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


# ------------------------------------------------------------------ one row (in its own process)
def sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def rand_reward(prompts, completions, **_):  # the same 0/1 for both frameworks: a hash of the text
    import hashlib

    return [float(int(hashlib.md5(c.encode()).hexdigest(), 16) % 2) for c in completions]


def build(tok, run: Run, device: str):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    h, n, heads, kv, mlp = SHAPES[run.shape]
    cfg = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=h,
        intermediate_size=mlp,
        num_hidden_layers=n,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(0)
    return Qwen2ForCausalLM(cfg).to(device=device, dtype=torch.bfloat16 if run.precision == "bf16" else torch.float32)


def prompts(n: int) -> list[str]:
    from reasonrl.tasks import get_task, take_items

    return [it.prompt for it in take_items(get_task("arithmetic"), "train", n, seed=0, unique=False)]


def run_reasonrl(run: Run, s: Setup) -> dict:
    from reasonrl.config.train import Lora, RolloutOpts, TrainConfig
    from reasonrl.models import build_char_tokenizer
    from reasonrl.recipes import get_recipe
    from reasonrl.tasks import get_task
    from reasonrl.loop.trainer import Trainer

    tok = build_char_tokenizer()
    r = get_recipe("grpo")
    r = dataclasses.replace(
        r,
        group_size=s.group,
        task_reward_weight=0.0,
        extra_rewards=((rand_reward, 1.0),),
        optim=dataclasses.replace(r.optim, lr=1e-6, warmup_steps=0, schedule="constant"),
        sampling=dataclasses.replace(r.sampling, max_new_tokens=s.max_new, temperature=1.0),
    )
    cfg = TrainConfig(
        steps=s.steps,
        prompts_per_step=s.prompts,
        seed=0,
        eval_every=0,
        save_every=0,
        device=s.device,
        dtype="float32" if run.precision == "fp32" else "bfloat16",
        master_fp32=run.precision == "mixed",
        lora=Lora(r=run.lora, alpha=2.0 * run.lora) if run.lora else Lora(),
        rollout=RolloutOpts(static_cache=run.static, compile=run.static),
    )
    tr = Trainer(build(tok, run, s.device), tok, get_task("arithmetic"), r, cfg, Path(tempfile.mkdtemp()))
    if not s.device.startswith("cuda"):  # no CUDA graphs here: the same trace without inductor's slow CPU codegen
        tr.engine.opts.compile_backend = "aot_eager"
    step_s, gen_s, lens = [], [], []
    for i in range(s.steps):
        sync(s.device)
        t0 = time.perf_counter()
        m = tr.train_step()
        sync(s.device)
        step_s.append(time.perf_counter() - t0)
        gen_s.append(m["time/generate"])
        lens.append(m["length/mean"])
        print(
            f"  {run.name} step {i + 1}: {step_s[-1]:.2f} s, generate {gen_s[-1]:.2f} s, mean length {lens[-1]:.1f}",
            flush=True,
        )
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
    args = GRPOConfig(
        output_dir=tempfile.mkdtemp(),
        per_device_train_batch_size=s.prompts * s.group,
        num_generations=s.group,
        gradient_accumulation_steps=1,
        max_completion_length=s.max_new,
        learning_rate=1e-6,
        lr_scheduler_type="constant",
        warmup_steps=0,
        max_steps=s.steps,
        beta=0.0,
        loss_type="grpo",
        temperature=1.0,
        report_to="none",
        logging_steps=1,
        save_strategy="no",
        seed=0,
        bf16=run.precision != "fp32",
        use_cpu=not s.device.startswith("cuda"),
        shuffle_dataset=False,
        dataloader_num_workers=0,
    )
    trainer = GRPOTrainer(
        model=model, reward_funcs=rand_reward, args=args, train_dataset=data, processing_class=tok, callbacks=[Clock()]
    )
    trainer.train()
    lens = [h["completions/mean_length"] for h in trainer.state.log_history if "completions/mean_length" in h]
    return {"step": step_s, "gen": gen_s, "len": lens}


def summarise(run: Run, raw: dict, s: Setup) -> dict:
    import statistics
    import torch

    k = slice(min(s.warmup, len(raw["step"]) - 1), None)  # medians after the warm-up steps
    step, gen, length = (statistics.median(raw[x][k]) for x in ("step", "gen", "len"))
    cuda = s.device.startswith("cuda")
    return {
        **dataclasses.asdict(run),
        "s_per_step": step,
        "s_generate": gen,
        "s_update": step - gen,
        "mean_new_tokens": length,
        "gen_tokens_per_s": length * s.prompts * s.group / gen,
        "peak_mem_gb": torch.cuda.max_memory_allocated() / 2**30 if cuda else None,
        "raw": raw,
    }


def child(name: str, setup: str, out: str) -> None:
    """Measure one row and write it to ``out``; an exception is the row's result, never a crash of the table."""
    s = Setup(**json.loads(setup))
    run = next(r for r in plan_runs(s.smoke, "") if r.name == name)
    try:
        row = summarise(run, (run_reasonrl if run.fw == "reasonrl" else run_trl)(run, s), s)
    except Exception as e:  # noqa: BLE001 - recorded (type, message, traceback) as this row's error
        import traceback

        message = (str(e).strip().splitlines() or [""])[0][:300]
        row = {
            **dataclasses.asdict(run),
            "error": f"{type(e).__name__}: {message}",
            "traceback": traceback.format_exc()[-4000:],
        }
    Path(out).write_text(json.dumps(row))


# ------------------------------------------------------------------ the table (the parent process)
def row_of(run: Run, returncode: int, written: str | None, stderr: str) -> dict:
    """The row a child wrote (its figures or its exception), else its death as the row's error."""
    if written:
        return json.loads(written)
    lines = [x for x in stderr.strip().splitlines() if x.strip()]
    how = f"killed by signal {-returncode}" if returncode < 0 else f"exit code {returncode}"
    last = lines[-1].strip()[:300] if lines else "no output"
    return {**dataclasses.asdict(run), "error": f"process died ({how}): {last}"}


def run_row(run: Run, s: Setup, timeout: float) -> dict:
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "row.json"
        cmd = [
            sys.executable,
            __file__,
            "--child",
            run.name,
            "--setup",
            json.dumps(dataclasses.asdict(s)),
            "--out",
            str(out),
        ]
        try:
            proc = subprocess.run(cmd, stderr=subprocess.PIPE, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {**dataclasses.asdict(run), "error": f"timed out after {timeout:.0f} s"}
        return row_of(run, proc.returncode, out.read_text() if out.exists() else None, proc.stderr)


def ratios(rows: list[dict]) -> dict:
    """TRL / reasonrl seconds per step (> 1: reasonrl faster) and reasonrl / TRL peak memory, within
    one precision and shape, full fine-tuning against full fine-tuning."""
    ok = [r for r in rows if "error" not in r and "skipped" not in r]
    trl = {(r["precision"], r["shape"]): r for r in ok if r["fw"] == "trl"}
    out = {}
    for r in ok:
        peer = trl.get((r["precision"], r["shape"]))
        if r["fw"] == "reasonrl" and peer and r["lora"] == peer["lora"]:
            out[r["name"]] = {
                "speedup_vs_trl": peer["s_per_step"] / r["s_per_step"],
                "memory_vs_trl": (r["peak_mem_gb"] / peer["peak_mem_gb"]) if r["peak_mem_gb"] else None,
            }
    return out


def table(rows: list[dict], rat: dict) -> str:
    lines = [
        "| run | precision | s/step | generate s | new tokens/s | update s | peak GB | TRL s/step / this | "
        "this GB / TRL GB |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        head = f"| {r['name']} | {PRECISIONS[r['precision']]} |"
        if "error" in r or "skipped" in r:
            why = f"error: {r['error']}" if "error" in r else f"skipped: {r['skipped']}"
            lines.append(f"{head} {why} | | | | | | |")
            continue
        q = rat.get(r["name"], {})
        mem = "n/a" if r["peak_mem_gb"] is None else f"{r['peak_mem_gb']:.1f}"
        sp = f"{q['speedup_vs_trl']:.2f}x" if q else ""
        mr = f"{q['memory_vs_trl']:.2f}x" if q.get("memory_vs_trl") else ""
        lines.append(
            f"{head} {r['s_per_step']:.2f} | {r['s_generate']:.2f} | {r['gen_tokens_per_s']:,.0f} | "
            f"{r['s_update']:.2f} | {mem} | {sp} | {mr} |"
        )
    return "\n".join(lines)


def plan_runs(smoke: bool, only: str) -> list[Run]:
    if smoke:  # every row, tiny shapes: the script's code paths, not its figures
        return [dataclasses.replace(r, shape="smoke", lora=min(r.lora, 4)) for r in RUNS]
    runs = [r for r in RUNS if not only or r.name in only.split(",")]
    unknown = set(only.split(",")) - {r.name for r in RUNS} if only else set()
    if unknown:
        raise SystemExit(f"gpu_bench.py --only: unknown runs {sorted(unknown)}; known: {[r.name for r in RUNS]}")
    return runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--smoke", action="store_true", help="CPU, tiny shapes, one step, every row")
    ap.add_argument("--only", default="", help="comma-separated run names (default: all)")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2, help="steps left out of the medians")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds a row may take")
    ap.add_argument("--json", default=None, help="default: benchmarks/results/gpu_bench[_smoke].json")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--setup", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child(a.child, a.setup, a.out)
    import torch

    if not a.smoke and not torch.cuda.is_available():
        raise SystemExit("gpu_bench.py: no CUDA device (use --smoke to run the script's paths on a CPU)")
    s = (
        Setup(device="cpu", prompts=2, group=2, max_new=8, steps=1, warmup=0, smoke=True)
        if a.smoke
        else Setup(device="cuda", steps=a.steps, warmup=a.warmup)
    )
    has_trl = importlib.util.find_spec("trl") is not None
    t0, rows = time.perf_counter(), []
    for run in plan_runs(a.smoke, a.only):
        print(f"{run.name} ...", flush=True)
        rows.append(
            {**dataclasses.asdict(run), "skipped": "TRL is not installed (pip install -e '.[trl]')"}
            if run.fw == "trl" and not has_trl
            else run_row(run, s, a.timeout)
        )
    rat = ratios(rows)
    print(table(rows, rat))
    wall = time.perf_counter() - t0
    print(f"wall time {wall:.0f} s on {torch.cuda.get_device_name() if s.device == 'cuda' else 'cpu'}")
    path = Path(a.json or Path(__file__).parents[1] / "results" / f"gpu_bench{'_smoke' if s.smoke else ''}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {"setup": dataclasses.asdict(s), "runs": rows, "ratios": rat, "wall_s": wall, "torch": torch.__version__},
            indent=1,
        )
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
