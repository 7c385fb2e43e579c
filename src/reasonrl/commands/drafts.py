"""``reasonrl drafts make`` and ``reasonrl drafts warmstart``: the data of the ``drafts`` recipe.

``make``: a weak drafter (e.g. the ``tiny`` size, briefly warm-started: ``reasonrl pretrain --size
tiny --steps 60``) samples drafts for the task's first N train problems; each is judged by the
verifier and written as the JSONL the recipe reads (``drafts.file=PATH``).
``warmstart``: a short supervised warm start of the learner on the drafts template (each problem
in one of the four modes, by a seeded hash, the target its own demonstration), so that a small
model that never saw the template can read it; a large model reads it without one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

from ..errors import UserError
from .common import console, parse_options, progress, quiet_transformers, summary_table

drafts_app = typer.Typer(
    help="Drafts for the `drafts` recipe: make them with a weak model; warm-start a learner on them.",
    no_args_is_help=True,
)


@drafts_app.command("make")
def make_cmd(
    model: str = typer.Option(
        "builtin",
        help="The drafter: an HF model directory (e.g. a tiny warm start), or "
        "builtin: the task's demonstrations with one digit changed, no model.",
    ),
    out: Path = typer.Option(Path("drafts.jsonl"), help="The drafts JSONL to write."),
    task: Optional[str] = typer.Option(None, help="Task (default: arithmetic)."),
    task_opt: Optional[List[str]] = typer.Option(None, "--task-opt", help="Task option key=value (repeatable)."),
    problems: int = typer.Option(512, help="Train problems to draft for (the first N of the task's train stream)."),
    samples: int = typer.Option(4, help="Drafts per problem (spec: 32)."),
    temperature: float = typer.Option(0.8, help="Sampling temperature (spec: 0.8)."),
    top_p: float = typer.Option(0.95, help="Top-p (spec: 0.95)."),
    seed: int = typer.Option(0, help="Seed of the drafts' sampling."),
) -> None:
    """Sample drafts for the train problems and judge each with the task's verifier."""
    from ..data.drafter import BUILTIN, builtin_drafts, draft_lines, drafter_summary, make_drafts
    from ..models import load_model
    from ..tasks import get_task

    if problems < 2 or samples < 1 or temperature < 0 or not 0 < top_p <= 1:
        raise UserError(
            f"drafts make: need --problems >= 2 (a derangement needs two), --samples >= 1, "
            f"--temperature >= 0 and 0 < --top-p <= 1; got {problems}, {samples}, {temperature}, {top_p}"
        )
    the_task = get_task(task, **parse_options(task_opt))
    if model == BUILTIN:
        drafts = builtin_drafts(the_task, problems, samples, seed=seed)
    else:
        quiet_transformers()
        mdl, tok = load_model(model)
        with progress() as bar:
            bar.add_task(f"drafting {problems} problems x {samples}", total=None, info="")
            drafts = make_drafts(mdl, tok, the_task, problems, samples, temperature, top_p, seed=seed)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(draft_lines(drafts), encoding="utf-8")
    summary = drafter_summary(drafts)
    console.print(summary_table(f"{len(drafts)} drafts of {model} on {the_task.name} -> {out}", summary))


@drafts_app.command("warmstart")
def warmstart_cmd(
    drafts: Path = typer.Option(..., help="Drafts JSONL (`reasonrl drafts make`)."),
    model: str = typer.Option("base", help="The learner to warm-start (default: the shipped base)."),
    out: Path = typer.Option(Path("runs/drafts-learner"), help="Output HF model directory."),
    task: Optional[str] = typer.Option(None, help="Task (default: arithmetic)."),
    task_opt: Optional[List[str]] = typer.Option(None, "--task-opt", help="Task option key=value (repeatable)."),
    steps: int = typer.Option(150),
    batch_size: int = typer.Option(32),
    lr: float = typer.Option(3e-4),
    seed: int = typer.Option(0),
    eval_problems: int = typer.Option(200, help="Held-out problems of the final greedy evals (N/A template, plain)."),
    plain_rate: float = typer.Option(
        0.5,
        help="Share of train draws that are the task's plain prompts, so the "
        "learner keeps what it solved (0: the template only, as before).",
    ),
) -> None:
    """SFT of the learner on its own demonstrations in the drafts template (the four modes mixed),
    with a share of plain prompts (``--plain-rate``)."""
    from ..data.draft_task import DraftTask, PlainShare
    from ..eval.runner import EvalConfig, evaluate_model
    from ..data.drafts import MODES
    from ..models import load_model, save_model
    from ..loop.sft import SFTConfig, sft
    from ..tasks import get_task

    if steps < 1 or batch_size < 1 or lr <= 0 or eval_problems < 1:
        raise UserError(
            f"drafts warmstart: need --steps >= 1, --batch-size >= 1, --lr > 0, --eval-problems >= 1; "
            f"got {steps}, {batch_size}, {lr}, {eval_problems}"
        )
    plain_task = get_task(task, **parse_options(task_opt))
    the_task = PlainShare(DraftTask(plain_task, drafts, modes=MODES, seed=seed), plain_rate, seed=seed)
    quiet_transformers()
    mdl, tok = load_model(model)
    cfg = SFTConfig(steps=steps, batch_size=batch_size, lr=lr, seed=seed, eval_every=steps, eval_problems=eval_problems)
    with progress() as bar:
        job = bar.add_task("warm start on the drafts template", total=steps, info="")
        result = sft(
            mdl, tok, the_task, cfg, log=lambda m: bar.update(job, completed=m["step"], info=f"loss {m['loss']:.3f}")
        )
    plain, _ = evaluate_model(
        mdl, tok, plain_task, EvalConfig(n_problems=eval_problems, samples_per_problem=0, seed=seed)
    )
    result["plain_pass@1"] = plain["pass@1"]  # the same held-out problems with the task's own prompt
    save_model(mdl, tok, out)
    (out / "drafts_warmstart.json").write_text(
        json.dumps({"drafts": str(drafts), "steps": steps, "plain_rate": plain_rate, **result}, indent=2)
    )
    console.print(summary_table(f"warm-started {model} on the drafts template -> {out}", result))
