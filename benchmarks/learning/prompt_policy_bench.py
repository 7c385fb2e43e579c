"""Prompt-policy RL on the tiny model (issue #30; spec envs-selfplay-eval.md 5): the worker's held-out accuracy with
the prompter's one-shot prompt (no history) as training spends worker calls, against no prompt and against each
hand-written hint (the arithmetic task's own hints, fixed), per context. Prints a table and writes JSON.

    python benchmarks/learning/prompt_policy_bench.py --steps 30                  # worker: the shipped base, frozen
    python benchmarks/learning/prompt_policy_bench.py --worker oracle --steps 30  # a synthetic worker (below)
    python benchmarks/learning/prompt_policy_bench.py --smoke                     # tiny shapes, 2 steps: the code paths
    python benchmarks/learning/prompt_policy_bench.py --worker runs/ctxbase45 --worker-template nudge --max-fragments 1
    python benchmarks/learning/prompt_policy_bench.py --merge base_seed0.json base_seed1.json base_seed2.json \
        --json base.json

The prompter is the shipped tiny reasoner trained by the ``prompt_policy`` recipe (renderer ``hints``: the digits
it writes pick the task's hints by number). ``--worker base`` is the shipped model answering greedily;
``--worker oracle`` is the spec's toy at the LM level, a worker that solves an instance of the context
``max_digits=d`` exactly when its prompt holds that instance's hint number d (1: the carries, 2: the column
count, 3: column 1's step), so the right prompt differs by context and must be learned.

``--worker DIR`` is any model directory; ``--worker-template nudge`` shows it the prompt in the hinted-prompt
format of NudgeRL's contexts (reasonrl.parts.nudge.HINT_TEMPLATE), the one a context-mix warm start
(``reasonrl pretrain --contexts all``, e.g. runs/ctxbase45) learned to read a hint in, with ``--max-fragments 1``
since that warm start only ever saw one hint at a time; the default ``plain`` puts the prompt on the line above.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from pathlib import Path

import torch

from reasonrl.config.train import TrainConfig
from reasonrl.models import build_tiny, load_model
from reasonrl.parts import PromptPolicy
from reasonrl.parts.nudge import HINT_TEMPLATE
from reasonrl.prompting import ModelWorker, PromptTask, WorkerCalls, prompter_prompt
from reasonrl.prompting.task import render
from reasonrl.recipes import get_recipe
from reasonrl.rollout import SamplingParams
from reasonrl.tasks import get_task
from reasonrl.tasks.guidance import hints
from reasonrl.loop.trainer import Trainer


class OracleWorker:
    """Solves an instance of context ``max_digits=d`` iff the prompt contains its hint number d."""

    def __init__(self, task):
        self.task = task

    def run_many(self, pairs):
        out = []
        for prompt, inst in pairs:
            need = hints(self.task, inst)[int(inst.meta["max_digits"]) - 1]
            out.append((float(need in prompt), f"{inst.key} needs hint {inst.meta['max_digits']}"))
        return out

    def run(self, prompt, inst):
        return self.run_many([(prompt, inst)])[0]


# what the worker reads: the prompter's text on the line above the instance, or in NudgeRL's hinted prompt
TEMPLATES = {
    "plain": "{prompt}\n{instance}",
    "nudge": HINT_TEMPLATE.replace("{prompt}", "{instance}").replace("{hint}", "{prompt}"),
}


def setup(a) -> tuple[Trainer, PromptTask]:
    inner = get_task("arithmetic", max_digits=a.max_digits)
    template = TEMPLATES.get(a.worker_template, a.worker_template)
    if a.smoke:
        model, tok = build_tiny("tiny", seed=0)
        worker = (
            OracleWorker(inner)
            if a.worker == "oracle"
            else ModelWorker(*build_tiny("tiny", seed=1), inner, template=template)
        )
    else:
        model, tok = load_model(a.prompter)
        worker = (
            OracleWorker(inner)
            if a.worker == "oracle"
            else ModelWorker(*load_model(a.worker), inner, template=template)
        )
    part = PromptPolicy(
        contexts=a.contexts,
        instances=a.instances,
        k_top=a.k_top,
        k_bottom=a.k_bottom,
        max_fragments=a.max_fragments,
        template=template,
        target=a.target,
    )
    task = PromptTask(
        inner,
        worker,
        contexts=a.contexts,
        instances=a.instances,
        max_fragments=a.max_fragments,
        pool=a.pool,
        seed=a.seed,
    )
    r = get_recipe("prompt_policy")
    recipe = dataclasses.replace(
        r,
        group_size=a.group,
        prompt_policy=part,
        sampling=dataclasses.replace(
            r.sampling,
            max_new_tokens=task.max_new_tokens,
            temperature=r.sampling.temperature if a.temperature is None else a.temperature,
        ),
    )
    cfg = TrainConfig(
        recipe="prompt_policy",
        task="arithmetic",
        steps=a.steps,
        prompts_per_step=len(task.contexts),
        seed=a.seed,
        eval_every=0,
        save_every=0,
        final_eval_problems=0,
    )
    return Trainer(model.train(), tok, task, recipe, cfg, Path(a.runs) / f"{a.worker}-{a.seed}"), task


def held_out(task: PromptTask, prompt_of, n: int) -> dict[str, float]:
    """Worker accuracy per context on its first ``n`` held-out instances (calls not charged to training)."""
    calls, out = WorkerCalls(), {}
    for c in task.contexts:
        insts = task.pools["test"].get(c, [])[:n]
        res = calls.run(task.worker, [(prompt_of(c, inst), inst) for inst in insts])
        out[c] = sum(s for s, _ in res) / max(len(res), 1)
    out["mean"] = sum(out[c] for c in task.contexts) / len(task.contexts)
    return out


def one_shot(trainer: Trainer, task: PromptTask) -> dict[str, str]:
    """The prompter's greedy prompt per context with an empty history."""
    with torch.no_grad():
        ro = trainer.engine.generate(
            [prompter_prompt(c, []) for c in task.contexts],
            1,
            SamplingParams(temperature=0, max_new_tokens=task.max_new_tokens),
        )
    return dict(zip(task.contexts, ro.texts))


def merge(paths: list[Path]) -> dict:
    """Seed runs of one setting side by side: per seed the held-out mean accuracy with no prompt, with the best
    hand-written hint, and with the prompter's one-shot prompt at step 0 and at the end; mean and std over seeds."""
    runs = [json.loads(p.read_text()) for p in paths]
    setting = ("worker", "steps", "worker_template", "max_fragments", "temperature", "target")  # older files: None
    if len({tuple(r["args"].get(k) for k in setting) for r in runs}) != 1:
        raise SystemExit(f"--merge: the files are not one setting {setting}: {[str(p) for p in paths]}")
    cols = {
        "none": lambda r: r["fixed"]["none"]["mean"],
        "best_hint": lambda r: r["fixed"][r["best_hint"]]["mean"],
        "one_shot_start": lambda r: r["curve"][0]["held_out"]["mean"],
        "one_shot_final": lambda r: r["curve"][-1]["held_out"]["mean"],
    }
    out = {
        "files": [str(p) for p in paths],
        "worker": runs[0]["args"]["worker"],
        "steps": runs[0]["args"]["steps"],
        "seeds": [r["args"]["seed"] for r in runs],
        "final_prompts": [r["curve"][-1]["prompts"] for r in runs],
        "train_worker_calls": runs[0]["curve"][-1]["train_worker_calls"],
    }
    for name, get in cols.items():
        vals = [get(r) for r in runs]
        out[name] = {
            "per_seed": vals,
            "mean": statistics.fmean(vals),
            "std": statistics.stdev(vals) if len(vals) > 1 else 0.0,
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worker", default="base", help="base | a model directory | oracle")
    ap.add_argument("--prompter", default="base")
    ap.add_argument("--worker-template", default="plain", help="plain | nudge | a text with {prompt} and {instance}")
    ap.add_argument("--max-fragments", type=int, default=2, help="hints a prompt may pick (digits read, in order)")
    ap.add_argument(
        "--temperature", type=float, default=None, help="the prompter's sampling temperature (default: the recipe's)"
    )
    ap.add_argument(
        "--target",
        default="mean",
        help="the distillation target: mean (the best running mean, the "
        "default since issue 41) | first_max (the first top R: the runs of 2026-12-02/05)",
    )
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--eval-every", type=int, default=10)
    ap.add_argument("--contexts", default="meta:max_digits")
    ap.add_argument("--max-digits", type=int, default=3)
    ap.add_argument("--instances", type=int, default=4)
    ap.add_argument("--k-top", type=int, default=2, help="history: best entries shown (0 and --k-bottom 0: none)")
    ap.add_argument("--k-bottom", type=int, default=2)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--pool", type=int, default=600)
    ap.add_argument("--eval-n", type=int, default=40, help="held-out instances per context")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--runs", default="runs/prompt_policy_bench")
    ap.add_argument("--json", default=None, help="default: benchmarks/results/prompt_policy/<worker>[_smoke].json")
    ap.add_argument("--smoke", action="store_true", help="fresh tiny models, 2 steps, 2 prompts x 2 instances")
    ap.add_argument("--merge", nargs="+", type=Path, help="seed JSONs of one setting -> one summary (--json)")
    a = ap.parse_args()
    if a.merge:
        summary = merge(a.merge)
        print(f"worker {summary['worker']}, {summary['steps']} steps, seeds {summary['seeds']}")
        for k in ("none", "best_hint", "one_shot_start", "one_shot_final"):
            print(f"  {k:15s} {summary[k]['mean']:.3f} +- {summary[k]['std']:.3f}  {summary[k]['per_seed']}")
        if a.json:
            Path(a.json).write_text(json.dumps(summary, indent=1))
        return
    if a.smoke:
        a.steps, a.eval_every, a.group, a.instances, a.eval_n, a.pool, a.max_digits = 2, 1, 2, 2, 3, 60, 2
    torch.set_num_threads(1)
    trainer, task = setup(a)
    t0 = time.perf_counter()
    fixed = {"none": held_out(task, lambda c, i: "", a.eval_n)}
    for k in range(1, 5):  # the task's hints by number, written by hand as a fixed prompt for every context
        fixed[f"hint {k}"] = held_out(task, lambda c, i, k=k: render("hints", str(k), task.task, i), a.eval_n)
    curve, logs = [], []
    for step in range(a.steps + 1):
        if step % a.eval_every == 0 or step == a.steps:
            texts = one_shot(trainer, task)
            acc = held_out(task, lambda c, i: task.render(texts[c], i), a.eval_n)  # noqa: B023 - called at once
            curve.append({"step": step, "train_worker_calls": task.calls.calls, "prompts": texts, "held_out": acc})
        if step < a.steps:
            m = trainer.train_step()
            logs.append({k: v for k, v in m.items() if k.startswith(("prompt_policy/", "reward/mean", "accuracy"))})
    best_hint = max((k for k in fixed if k.startswith("hint")), key=lambda k: fixed[k]["mean"])
    print(
        f"worker: {a.worker}, contexts {task.contexts}, {a.eval_n} held-out instances each, "
        f"{time.perf_counter() - t0:.0f} s"
    )
    print("| prompt | train worker calls | " + " | ".join(task.contexts) + " | mean |")
    print("|---|---|" + "---|" * (len(task.contexts) + 1))
    for name, acc in [*fixed.items(), *((f"one-shot @ step {p['step']}", p["held_out"]) for p in curve)]:
        calls = next((str(p["train_worker_calls"]) for p in curve if name == f"one-shot @ step {p['step']}"), "-")
        print(f"| {name} | {calls} | " + " | ".join(f"{acc[c]:.3f}" for c in task.contexts) + f" | {acc['mean']:.3f} |")
    print(
        f"best hand-written hint: {best_hint} ({fixed[best_hint]['mean']:.3f}); final one-shot prompts: "
        f"{curve[-1]['prompts']}"
    )
    path = Path(
        a.json
        or Path(__file__).parents[1]
        / "results"
        / "prompt_policy"
        / f"{Path(a.worker).name}{'_smoke' if a.smoke else ''}.json"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {"args": vars(a), "fixed": fixed, "best_hint": best_hint, "curve": curve, "train_log": logs}, indent=1
        )
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
