"""The weak drafter's accuracy (the ``drafts`` recipe's draft source; spec distill-and-data.md 9 (b) 1).

Samples ``--samples`` drafts (T = 0.8, top-p 0.95, the spec's) for the first ``--problems`` train
problems of arithmetic, judges each with the verifier, and reports draft accuracy, the quasi-only
share (right last number, no ``A:`` line) and per problem the share with a definitely wrong draft
and with only correct ones; also the drafter's greedy pass@1 on held-out problems, and the learner's
(default: the shipped base) greedy pass@1 on the plain prompts and in the template with ``N/A``. Make the drafter
first (the ``tiny`` size, briefly warm-started), then:

    reasonrl pretrain --size tiny --steps 60 --eval-every 20 --eval-problems 100 --out runs/drafter60
    python benchmarks/studies/drafter.py runs/drafter60 --out benchmarks/results/drafts/drafter60.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from reasonrl.data.draft_task import DraftTask
from reasonrl.data.drafter import drafter_summary, make_drafts
from reasonrl.eval.runner import EvalConfig, evaluate_model
from reasonrl.models import load_model
from reasonrl.tasks import get_task


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("drafter", help="the drafter's HF model directory")
    ap.add_argument("--problems", type=int, default=256)
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--eval-problems", type=int, default=200)
    ap.add_argument(
        "--learner", default="base", help="also: this learner's greedy pass@1, plain and in the N/A template"
    )
    ap.add_argument("--out", type=Path, help="write the table as JSON here")
    args = ap.parse_args()
    model, tok = load_model(args.drafter)
    task = get_task("arithmetic")
    row = drafter_summary(make_drafts(model, tok, task, args.problems, args.samples, seed=0))
    greedy, _ = evaluate_model(model, tok, task, EvalConfig(n_problems=args.eval_problems, samples_per_problem=0))
    row.update(
        drafter=args.drafter,
        greedy_pass_at_1=greedy["pass@1"],
        greedy_format_rate=greedy["format_rate"],
        samples_per_problem=args.samples,
        temperature=0.8,
        top_p=0.95,
    )
    learner, ltok = load_model(args.learner)
    for name, t in (("plain", task), ("na_template", DraftTask(task, None, "no_draft"))):
        res, _ = evaluate_model(learner, ltok, t, EvalConfig(n_problems=args.eval_problems, samples_per_problem=0))
        row[f"learner_pass_at_1_{name}"] = res["pass@1"]
    row["learner"] = args.learner
    for k, v in row.items():
        print(f"{k:28} {v:.4f}" if isinstance(v, float) else f"{k:28} {v}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(row, indent=2))


if __name__ == "__main__":
    main()
