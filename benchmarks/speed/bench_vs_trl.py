"""reasonrl vs TRL's GRPOTrainer on the same model, prompts, group size, lengths, lr, LoRA setting and
steps, in one process.

Two profiles. Without ``--model``: the shipped tiny base, full fine-tuning, on the built-in arithmetic
task, 16 prompts x 8 samples, <= 48 new tokens, lr 3e-5 (writes ``benchmarks/results/bench_vs_trl.json``).
With ``--model`` (a model directory, or a preset name once ``reasonrl models get`` made it): the real-model
profile, LoRA r=16 (alpha 32, all linear layers) on a chat-format arithmetic JSONL both trainers read
(``vs_trl_parts.write_chat_arithmetic``; ``--task`` takes another), 4 prompts x 8 samples, <= 64 new
tokens, lr 1e-4 (writes ``benchmarks/results/real_model/vs_trl.json``). Both: temperature 1, one optimiser
step per batch, constant lr, AdamW (0.9, 0.999), gradient clip 1, no KL, no activation checkpointing (TRL's
GRPOConfig turns it on by default; here both run without), and the frameworks alternate
(reasonrl, TRL, reasonrl, TRL, ...) so machine drift hits both alike.

Reported per framework (medians after the warm-up steps): seconds per step and its split into
generate / reward / forward / backward / rest (``vs_trl_parts.Phases``, timed from the outside),
the same in CPU seconds of the process (what counts on a machine other jobs share: the wall clock
there also counts the waits for a core), generated tokens per second of generation, peak resident memory
during training, held-out greedy pass@1 after the run's steps; and the TRL / reasonrl ratio. Timings are
reported, never asserted.

    pip install -e ".[trl]" && python benchmarks/speed/bench_vs_trl.py --steps 12 --rounds 2
    python benchmarks/speed/bench_vs_trl.py --model smollm2-135m-instruct --steps 5 --warmup 1 --rounds 2 --threads 1
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from reasonrl.config.train import TrainConfig
from reasonrl.eval.runner import EvalConfig, evaluate_model
from reasonrl.models import load_model
from reasonrl.models.chat import PromptFormatter
from reasonrl.recipes import get_recipe
from reasonrl.config.sections import Lora
from reasonrl.tasks import get_task, is_correct, take_items
from reasonrl.loop.trainer import Trainer
from vs_trl_parts import PeakRSS, Phases, step_phases, write_chat_arithmetic


@dataclasses.dataclass
class Settings:
    prompts: int
    group: int
    max_new: int
    lr: float
    lora_r: int
    task: str  # a task name, a JSONL path, or "chat_arithmetic" (written by the benchmark)
    temperature: float = 1.0
    lora_alpha: float = 32.0
    trl_micro: int = 0  # rows per TRL forward/backward (gradient accumulation; memory only); 0: all rows at once


PROFILES = {
    "tiny": Settings(prompts=16, group=8, max_new=48, lr=3e-5, lora_r=0, task="arithmetic"),
    # TRL in micro-batches of 16 rows: all 32 at once, without activation checkpointing, took 9.8 GB
    # and the shared machine's OOM killer ended it (reasonrl's own default, 64 rows on a CPU, peaked at 4.5 GB)
    "real": Settings(prompts=4, group=8, max_new=64, lr=1e-4, lora_r=16, task="chat_arithmetic", trl_micro=16),
}
CHAT_TASK_OPTIONS = {"reward": "numeric", "extract": "last_number"}


def build_task(s: Settings, folder: Path, options: dict):
    if s.task != "chat_arithmetic":
        return get_task(s.task, **options)
    train, test = write_chat_arithmetic(folder)
    return get_task(str(train), test_path=str(test), **{**CHAT_TASK_OPTIONS, **options})


def run_reasonrl(model_name, task, s: Settings, steps: int, seed: int) -> dict:
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
    import reasonrl.loop.trainer as trainer_mod

    phases, rows = Phases(), []
    with PeakRSS() as rss:
        trainer = Trainer(model, tok, task, recipe, cfg, Path(tempfile.mkdtemp()))
        b = trainer.batches
        targets = [
            (trainer_mod, "score_rows", "forward"),
            (b, "rollout", "generate"),
            (b, "reward_terms", "reward"),
            (b, "prepare", "reward"),
        ]
        with phases.wrap(targets):
            for _ in range(steps):
                t0, c0 = time.perf_counter(), time.process_time()
                m = trainer.train_step()
                wall, cpu = time.perf_counter() - t0, time.process_time() - c0
                rows.append({"tokens": m["tokens/generated"], **step_phases(wall, cpu, phases.take())})
    return {"model": trainer.model, "tok": tok, "formatter": trainer.formatter, "steps": rows, "rss": rss}


def run_trl(model_name, task, s: Settings, steps: int, seed: int) -> dict:
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    model, tok = load_model(model_name)
    items = take_items(task, "train", s.prompts * steps, seed=seed, unique=False)
    data = Dataset.from_list([{"prompt": it.prompt, "answer": it.answer} for it in items])
    phases, rows = Phases(), []

    def correct(prompts, completions, answer, **_):  # TRL's contract; conversational completions are messages
        texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
        return [float(is_correct(task.verify(t, a, {}))) for t, a in zip(texts, answer)]

    class Clock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            phases.take()
            self.t0, self.c0 = time.perf_counter(), time.process_time()

        def on_step_end(self, args, state, control, **kw):
            wall, cpu = time.perf_counter() - self.t0, time.process_time() - self.c0
            rows.append(step_phases(wall, cpu, phases.take()))

    n_rows = s.prompts * s.group
    micro = s.trl_micro or n_rows  # the batch of one generation (steps_per_generation = accumulation steps)
    args = GRPOConfig(
        output_dir=tempfile.mkdtemp(),
        per_device_train_batch_size=micro,
        num_generations=s.group,
        gradient_accumulation_steps=n_rows // micro,
        max_completion_length=s.max_new,
        learning_rate=s.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        max_steps=steps,
        beta=0.0,
        loss_type="grpo",
        temperature=s.temperature,
        top_k=0,
        use_cpu=True,
        report_to="none",
        logging_steps=1,
        save_strategy="no",
        seed=seed,
        bf16=False,
        shuffle_dataset=False,
        dataloader_num_workers=0,
        max_grad_norm=1.0,
        gradient_checkpointing=False,
    )  # TRL's default is on; reasonrl's off: like for like
    peft = (
        LoraConfig(
            r=s.lora_r, lora_alpha=s.lora_alpha, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM"
        )
        if s.lora_r
        else None
    )
    targets = [(model, "generate", "generate"), (GRPOTrainer, "_get_per_token_logps_and_entropies", "forward")]
    with PeakRSS() as rss, phases.wrap(targets):
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=phases.timed("reward", correct),
            args=args,
            train_dataset=data,
            processing_class=tok,
            callbacks=[Clock()],
            peft_config=peft,
        )
        trainer.train()
    logs = [h for h in trainer.state.log_history if "completions/mean_length" in h]
    for row, h in zip(rows, logs):
        row["tokens"] = h["completions/mean_length"] * s.prompts * s.group
    return {
        "model": trainer.model,
        "tok": tok,
        "formatter": PromptFormatter.build(tok, trainer.model, "auto"),
        "steps": rows,
        "rss": rss,
    }


def summarize(name: str, run: dict, warmup: int) -> dict:
    kept = run["steps"][warmup:]
    med = lambda key: statistics.median(r[key] for r in kept)  # noqa: E731
    out = {
        "framework": name,
        "s_per_step": med("s"),
        "cpu_s_per_step": med("cpu"),
        "n_steps_timed": len(kept),
        **{f"s_{k}": med(k) for k in ("generate", "reward", "forward", "backward", "rest")},
        **{f"cpu_s_{k}": med(f"{k}_cpu") for k in ("generate", "reward", "forward", "backward", "rest")},
        "tokens_per_step": med("tokens"),
        "gen_tokens_per_s": statistics.median(r["tokens"] / r["generate"] for r in kept),
        "gen_tokens_per_cpu_s": statistics.median(r["tokens"] / r["generate_cpu"] for r in kept),
        "peak_rss_gb": run["rss"].peak / 2**30,
        "start_rss_gb": run["rss"].start / 2**30,
        "step_seconds": [r["s"] for r in run["steps"]],
    }
    return out


def heldout(model, tok, task, formatter, problems: int, max_new: int) -> float:
    model.eval()
    ev, _ = evaluate_model(
        model,
        tok,
        task,
        EvalConfig(n_problems=problems, samples_per_problem=0, max_new_tokens=max_new),
        formatter=formatter,
    )
    return ev["pass@1"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="a model directory or preset name; none: the shipped tiny base")
    ap.add_argument("--task", default=None, help="task name or JSONL file (default: the profile's)")
    ap.add_argument("--task-opt", action="append", default=[], help="key=value for the task (repeatable)")
    for key in ("prompts", "group", "max_new", "lora_r", "trl_micro"):
        ap.add_argument(f"--{key.replace('_', '-')}", type=int, default=None)
    ap.add_argument("--lr", type=float, default=None)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--eval-problems", type=int, default=200)
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    s = dataclasses.replace(
        PROFILES["tiny" if args.model is None else "real"],
        **{
            k: v
            for k in ("prompts", "group", "max_new", "lora_r", "lr", "task", "trl_micro")
            if (v := getattr(args, k)) is not None
        },
    )
    task = build_task(s, Path(tempfile.mkdtemp()), dict(o.split("=", 1) for o in args.task_opt))
    base, base_tok = load_model(args.model)
    before = heldout(base, base_tok, task, PromptFormatter.build(base_tok, base, "auto"), args.eval_problems, s.max_new)
    del base
    results: dict[str, list] = {"reasonrl": [], "trl": []}
    for r in range(args.rounds):
        for name, fn in (("reasonrl", run_reasonrl), ("trl", run_trl)):
            load = os.getloadavg()[0]
            run = fn(args.model, task, s, args.steps, seed=r)
            row = summarize(name, run, args.warmup)
            row.update(
                heldout=heldout(run["model"], run["tok"], task, run["formatter"], args.eval_problems, s.max_new),
                round=r,
                load_before=load,
                load_after=os.getloadavg()[0],
            )
            results[name].append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "step_seconds"}), flush=True)
            del run
    report(results, args, s, before)


def report(results: dict[str, list], args, s: Settings, before: float) -> None:
    from rich.console import Console
    from rich.table import Table

    skip = ("framework", "round", "step_seconds")
    agg = {
        k: {f: statistics.median(r[f] for r in rows) for f in rows[0] if f not in skip} for k, rows in results.items()
    }
    ratio = agg["trl"]["s_per_step"] / agg["reasonrl"]["s_per_step"]
    table = Table(
        title=f"GRPO on {args.model or 'the tiny base'}, {s.prompts} prompts x {s.group} samples, <= "
        f"{s.max_new} new tokens, lora r={s.lora_r}, {args.steps} steps x {args.rounds} rounds (medians; "
        f"first {args.warmup} steps of each run not timed); held-out pass@1 before: {before:.3f}"
    )
    cols = [
        "s_per_step",
        "s_generate",
        "s_reward",
        "s_forward",
        "s_backward",
        "s_rest",
        "cpu_s_per_step",
        "cpu_s_generate",
        "cpu_s_forward",
        "cpu_s_backward",
        "gen_tokens_per_s",
        "peak_rss_gb",
        "heldout",
    ]
    table.add_column("framework")
    for c in cols:
        table.add_column(c, justify="right")
    for name, row in agg.items():
        table.add_row(name, *(f"{row[c]:.3f}" for c in cols))
    Console(width=160).print(table)
    cpu_ratio = agg["trl"]["cpu_s_per_step"] / agg["reasonrl"]["cpu_s_per_step"]
    print(f"TRL s/step / reasonrl s/step: {ratio:.2f}x (CPU seconds: {cpu_ratio:.2f}x)")
    default = (
        "benchmarks/results/bench_vs_trl.json" if args.model is None else "benchmarks/results/real_model/vs_trl.json"
    )
    out = Path(args.json or default)
    out.parent.mkdir(parents=True, exist_ok=True)
    flat = {
        "reasonrl_s_per_step": agg["reasonrl"]["s_per_step"],
        "trl_s_per_step": agg["trl"]["s_per_step"],
        "ratio_trl_over_reasonrl": ratio,
        "reasonrl_cpu_s_per_step": agg["reasonrl"]["cpu_s_per_step"],
        "trl_cpu_s_per_step": agg["trl"]["cpu_s_per_step"],
        "cpu_ratio_trl_over_reasonrl": cpu_ratio,
        **{f"{k}_{f}": agg[k][f] for k in agg for f in ("gen_tokens_per_s", "peak_rss_gb", "heldout")},
    }
    out.write_text(
        json.dumps(
            {
                "model": args.model or "shipped tiny base",
                **flat,
                "heldout_before": before,
                "median": agg,
                "per_round": results,
                "settings": {
                    **dataclasses.asdict(s),
                    "steps": args.steps,
                    "warmup": args.warmup,
                    "rounds": args.rounds,
                    "eval_problems": args.eval_problems,
                    "task_options": args.task_opt,
                    "torch_threads": torch.get_num_threads(),
                    "cpus": os.cpu_count(),
                },
                "command": "python " + " ".join(sys.argv),
                "date": time.strftime("%Y-%m-%d %H:%M"),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
