"""reasonrl vs TRL's GRPOTrainer on the same tiny model, task, batch, lr and steps, in one process.

Both start from the shipped base (or ``--model``), train GRPO on the built-in arithmetic task with
16 prompts x 8 samples per step, <= 48 new tokens, lr 3e-5, one optimiser step per batch, no KL,
and alternate (reasonrl, TRL, reasonrl, TRL, ...) so that machine drift hits both alike. Prints a
table (median seconds per step after warm-up, tokens/s, phase split, held-out greedy pass@1 after
the same number of steps, and the TRL/reasonrl ratio) and writes it as JSON. Timings are reported,
never asserted.

    pip install -e ".[trl]" && python benchmarks/bench_vs_trl.py --steps 12 --rounds 2
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from reasonrl.config import TrainConfig
from reasonrl.eval.runner import EvalConfig, evaluate_model
from reasonrl.models import load_model
from reasonrl.recipes import get_recipe
from reasonrl.tasks import get_task, is_correct, take_items
from reasonrl.trainer import Trainer

PROMPTS, G, MAX_NEW, LR = 16, 8, 48, 3e-5


def run_reasonrl(model_name: str | None, steps: int, seed: int) -> dict:
    model, tok = load_model(model_name)
    task = get_task("arithmetic")
    recipe = get_recipe("grpo")
    recipe = dataclasses.replace(recipe, group_size=G, optim=dataclasses.replace(recipe.optim, lr=LR, warmup_steps=0,
                                 schedule="constant"), sampling=dataclasses.replace(recipe.sampling, max_new_tokens=MAX_NEW))
    cfg = TrainConfig(steps=steps, prompts_per_step=PROMPTS, seed=seed, eval_every=0, save_every=0)
    rows = []
    trainer = Trainer(model, tok, task, recipe, cfg, Path(tempfile.mkdtemp()), log=rows.append)
    for _ in range(steps):
        t0 = time.perf_counter()
        m = trainer.train_step()
        m["time/step"] = time.perf_counter() - t0
        rows.append(m)
    return {"model": model, "tok": tok, "steps": rows}


class _Timed:
    """Wraps a model's ``generate`` to time TRL's generation phase without touching TRL."""

    def __init__(self, fn):
        self.fn, self.seconds, self.tokens = fn, [], []

    def __call__(self, *args, **kwargs):
        t0 = time.perf_counter()
        out = self.fn(*args, **kwargs)
        self.seconds.append(time.perf_counter() - t0)
        return out


def run_trl(model_name: str | None, steps: int, seed: int) -> dict:
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    model, tok = load_model(model_name)
    task = get_task("arithmetic")
    items = take_items(task, "train", PROMPTS * steps, seed=seed, unique=False)
    data = Dataset.from_list([{"prompt": it.prompt, "answer": it.answer} for it in items])

    def correct(prompts, completions, answer, **_):
        return [float(is_correct(task.verify(c, a, {}))) for c, a in zip(completions, answer)]

    step_times: list[float] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            step_times.append(time.perf_counter() - self.t0)

    args = GRPOConfig(output_dir=tempfile.mkdtemp(), per_device_train_batch_size=PROMPTS * G, num_generations=G,
                      gradient_accumulation_steps=1, max_completion_length=MAX_NEW, learning_rate=LR,
                      lr_scheduler_type="constant", warmup_steps=0, max_steps=steps, beta=0.0, loss_type="grpo",
                      temperature=1.0, use_cpu=True, report_to="none", logging_steps=1, save_strategy="no",
                      seed=seed, bf16=False, shuffle_dataset=False, dataloader_num_workers=0)
    timed = _Timed(model.generate)
    model.generate = timed
    trainer = GRPOTrainer(model=model, reward_funcs=correct, args=args, train_dataset=data, processing_class=tok,
                          callbacks=[Clock()])
    trainer.train()
    logs = [h for h in trainer.state.log_history if "completions/mean_length" in h]
    return {"model": model, "tok": tok, "step_times": step_times, "gen_times": timed.seconds, "logs": logs}


def summarize(name: str, step_s: list[float], gen_s: list[float], lengths: list[float], warmup: int) -> dict:
    keep = slice(warmup, None)
    med, gen = statistics.median(step_s[keep]), statistics.median(gen_s[keep])
    tokens = statistics.median(lengths[keep]) * PROMPTS * G
    return {"framework": name, "s_per_step": med, "s_generate": gen, "s_rest": med - gen,
            "tokens_per_s": tokens / med, "gen_tokens_per_s": tokens / gen, "n_steps_timed": len(step_s[keep])}


def heldout(model, tok, problems: int) -> float:
    ev, _ = evaluate_model(model, tok, get_task("arithmetic"), EvalConfig(n_problems=problems, samples_per_problem=0, max_new_tokens=MAX_NEW))
    return ev["pass@1"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--eval-problems", type=int, default=200)
    ap.add_argument("--json", default="benchmarks/results/bench_vs_trl.json")
    args = ap.parse_args()
    from transformers.utils import logging as hf_logging
    hf_logging.set_verbosity_error()
    results: dict[str, list] = {"reasonrl": [], "trl": []}
    for r in range(args.rounds):
        ours = run_reasonrl(args.model, args.steps, seed=r)
        s = ours["steps"][-args.steps:]
        row = summarize("reasonrl", [m["time/step"] for m in s], [m["time/generate"] for m in s],
                        [m["length/mean"] for m in s], args.warmup)
        row.update(heldout=heldout(ours["model"], ours["tok"], args.eval_problems), round=r)
        results["reasonrl"].append(row)
        peer = run_trl(args.model, args.steps, seed=r)
        lengths = [h["completions/mean_length"] for h in peer["logs"]]
        row = summarize("trl", peer["step_times"], peer["gen_times"], lengths, args.warmup)
        row.update(heldout=heldout(peer["model"], peer["tok"], args.eval_problems), round=r)
        results["trl"].append(row)
    report(results, args)


def report(results: dict[str, list], args) -> None:
    from rich.console import Console
    from rich.table import Table

    agg = {k: {f: statistics.median(r[f] for r in rows) for f in rows[0] if f not in ("framework", "round")}
           for k, rows in results.items()}
    ratio = agg["trl"]["s_per_step"] / agg["reasonrl"]["s_per_step"]
    table = Table(title=f"GRPO, {PROMPTS} prompts x {G} samples, <= {MAX_NEW} new tokens, {args.steps} steps x "
                        f"{args.rounds} rounds (medians; first {args.warmup} steps of each run not timed)")
    cols = ["s_per_step", "s_generate", "s_rest", "tokens_per_s", "gen_tokens_per_s", "heldout"]
    table.add_column("framework")
    for c in cols:
        table.add_column(c, justify="right")
    for name, row in agg.items():
        table.add_row(name, *(f"{row[c]:.3f}" for c in cols))
    Console(width=140).print(table)
    print(f"throughput ratio (TRL s/step / reasonrl s/step): {ratio:.2f}x")
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"per_round": results, "median": agg, "ratio_trl_over_reasonrl": ratio,
                               "settings": {"prompts": PROMPTS, "G": G, "max_new_tokens": MAX_NEW, "lr": LR,
                                            "steps": args.steps, "rounds": args.rounds, "torch_threads": torch.get_num_threads()}},
                              indent=2))


if __name__ == "__main__":
    main()
