"""``reasonrl disa estimate``: DISA's offline stage (arXiv 2605.17295; objectives spec section 7) outside a run.

It is the stage the ``disa`` recipe runs before its first update (:meth:`TrajectoryBalance.offline_rows`),
for the run that ``reasonrl train`` would make from the same arguments (a YAML file, ``key=value`` pairs,
``--recipe``, ``--task``), with one difference: the proposals may come from another model (``--proposal``,
the paper's "proposal strength" knob; any model of the reference's tokenizer). So the prompts are the run's
pool (the first ``data.pool`` distinct train problems under ``seed``), each prompt rendered by the run's
formatter (``prompt.*``: a chat model's template), N = ``balance.proposals`` samples each, seeded by task
position as in the run, within the run's budget (``sampling.max_new_tokens`` or the task's) at
``sampling.temperature``; each scored by the recipe's reward (the task's verifier times
``task_reward_weight`` plus the recipe's extra rewards: the reward its residual uses) and under the
reference (``--reference``: the run's ``model``) with the residual's convention (``balance.length_norm``);
``log Z_hat`` at ``balance.beta``, each prompt's ESS. Until issue 41 the command scored with the task's
verifier, the task's default budget and plain prompts, whatever the recipe said. The options ``--pool``,
``--proposals``, ``--beta``, ``--temperature``, ``--length-norm`` and ``--seed`` set those keys.
"""

from __future__ import annotations

import dataclasses
import json
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, List, Optional

import typer
from rich.table import Table

from ..errors import UserError
from .common import checked_run, console, progress, quiet_transformers, summary_table

disa_app = typer.Typer(
    help="DISA's offline log-partition table (the `disa` recipe's balance.table).", no_args_is_help=True
)


@disa_app.command("estimate", context_settings={"allow_extra_args": False})
def estimate_cmd(
    args: Optional[List[str]] = typer.Argument(
        None,
        help="[CONFIG.yaml] [key=value ...]: the run's configuration, "
        "as `reasonrl train` takes it (e.g. sampling.max_new_tokens=256)",
    ),
    out: Path = typer.Option(..., help="The table to write (JSON lines)."),
    recipe: str = typer.Option("disa", help="The run's recipe: its balance part, reward, sampling and budget."),
    task: Optional[str] = typer.Option(None, help="Task (default: the recipe's, else arithmetic)."),
    task_opt: Optional[List[str]] = typer.Option(None, "--task-opt", help="Task option key=value (repeatable)."),
    reference: Optional[str] = typer.Option(
        None, help="The reference pi_ref: the run's model (model=M; default the shipped base)."
    ),
    proposal: Optional[str] = typer.Option(None, help="The proposal model mu (default: the reference)."),
    pool: Optional[int] = typer.Option(None, help="data.pool: the run's prompts (the disa recipe: 128)."),
    proposals: Optional[int] = typer.Option(None, help="balance.proposals: N per prompt (the spec's 8)."),
    beta: Optional[float] = typer.Option(None, help="balance.beta (the disa recipe: 1)."),
    temperature: Optional[float] = typer.Option(
        None, help="sampling.temperature of the proposals and the log-probs (the disa recipe: 0.8)."
    ),
    length_norm: Optional[bool] = typer.Option(
        None, "--length-norm/--no-length-norm", help="balance.length_norm (the disa recipe: length-normalised)."
    ),
    seed: Optional[int] = typer.Option(
        None, help="The run's seed: which prompts data.pool draws, and the proposals' seeds."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Estimate log Z_hat(x) for the run's prompts and write the table, with an ESS histogram."""
    from ..data.partition import ess_histogram, summary, write_table
    from ..config.validate import check_inputs

    keys = {
        "data.pool": pool,
        "balance.proposals": proposals,
        "balance.beta": beta,
        "sampling.temperature": temperature,
        "balance.length_norm": length_norm,
        "seed": seed,
    }
    pairs = [
        *(args or []),
        *(f"task_options.{p}" for p in task_opt or []),
        *(f"{k}={v}" for k, v in keys.items() if v is not None),
    ]
    cfg, the_recipe = checked_run(pairs, recipe, reference, task, None, None, False)
    check_stage(cfg, the_recipe)
    check_inputs(cfg)  # all before any model loads
    quiet_transformers()
    with progress() as bar:
        job = bar.add_task(
            f"{cfg.data.pool} prompts x {the_recipe.balance.proposals} proposals", total=cfg.data.pool, info=""
        )
        header, rows = estimate_table(cfg, the_recipe, proposal, on_chunk=lambda k: bar.advance(job, k))
    write_table(out, header, rows)
    stats = summary(rows)
    if as_json:
        print(
            json.dumps(
                {
                    **stats,
                    "ess_histogram": ess_histogram(rows),
                    "ess_tilted_histogram": ess_histogram(rows, "ess_tilted"),
                },
                indent=2,
            )
        )
        return
    console.print(summary_table(f"DISA table -> {out}", stats))
    console.print(
        _histogram_table(ess_histogram(rows), ess_histogram(rows, "ess_tilted"), the_recipe.balance.proposals)
    )


def check_stage(cfg: Any, recipe: Any) -> None:
    """The run has an offline stage: a balance part with a frozen table, and a pool to estimate it over."""
    part = getattr(recipe, "balance", None)
    if part is None or part.log_z != "table":
        raise UserError(
            f"disa estimate: recipe {recipe.name!r} reads no log Z table (its balance.log_z must be table, "
            "as in the disa recipe)"
        )
    if cfg.data.pool < 1:
        raise UserError("disa estimate: the table covers the run's pool; set data.pool (--pool) >= 1")


class FixedReference:
    """The reference scope the offline stage reads (``ctx.reference()``): a loaded model, frozen, in eval mode."""

    def __init__(self, model: Any):
        self.model = model.eval().requires_grad_(False)

    @contextmanager
    def scoring(self) -> Iterator[Any]:
        yield self.model


def stage_context(cfg: Any, recipe: Any, proposal: str | None = None) -> tuple[Any, Any]:
    """(the offline stage's RoundContext, the run's task): the run's task, formatter, budget, pool and reward as
    the trainer builds them (:class:`reasonrl.loop.batch.BatchMaker`), sampling from ``proposal`` (default: the
    reference, the run's ``model``), the reference under ``ctx.reference()``."""
    from ..loop.batch import BatchMaker
    from ..dist.ray_rollout import make_engine
    from ..eval.runner import task_max_new_tokens
    from ..models import load_model, resolve_device
    from ..models.memory import resolve_rows
    from ..loop.run import task_for
    from ..tasks.limits import prepare_prompts

    device = resolve_device(cfg.device)
    ref, tok = load_model(cfg.model, device=device)
    mu, mu_tok = (ref, tok) if proposal is None else load_model(proposal, device=device)
    if mu_tok.get_vocab() != tok.get_vocab():
        raise UserError(
            f"disa estimate: the proposal {proposal!r} and the reference {cfg.model or 'base'!r} have "
            "different tokenizers; importance weights need the same token sequences under both"
        )
    task, _ = recipe.wrap_task(task_for(cfg), tok, cfg.seed)  # setup metrics: the offline stage logs no steps
    budget = recipe.sampling.max_new_tokens or task_max_new_tokens(task)  # the trainer's budget
    formatter, task = prepare_prompts(task, tok, ref, cfg.prompt, budget, cfg.model or "the shipped base")
    cfg = resolve_rows(cfg, mu, tok, task, needs_reference=True, new_tokens=budget)
    engine = make_engine(mu, tok, dataclasses.replace(cfg, rollout=dataclasses.replace(cfg.rollout, workers=0)))
    if hasattr(engine, "formatter"):
        engine.formatter = formatter
    maker = BatchMaker(
        task,
        recipe,
        engine,
        budget,
        cfg.seed,
        FixedReference(ref),
        cfg.micro_batch_size,
        pool=cfg.data.pool,
        formatter=formatter,
    )
    return maker.round_context("balance", None), task


def estimate_table(
    cfg: Any, recipe: Any, proposal: str | None = None, on_chunk: Callable[[int], None] = lambda k: None
) -> tuple[dict, list]:
    """(header, rows) of the run's table with ``proposal``'s samples (see the module)."""
    ctx, task = stage_context(cfg, recipe, proposal)
    part, model = recipe.balance, str(cfg.model or "base")
    rows = part.offline_rows(ctx, on_chunk)
    return {**part.table_header(ctx, proposal or model, model), "task": task.name}, rows


def _histogram_table(ess: list, tilted: list, n: int) -> Table:
    table = Table(title=f"prompts by effective sample size (of {n} proposals)")
    for col in ("ESS", "IS weights pi_ref/mu", "tilted terms exp(L_ref - L_mu + beta r)"):
        table.add_column(col, justify="right")
    for (label, a), (_, b) in zip(ess, tilted):
        table.add_row(label, str(a), str(b))
    return table
