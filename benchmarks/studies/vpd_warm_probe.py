"""Does VPD's teacher adapter read feedback after its warm start (``vpd.warm_steps``)? (issue #26)

For each number of warm-start steps: a fresh LoRA student (``lora.r``) on the base, the teacher adapter
added and warm-started by ``VPD.setup_model`` exactly as a run does, then greedy accuracy on held-out
problems of (a) the teacher under VPD's feedback prompt with a wrong attempt (the demonstration with
digits changed until the verifier rejects it) and its critique, and (b) the student on the plain prompt
(unchanged by the warm start: it trains the teacher adapter alone).

    python benchmarks/studies/vpd_warm_probe.py --steps 0,100,300 --problems 200 \
        --out benchmarks/results/vpd/warm_probe.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from reasonrl.config.train import Lora
from reasonrl.models import load_model
from reasonrl.models.lora import apply_lora, use_adapter
from reasonrl.parts import VPD
from reasonrl.parts.protocol import ModelSetup
from reasonrl.parts.vpd import TEACHER
from reasonrl.parts.vpd_warm import take_feedback_items
from reasonrl.rollout import HFEngine, SamplingParams
from reasonrl.tasks import get_task, is_correct, take_items


def greedy_accuracy(model, tok, task, items) -> float:
    ro = HFEngine(model, tok).generate(
        [it.prompt for it in items], 1, SamplingParams(temperature=0.0, max_new_tokens=task.max_new_tokens)
    )
    return sum(is_correct(task.verify(t, it.answer, it.meta)) for t, it in zip(ro.texts, items)) / len(items)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="base")
    ap.add_argument("--steps", default="0,100,300", help="warm-start steps to probe, comma-separated")
    ap.add_argument("--problems", type=int, default=200)
    ap.add_argument("--lora-r", type=int, default=8)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    task = get_task("arithmetic")
    plain = take_items(task, "test", args.problems, seed=0)
    rows = []
    for n in [int(s) for s in args.steps.split(",")]:
        model, tok = load_model(args.model)
        model = apply_lora(model, Lora(r=args.lora_r, alpha=2.0 * args.lora_r), seed=0)
        part = VPD(warm_steps=n)
        t0 = time.perf_counter()
        model, warm = part.setup_model(ModelSetup(model, 0, task, tok))
        seconds = time.perf_counter() - t0
        model.eval()
        fb = take_feedback_items(task, args.problems, part.template, part.feedback, seed=0)
        with torch.no_grad():
            with use_adapter(model, TEACHER):
                teacher = greedy_accuracy(model, tok, task, fb)
            student = greedy_accuracy(model, tok, task, plain)
        rows.append(
            {
                "warm_steps": n,
                "teacher_feedback_pass@1": teacher,
                "student_plain_pass@1": student,
                "warm_seconds": seconds,
                **warm,  # setup_model's metrics: the warm-up's first and last loss (none for 0 steps)
                "problems": args.problems,
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
