"""How well a model reads the self-teacher contexts: greedy held-out accuracy with each context in
its prompt, written as the recipe parts write it (the plain prompt is the baseline). A teacher
under a context is only useful when it beats the plain prompt; prints a table and writes JSON.

    python benchmarks/studies/context_probe.py [--model DIR] [--n 200] [--out benchmarks/results/context_probe.json]
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

from reasonrl.models import load_model
from reasonrl.rollout import HFEngine, SamplingParams
from reasonrl.tasks import get_task
from reasonrl.loop.warmstart import with_context


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None, help="model directory (default: the shipped base)")
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--out", default="benchmarks/results/context_probe.json")
    args = ap.parse_args()
    model, tok = load_model(args.model)
    task = get_task("arithmetic")
    items = [it for _, it in zip(range(args.n), task.iter_items("test", 0))]
    engine, sp = HFEngine(model, tok), SamplingParams(temperature=0, max_new_tokens=task.max_new_tokens)
    rows = {}
    for kind in ("plain", "solution", "hint", "correction", "redirect"):
        t0 = time.perf_counter()
        shown = [
            it if kind == "plain" else with_context(task, it, kind, random.Random(i)) for i, it in enumerate(items)
        ]
        ro = engine.generate([it.prompt for it in shown], 1, sp)
        # a redirect's completion continues the kept prefix: the answer is judged on prefix + completion
        texts = [
            (s.prompt[len(it.prompt) :].split("</verdict>\n")[-1] if kind == "redirect" else "") + t
            for s, it, t in zip(shown, items, ro.texts)
        ]
        acc = sum(task.verify(t, it.answer, it.meta) for t, it in zip(texts, items)) / len(items)
        rows[kind] = {"accuracy": acc, "seconds": time.perf_counter() - t0}
    print(f"model: {args.model or 'shipped base'}, {args.n} held-out problems, greedy")
    print("| context | accuracy |\n|---|---|")
    for kind, r in rows.items():
        print(f"| {kind} | {r['accuracy']:.3f} |")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"model": args.model or "shipped base", "n": args.n, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
