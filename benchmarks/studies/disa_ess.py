"""DISA's partition estimate and its effective sample size against beta and the proposal model (issue #33).

For the first P distinct train problems (the `disa` recipe's data.pool), N proposals per problem from each
proposal model are scored once under the reference (the shipped base) and by the disa recipe's reward (the
stage `reasonrl disa estimate` runs: the run's pool, prompts, budget and proposal seeds); log Z_hat and
both ESS (of the importance weights pi_ref/mu, and of the tilted terms exp(L_ref - L_mu + beta r)) are then
computed for every beta from the same samples. Proposals: the reference itself (DISA's default), the
shipped stronger teacher (the paper's "proposal strength" knob) and optionally any model folder.

    python benchmarks/studies/disa_ess.py                            # P = 128, N = 8, beta in 1, 5, 15, 30
    python benchmarks/studies/disa_ess.py --smoke                    # P = 4, N = 2, beta in 1, 15, the reference only

Prints a table; JSON to benchmarks/results/distmatch/disa_ess.json (--smoke: a temporary file).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch

from reasonrl.commands.disa import stage_context
from reasonrl.config.train import DataOpts, TrainConfig, apply_overrides
from reasonrl.data.partition import ess_histogram, estimate_rows, summary
from reasonrl.distill.teacher import BUILTIN, resolve_teacher_path
from reasonrl.recipes import get_recipe


def run(pool: int, n: int, betas: list[float], proposals: dict[str, str], temperature: float, seed: int) -> dict:
    """The disa run's offline stage (`reasonrl disa estimate`: its pool, formatter, budget and reward) once per
    proposal model, log Z_hat for every beta from the same samples."""
    recipe = apply_overrides(
        get_recipe("disa"), {"balance": {"proposals": n}, "sampling": {"temperature": temperature}}
    )
    cfg = TrainConfig(recipe="disa", task="arithmetic", seed=seed, data=DataOpts(pool=pool))
    out: dict = {"pool": pool, "proposals_per_prompt": n, "temperature": temperature, "results": []}
    by_proposal = {}
    for label, name in proposals.items():
        ctx, _ = stage_context(cfg, recipe, None if name == "base" else name)
        scores = recipe.balance.offline_scores(ctx)
        by_proposal[label] = scores
        for beta in betas:
            rows = estimate_rows(list(ctx.pool), *scores, beta)
            out["results"].append(
                {
                    "proposal": label,
                    "beta": beta,
                    **summary(rows),
                    "ess_histogram": ess_histogram(rows),
                    "ess_tilted_histogram": ess_histogram(rows, "ess_tilted"),
                    "log_z": [r.log_z for r in rows],
                }
            )
    if "reference" in by_proposal and len(by_proposal) > 1:  # how far another proposal moves the estimate
        for r in out["results"]:
            base = next(x for x in out["results"] if x["proposal"] == "reference" and x["beta"] == r["beta"])
            r["mean_abs_log_z_shift_vs_reference"] = float(
                torch.tensor(r["log_z"]).sub(torch.tensor(base["log_z"])).abs().mean()
            )
    return out


def print_table(res: dict) -> None:
    print(
        f"DISA log Z_hat over {res['pool']} prompts x {res['proposals_per_prompt']} proposals "
        f"(T = {res['temperature']}), reference = the shipped base"
    )
    print(
        f"{'proposal':10} {'beta':>5} {'reward':>7} {'logZ mean':>9} {'logZ std':>8} {'ESS':>6} {'ESS min':>7} "
        f"{'ESS~':>6} {'ESS~ min':>8} {'|dlogZ|':>8}"
    )
    for r in res["results"]:
        shift = r.get("mean_abs_log_z_shift_vs_reference")
        print(
            f"{r['proposal']:10} {r['beta']:>5g} {r['reward_mean']:>7.3f} {r['log_z_mean']:>9.3f} "
            f"{r['log_z_std']:>8.3f} "
            f"{r['ess_mean']:>6.2f} {r['ess_min']:>7.2f} {r['ess_tilted_mean']:>6.2f} {r['ess_tilted_min']:>8.2f} "
            + (f"{shift:>8.3f}" if shift is not None else f"{'-':>8}")
        )
    print("ESS: of the importance weights pi_ref/mu; ESS~: of the tilted terms the estimate sums")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pool", type=int, default=128)
    ap.add_argument("--proposals", type=int, default=8)
    ap.add_argument("--betas", default="1,5,15,30")
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--extra-proposal", default=None, help="another proposal model folder (e.g. a run's final/)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args(argv)
    proposals = {"reference": "base", "teacher": resolve_teacher_path(BUILTIN)}
    if args.extra_proposal:
        proposals["extra"] = args.extra_proposal
    betas = [float(b) for b in args.betas.split(",")]
    if args.smoke:
        args.pool, args.proposals, betas, proposals = 4, 2, [1.0, 15.0], {"reference": "base"}
    res = run(args.pool, args.proposals, betas, proposals, args.temperature, args.seed)
    res["smoke"] = args.smoke
    res["command"] = " ".join(["python", "benchmarks/studies/disa_ess.py", *(sys.argv[1:] if argv is None else argv)])
    print_table(res)
    out = args.out or (
        Path(tempfile.mkdtemp(prefix="disa-ess-")) / "disa_ess.json"
        if args.smoke
        else Path(__file__).parents[1] / "results" / "distmatch" / "disa_ess.json"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2))
    print(f"JSON: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
