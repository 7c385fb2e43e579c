"""reasonrl with the vLLM engine vs reasonrl's own engine vs TRL's GRPOTrainer without and with vLLM (issue 43).

Four arms, each in a fresh process of this script (``--arm``; its peak RSS is the process's own, vLLM
included, since every engine runs in the trainer's process), on the same model, task, batch, lr and steps,
alternated over ``--rounds``: ``reasonrl_vllm`` (``rollout.engine=vllm``), ``reasonrl_own``
(``rollout.engine=hf``), ``trl`` (GRPOTrainer, HF ``generate``) and ``trl_vllm`` (``use_vllm=True,
vllm_mode="colocate"``; recorded as an error when it does not run on this machine). GRPO, one optimiser
step per batch, no KL, chat-templated prompts "What is a + b? Reply with the number only." (two numbers
in 2..60, a file task written by :func:`sums_task`; SmolLM2-135M-Instruct gets about a quarter right, so
groups have reward variance and both trainers update on most rows; on the arithmetic task it gets none
right, and reasonrl skips zero-advantage rows while TRL trains on them).
Prints a table (median s/step after warm-up, generated tok/s, generation seconds, peak RSS) with the
machine's load average before each arm, and writes ``benchmarks/results/vllm/vs_trl.json`` with
``reasonrl_vllm_s_per_step``, ``reasonrl_own_s_per_step``, ``trl_s_per_step``, ``trl_vllm_s_per_step``
and the ratios the issue's goal reads (>= 3x TRL without vLLM; no slower than TRL with vLLM).

Run in the vLLM environment (docs/generator.md): ``python benchmarks/speed/bench_vllm.py --model
smollm2-135m-instruct --engine vllm`` (a preset name, a model folder, or ``base``). Timings are reported,
never asserted; rerun when the machine is quiet.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch


ARMS = ("reasonrl_vllm", "reasonrl_own", "trl", "trl_vllm")
OUT = "benchmarks/results/vllm/vs_trl.json"


class _Timed:
    """Wraps a callable (a model's ``generate``, vLLM's ``sync_weights``) to time it without touching TRL
    (bench_vs_trl.py had it until its phase clocks replaced it; this script kept importing it from there)."""

    def __init__(self, fn):
        self.fn, self.seconds = fn, []

    def __call__(self, *args, **kwargs):
        t0 = time.perf_counter()
        out = self.fn(*args, **kwargs)
        self.seconds.append(time.perf_counter() - t0)
        return out


def model_dir(name: str) -> str | None:
    """``base`` -> None (the shipped model); a folder as it is; a preset name -> its folder in the preset
    cache (``$REASONRL_HOME/models/<name>``, ``reasonrl models get``) or ``$REASONRL_SMOLLM2_DIR``."""
    if name == "base":
        return None
    if os.path.isdir(name):
        return name
    home = Path(os.environ.get("REASONRL_HOME") or Path.home() / ".cache" / "reasonrl")
    for path in (home / "models" / name, os.environ.get("REASONRL_SMOLLM2_DIR")):
        if path and (Path(path) / "config.json").is_file():
            return str(path)
    raise SystemExit(f"model {name!r}: not a folder and not in the preset cache; `reasonrl models get {name}` first")


def clean_dir(src: str | None, out: Path) -> str | None:
    """The model folder as links, with a GGUF ``quantization_config`` left in config.json dropped (vLLM,
    which TRL's colocate mode starts from the folder, refuses it; the weights are plain float32)."""
    if src is None:
        return None
    out.mkdir(parents=True, exist_ok=True)
    for f in Path(src).iterdir():
        if f.name != "config.json":
            (out / f.name).symlink_to(f.resolve())
    cfg = json.loads((Path(src) / "config.json").read_text())
    cfg.pop("quantization_config", None)
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    return str(out)


def sums_task():
    """The benchmark's task: 400 seeded sums as a JSONL file task (numeric reward on the last number)."""
    import random

    from reasonrl.tasks import get_task

    path, rng = Path(tempfile.mkdtemp()) / "sums.jsonl", random.Random(0)
    rows = [(rng.randint(2, 60), rng.randint(2, 60)) for _ in range(400)]
    path.write_text(
        "".join(
            json.dumps({"prompt": f"What is {a} + {b}? Reply with the number only.", "answer": str(a + b)}) + "\n"
            for a, b in rows
        )
    )
    return get_task(str(path), reward="numeric", extract="last_number")


# ------------------------------------------------------------------ the arms (each in its own process)
def run_reasonrl(args, engine: str) -> dict:
    from reasonrl.config.train import TrainConfig
    from reasonrl.models import load_model
    from reasonrl.recipes import get_recipe
    from reasonrl.config.sections import RolloutOpts, VLLMOpts
    from reasonrl.loop.trainer import Trainer

    model, tok = load_model(model_dir(args.model))
    r = get_recipe("grpo")
    recipe = dataclasses.replace(
        r,
        group_size=args.group,
        sampling=dataclasses.replace(r.sampling, max_new_tokens=args.max_new),
        optim=dataclasses.replace(r.optim, lr=args.lr, warmup_steps=0, schedule="constant"),
    )
    cfg = TrainConfig(
        steps=args.steps,
        prompts_per_step=args.prompts,
        seed=args.seed,
        eval_every=0,
        save_every=0,
        micro_batch_size=args.micro,
        max_rows=args.prompts * args.group,
        rollout=RolloutOpts(engine=engine, vllm=VLLMOpts(dtype=args.vllm_dtype, kv_cache_gib=args.kv_gib)),
    )
    trainer = Trainer(model, tok, sums_task(), recipe, cfg, Path(tempfile.mkdtemp()))
    steps, gen, tokens, sync, trained, reward = [], [], [], [], [], []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        m = trainer.train_step()
        steps.append(time.perf_counter() - t0)
        gen.append(m["time/generate"])
        tokens.append(m["tokens/generated"])
        sync.append(m.get("time/vllm_sync", 0.0))
        trained.append(1.0 - m.get("update/rows_skipped_frac", 0.0))
        reward.append(m["reward/mean"])
    if hasattr(trainer.engine, "close"):
        trainer.engine.close()
    return {"step_s": steps, "gen_s": gen, "tokens": tokens, "sync_s": sync, "rows_trained": trained, "reward": reward}


def run_trl(args, use_vllm: bool) -> dict:
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from reasonrl.models import load_model
    from reasonrl.tasks import is_correct, take_items

    path = clean_dir(model_dir(args.model), Path(tempfile.mkdtemp()) / "model")
    model, tok = load_model(path)
    task = sums_task()
    items = take_items(task, "train", args.prompts * args.steps, seed=args.seed, unique=False)
    chat = tok.chat_template is not None  # as reasonrl's prompt.format=auto renders them
    data = Dataset.from_list(
        [
            {"prompt": [{"role": "user", "content": it.prompt}] if chat else it.prompt, "answer": it.answer}
            for it in items
        ]
    )

    def correct(prompts, completions, answer, **_):
        text = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return [float(is_correct(task.verify(c, a, {}))) for c, a in zip(text, answer)]

    step_s: list[float] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):
            self.t0 = time.perf_counter()

        def on_step_end(self, a, state, control, **kw):
            step_s.append(time.perf_counter() - self.t0)

    extra = (
        dict(
            use_vllm=True,
            vllm_mode="colocate",
            vllm_gpu_memory_utilization=args.trl_vllm_mem,
            vllm_max_model_length=min(1024, int(model.config.max_position_embeddings)),
            vllm_importance_sampling_mode="token_truncate",
            vllm_importance_sampling_clip_max=2.0,
        )
        if use_vllm
        else {}
    )
    cfg = GRPOConfig(
        output_dir=tempfile.mkdtemp(),
        per_device_train_batch_size=args.prompts * args.group,
        num_generations=args.group,
        gradient_accumulation_steps=1,
        max_completion_length=args.max_new,
        learning_rate=args.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        max_steps=args.steps,
        beta=0.0,
        loss_type="grpo",
        temperature=1.0,
        use_cpu=True,
        report_to="none",
        logging_steps=1,
        save_strategy="no",
        seed=args.seed,
        bf16=False,
        shuffle_dataset=False,
        dataloader_num_workers=0,
        **extra,
    )
    model.generate = timed = _Timed(model.generate)
    trainer = GRPOTrainer(
        model=model, reward_funcs=correct, args=cfg, train_dataset=data, processing_class=tok, callbacks=[Clock()]
    )  # with vLLM: started from model.name_or_path, the clean folder
    sync = None
    if use_vllm:  # TRL's vLLM generation and weight sync, timed in place
        vg = trainer.vllm_generation
        vg.generate, vg.sync_weights = timed, sync = _Timed(vg.generate), _Timed(vg.sync_weights)
    trainer.train()
    logs = [h for h in trainer.state.log_history if "completions/mean_length" in h]
    tokens = [h["completions/mean_length"] * args.prompts * args.group for h in logs]
    return {
        "step_s": step_s,
        "gen_s": timed.seconds,
        "tokens": tokens,
        "sync_s": [] if sync is None else sync.seconds,
        "reward": [h.get("reward", float("nan")) for h in logs],
    }


def arm_main(args) -> None:
    """One arm in this process; its result (and this process's peak RSS) as JSON on stdout's last line."""
    if args.threads:
        torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    try:
        out = (
            run_reasonrl(args, "vllm" if args.arm == "reasonrl_vllm" else "hf")
            if args.arm.startswith("reasonrl")
            else run_trl(args, use_vllm=args.arm == "trl_vllm")
        )
    except Exception as err:  # noqa: BLE001 - reported in the table and the JSON, e.g. TRL's colocate mode on this CPU
        where = [
            f"{Path(f.filename).name}:{f.lineno} {f.name}"
            for f in traceback.extract_tb(err.__traceback__)[-12:]
            if "vllm" in f.filename or "trl" in f.filename
        ][-6:]
        out = {"error": f"{type(err).__name__}: {str(err)[:400]}", "where": where}
    out.update(
        wall_s=time.perf_counter() - t0,
        peak_rss_gb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        torch_threads=torch.get_num_threads(),
    )
    print("ARM-RESULT " + json.dumps(out), flush=True)


# ------------------------------------------------------------------ the driver
def load_avg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def run_arm(arm: str, argv: list[str]) -> dict:
    """``arm`` in a fresh process of this script; its result with the load average before it started."""
    load = load_avg()
    cmd = [sys.executable, __file__, "--arm", arm, *argv]
    done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
    line = next((x for x in reversed(done.stdout.splitlines()) if x.startswith("ARM-RESULT ")), None)
    if line is None:
        return {"error": f"exit {done.returncode}: {done.stderr[-600:]}", "load_before": load}
    return {**json.loads(line[len("ARM-RESULT ") :]), "load_before": load, "load_after": load_avg()}


def summary(runs: list[dict], warmup: int) -> dict:
    """Medians over the timed steps of every round (the first ``warmup`` steps of each run left out)."""
    ok = [r for r in runs if "error" not in r and len(r["step_s"]) > warmup]
    if not ok:
        return {"error": next((r["error"] for r in runs if "error" in r), "no timed steps")}
    step = [s for r in ok for s in r["step_s"][warmup:]]
    gen = [s for r in ok for s in r["gen_s"][warmup:]] or [float("nan")]
    tok = [t for r in ok for t in r["tokens"][warmup:]]
    sync = [s for r in ok for s in r["sync_s"][warmup:] if s]
    return {
        "s_per_step": statistics.median(step),
        "s_generate": statistics.median(gen),
        "gen_tokens_per_s": statistics.median(tok) / statistics.median(gen),
        "tokens_per_step": statistics.median(tok),
        "s_sync": statistics.median(sync) if sync else None,
        "peak_rss_gb": max(r["peak_rss_gb"] for r in ok),
        "n_steps_timed": len(step),
        "reward_mean": statistics.fmean(x for r in ok for x in r.get("reward", [])) if ok[0].get("reward") else None,
        "rows_trained_frac": statistics.fmean(x for r in ok for x in r["rows_trained"])
        if "rows_trained" in ok[0]
        else None,
    }


def report(results: dict[str, list], args, argv: list[str]) -> dict:
    agg = {arm: summary(runs, args.warmup) for arm, runs in results.items()}
    s = {arm: agg[arm].get("s_per_step") for arm in ARMS}
    ratio = lambda a, b: None if s[a] is None or s[b] is None else s[a] / s[b]  # noqa: E731
    out = {
        "command": "python benchmarks/speed/bench_vllm.py " + " ".join(argv),
        **{f"{arm}_s_per_step": s[arm] for arm in ARMS},
        "trl_over_reasonrl_vllm": ratio("trl", "reasonrl_vllm"),
        "trl_vllm_over_reasonrl_vllm": ratio("trl_vllm", "reasonrl_vllm"),
        "own_over_reasonrl_vllm": ratio("reasonrl_own", "reasonrl_vllm"),
        "median": agg,
        "runs": results,
        "settings": {k: v for k, v in vars(args).items() if k not in ("arm", "json")},
        "machine": {"cpus": os.cpu_count(), "torch": torch.__version__},
    }
    print(
        f"{'arm':<15}{'s/step':>9}{'s gen':>8}{'gen tok/s':>11}{'tok/step':>10}{'s sync':>8}{'peak GB':>9}  load before"
    )
    for arm in ARMS:
        a, loads = agg[arm], [r.get("load_before") for r in results[arm]]
        if "error" in a:
            print(f"{arm:<15}  not run: {a['error'][:160]}")
            continue
        fmt = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
        print(
            f"{arm:<15}{a['s_per_step']:>9.2f}{a['s_generate']:>8.2f}{a['gen_tokens_per_s']:>11.1f}"
            f"{a['tokens_per_step']:>10.0f}{fmt(a['s_sync']):>8}{a['peak_rss_gb']:>9.2f}  {loads}"
        )
    for key in ("trl_over_reasonrl_vllm", "trl_vllm_over_reasonrl_vllm", "own_over_reasonrl_vllm"):
        if out[key] is not None:
            print(f"{key}: {out[key]:.2f}x")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct", help="a preset name, a model folder, or base")
    ap.add_argument("--engine", default="vllm", choices=["vllm"], help="the engine measured against the others")
    ap.add_argument("--arms", default=",".join(ARMS))
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--max-new", type=int, default=64)
    ap.add_argument("--micro", type=int, default=8)
    ap.add_argument("--lr", type=float, default=1e-6)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0, help="torch threads in every arm (0: torch's default)")
    ap.add_argument("--vllm-dtype", default="float32", help="rollout.vllm.dtype of the reasonrl_vllm arm")
    ap.add_argument("--kv-gib", type=float, default=1.0)
    ap.add_argument("--trl-vllm-mem", type=float, default=0.2, help="TRL's vllm_gpu_memory_utilization (CPU: of RAM)")
    ap.add_argument("--arm", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--json", default=OUT)
    args = ap.parse_args()
    if args.arm:
        return arm_main(args)
    argv = [a for a in sys.argv[1:]]
    results: dict[str, list] = {arm: [] for arm in ARMS}
    for _ in range(args.rounds):
        for arm in args.arms.split(","):
            results[arm].append(run_arm(arm, argv))
            print(
                arm,
                {
                    k: v
                    for k, v in results[arm][-1].items()
                    if k not in ("step_s", "gen_s", "tokens", "sync_s", "reward", "rows_trained")
                },
                flush=True,
            )
    out = report(results, args, argv)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
