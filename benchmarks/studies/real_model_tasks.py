"""Which task can SmolLM2-135M-Instruct learn on (issue 42 item 2): greedy held-out pass@1 of task candidates,
each read by the final_number reader (reasonrl.rewards.answers.extract_final_number), rendered with the model's chat
template and a system prompt, generated through the engine training uses.

    OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/studies/real_model_tasks.py --problems 64 \\
        --outputs runs/real_model_tasks.jsonl --out benchmarks/results/real_model/tasks.json
    python benchmarks/studies/real_model_tasks.py --summarise runs/real_model_tasks.jsonl --out ...   # the table again

The outputs file keeps every completion (what the model really writes).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

MODEL = "smollm2-135m-instruct"
TUTOR = (
    "You are a careful math tutor. Solve the problem step by step, then give the final answer as a number inside "
    "<answer></answer>, for example <answer>42</answer>."
)
SHORT = (
    "You are a helpful assistant. Answer the question with one short calculation, then write the answer as a "
    "number inside <answer></answer>."
)  # word_math's default system prompt
EXAMPLE = (
    "Solve the math word problem. Write the calculation, for example 3 + 4 = 7, then the final answer inside "
    "<answer></answer>."
)
# (task, options); rg tasks get the system prompt from the formatter, word_math carries its own
CANDIDATES = [
    ("word_math", {"system_prompt": TUTOR}),
    ("rg:chain_sum", {"min_terms": 2, "max_terms": 3, "max_digits": 2}),
    (
        "rg:basic_arithmetic",
        {
            "min_terms": 2,
            "max_terms": 2,
            "max_digits": 2,
            "operators": ["+", "-"],
            "allow_parentheses": False,
            "allow_negation": False,
        },
    ),
    ("word_math", {"steps": 2, "system_prompt": TUTOR}),
    ("rg:leg_counting", {"min_animals": 1, "max_animals": 3, "max_instances": 5}),
    ("rg:simple_equations", {"min_terms": 2, "max_terms": 2, "max_value": 20}),
    ("word_math", {"system_prompt": SHORT}),
    ("word_math", {"system_prompt": EXAMPLE}),
]
BUDGET = 128


def generate(problems: int, outputs: Path) -> None:
    import torch

    from reasonrl.models import load_model
    from reasonrl.models.chat import PromptFormatter
    from reasonrl.rollout import SamplingParams, engine_for
    from reasonrl.tasks import get_task, take_items

    torch.manual_seed(0)
    model, tok = load_model(MODEL)
    fmt = PromptFormatter.build(tok, model, "chat", system_prompt=TUTOR)
    engine = engine_for(model, tok, formatter=fmt, max_rows=64)
    for name, opts in CANDIDATES:
        task = get_task(name, **{**opts, **({"answer": "final_number"} if name.startswith("rg:") else {})})
        items = take_items(task, "test", problems)
        start = time.perf_counter()
        ro = engine.generate(
            fmt.render_all([it.prompt for it in items]), 1, SamplingParams(temperature=0, max_new_tokens=BUDGET)
        )
        seconds = time.perf_counter() - start
        with outputs.open("a") as f:
            for it, text, n in zip(items, ro.texts, ro.lengths.tolist()):
                f.write(
                    json.dumps(
                        {
                            "task": name,
                            "opts": opts,
                            "prompt": it.prompt,
                            "answer": it.answer,
                            "completion": text,
                            "length": n,
                            "seconds": seconds,
                        }
                    )
                    + "\n"
                )
        print(name, opts, f"{seconds:.0f} s", flush=True)


def summarise(outputs: Path) -> list[dict]:
    """One row per candidate: pass@1 by the final_number reader, mean length, share at the budget, tag use."""
    from reasonrl.rewards.answers import extract_final_number, normalize_number

    groups: dict[str, list[dict]] = defaultdict(list)
    for line in outputs.read_text().splitlines():
        row = json.loads(line)
        groups[json.dumps([row["task"], row["opts"]])].append(row)
    table = []
    for key, rows in groups.items():
        task, opts = json.loads(key)
        right = [extract_final_number(r["completion"]) == normalize_number(r["answer"]) for r in rows]
        table.append(
            {
                "task": task,
                "options": opts,
                "problems": len(rows),
                "pass@1": sum(right) / len(rows),
                "mean_length": sum(r["length"] for r in rows) / len(rows),
                "at_budget": sum(r["length"] >= BUDGET for r in rows) / len(rows),
                "answer_tag_closed": sum("</answer>" in r["completion"] for r in rows) / len(rows),
            }
        )
    return table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problems", type=int, default=64)
    ap.add_argument("--outputs", type=Path, default=Path("runs/real_model_tasks.jsonl"))
    ap.add_argument("--summarise", type=Path, help="only summarise an outputs file written before")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/real_model/tasks.json"))
    args = ap.parse_args()
    outputs = args.summarise or args.outputs
    if not args.summarise:
        outputs.parent.mkdir(parents=True, exist_ok=True)
        outputs.unlink(missing_ok=True)
        generate(args.problems, outputs)
    table = summarise(outputs)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "model": MODEL,
                "budget": BUDGET,
                "reader": "final_number",
                "rows": table,
                "threads": os.environ.get("OMP_NUM_THREADS", "torch default"),
                "command": "python benchmarks/studies/real_model_tasks.py " + " ".join(sys.argv[1:]),
            },
            indent=2,
        )
        + "\n"
    )
    for r in table:
        print(
            f"{r['task']:22s} {json.dumps(r['options'])[:70]:70s} pass@1 {r['pass@1']:.3f}  "
            f"len {r['mean_length']:.1f}  at budget {r['at_budget']:.0%}"
        )


if __name__ == "__main__":
    main()
