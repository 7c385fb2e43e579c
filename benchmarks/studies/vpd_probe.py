"""What VPD's own signals look like on a run: per step, the student's and the feedback-conditioned
teacher's accuracy, the controller's measured KL and beta, the E-step and M-step terms, seconds.

Reads one or more finished ``reasonrl train --recipe vpd`` run folders (``metrics.jsonl``), prints a
table and writes it as JSON:

    reasonrl train --recipe vpd --steps 4 --out runs/vpd_probe lora.r=8 prompts_per_step=4 \
        eval_every=0 final_eval_problems=0 save_every=0
    python benchmarks/studies/vpd_probe.py runs/vpd_probe --out benchmarks/results/vpd/probe.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from reasonrl.loop.tracking import read_metrics

COLUMNS = (
    "step",
    "accuracy",
    "vpd/teacher_accuracy",
    "vpd/kl_measured",
    "vpd/beta",
    "vpd/beta_next",
    "vpd/e_pg_term",
    "vpd/e_kl_term",
    "vpd/m_loss_term",
    "vpd/feedback_on_wrong",
    "seconds",
)


def probe(run_dir: Path) -> list[dict[str, float]]:
    rows = []
    for r in read_metrics(run_dir / "metrics.jsonl"):
        row = {k: r.get(k) for k in COLUMNS if k != "seconds"}
        row["seconds"] = sum(v for k, v in r.items() if k.startswith("time/"))
        rows.append(row)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", type=Path, nargs="+", help="vpd run folders")
    ap.add_argument("--out", type=Path, help="write the table as JSON here")
    args = ap.parse_args()
    report = {}
    for run in args.runs:
        rows = probe(run)
        report[str(run)] = rows
        print(run)
        print(" ".join(f"{c.split('/')[-1][:12]:>12}" for c in COLUMNS))
        for row in rows:
            print(" ".join(f"{row[c]:>12.4g}" if isinstance(row[c], (int, float)) else f"{'-':>12}" for c in COLUMNS))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
