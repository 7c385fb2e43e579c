"""The unlearnability diagnostic on the tiny reasoner's grpo runs (docs/diagnose.md).

The runs (3 seeds of grpo on arithmetic from the shipped base, 60 steps, docs/diagnose.md):

    for s in 0 1 2; do reasonrl train --steps 60 --out runs/unl/grpo-s$s seed=$s data.pool=128 \
        final_eval_problems=100 final_eval_k=16 final_eval_temperature=0.7 eval_every=0 save_every=0; done

then ``PYTHONPATH=src python benchmarks/studies/unlearnable_tiny.py RUNS/grpo-s0 RUNS/grpo-s1 RUNS/grpo-s2``:
the diagnostic (``reasonrl diagnose unlearnable`` with the same arguments), its JSON in
benchmarks/results/unlearnable/, the heatmap copied to docs/img/unlearnable_tiny.png, and a table.
``--rollouts 64 RUN ...`` gives the all-wrong-at-8 problems a chance of a gradient (tiny_grpo_r64.json,
docs/img/unlearnable_tiny_r64.png).
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

from reasonrl.diagnostics.unlearnable_report import DiagnoseConfig, diagnose_unlearnable  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "unlearnable" / "tiny_grpo.json"
IMG = ROOT / "docs" / "img" / "unlearnable_tiny.png"


def main(runs: list[str], rollouts: int = 8) -> None:
    """The diagnostic with ``rollouts`` per problem (``--rollouts N`` first on the command line; 8 writes
    tiny_grpo.json, any other N tiny_grpo_r{N}.json and its own heatmap)."""
    t0 = time.perf_counter()
    out = OUT if rollouts == 8 else OUT.with_name(f"tiny_grpo_r{rollouts}.json")
    img = IMG if rollouts == 8 else IMG.with_name(f"unlearnable_tiny_r{rollouts}.png")
    cfg = DiagnoseConfig(rollouts=rollouts, per_class=100, seed=0)
    res = diagnose_unlearnable(runs, None, out, cfg)
    img.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(out.with_suffix(".png"), img)
    print("| what | value |\n|---|---|")
    for name, n in res["counts"].items():
        print(f"| class {name} | {n} |")
    print(f"| easy and unlearnable | {res['easy_and_unlearnable']} |")
    print(f"| prompts with a gradient | {len(res['heatmap_prompts'])} |")
    print(f"| prompts dropped (all rollouts agree) | {len(res['dropped'])} |")
    for pair, v in res["block_means"].items():
        print(f"| mean cosine {pair} | {'-' if v is None else f'{v:.4f}'} |")
    for block, v in res["block_mean_similarity"].items():
        print(f"| {block}: mean similarity to the rest | {'-' if v is None else f'{v:.4f}'} |")
    print(f"\n{out}\n{img}\n{time.perf_counter() - t0:.0f} s")


def classes_only(runs: list[str]) -> None:
    """The classes alone (no model): ``--classes-only RUN ...``."""
    import json

    from reasonrl.diagnostics.runs import load_run, pass_rates
    from reasonrl.diagnostics.unlearnable import classify

    initial, finals, rewards = pass_rates([load_run(r) for r in runs])
    classes = classify(initial, finals, rewards)
    out = OUT.with_name("tiny_grpo_classes.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "runs": runs,
                "counts": {c: len(v) for c, v in classes.items()},
                "classes": classes,
                "initial": initial,
                "finals": finals,
            },
            indent=1,
        )
    )
    print("| class | problems |\n|---|---|")
    for c, v in classes.items():
        print(f"| {c} | {len(v)} |")
    print(f"| held-out problems | {len(initial)} |\n{out}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--classes-only"]:
        classes_only(sys.argv[2:])
    elif sys.argv[1:2] == ["--rollouts"]:
        main(sys.argv[3:], int(sys.argv[2]))
    else:
        main(sys.argv[1:])
