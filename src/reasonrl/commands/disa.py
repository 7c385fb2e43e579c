"""``reasonrl disa estimate``: DISA's offline stage (arXiv 2605.17295; objectives spec section 7).

N proposals per training prompt from a proposal model (the reference by default; any other model of
the same tokenizer: the paper's "proposal strength" knob), scored under the reference (length-
normalised log-likelihoods at the run's sampling temperature, the residual's convention) and by the
task's verifier; ``log Z_hat(x)`` by importance sampling, each prompt's ESS, written as the table the
``disa`` recipe reads (``balance.table=FILE``). The prompts are the run's: the first ``--pool``
distinct train problems of the task's stream under ``--seed``, as ``data.pool`` draws them.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import torch
import typer
from rich.table import Table

from ..errors import UserError
from .common import console, parse_options, progress, quiet_transformers, summary_table

disa_app = typer.Typer(help="DISA's offline log-partition table (the `disa` recipe's balance.table).", no_args_is_help=True)


@disa_app.command("estimate")
def estimate_cmd(
    out: Path = typer.Option(..., help="The table to write (JSON lines)."),
    task: Optional[str] = typer.Option(None, help="Task (default: arithmetic)."),
    task_opt: Optional[List[str]] = typer.Option(None, "--task-opt", help="Task option key=value (repeatable)."),
    reference: str = typer.Option("base", help="The reference policy pi_ref (the run's starting model)."),
    proposal: Optional[str] = typer.Option(None, help="The proposal model mu (default: the reference)."),
    pool: int = typer.Option(128, help="Prompts: the task's first N distinct train problems (the run's data.pool)."),
    proposals: int = typer.Option(8, help="N proposals per prompt (spec: 8)."),
    beta: float = typer.Option(1.0, help="Inverse temperature of the target (the disa recipe's balance.beta: 1)."),
    temperature: float = typer.Option(0.8, help="Sampling temperature of the proposals and of the log-probs (the "
                                      "recipe's sampling.temperature)."),
    length_norm: bool = typer.Option(True, help="Length-normalised log-likelihoods (the recipe's balance.length_norm)."),
    seed: int = typer.Option(0, help="The run's seed (which prompts data.pool draws) and the proposals' seed."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Estimate log Z_hat(x) for the run's prompts and write the table, with an ESS histogram."""
    from ..data.partition import ess_histogram, summary, write_table
    from ..data.pool import take_pool
    from ..models import load_model
    from ..tasks import get_task

    if pool < 1 or proposals < 1 or beta <= 0 or temperature <= 0:
        raise UserError(f"disa estimate: need --pool >= 1, --proposals >= 1, --beta > 0 and --temperature > 0; got "
                        f"{pool}, {proposals}, {beta}, {temperature}")
    the_task = get_task(task, **parse_options(task_opt))
    items = take_pool(the_task.iter_items("train", seed), pool, f"task {the_task.name!r}")
    quiet_transformers()
    ref, tok = load_model(reference)
    mu, mu_tok = (ref, tok) if proposal is None else load_model(proposal)
    if mu_tok.get_vocab() != tok.get_vocab():
        raise UserError(f"disa estimate: the proposal {proposal!r} and the reference {reference!r} have different "
                        "tokenizers; importance weights need the same token sequences under both")
    with progress() as bar:
        job = bar.add_task(f"{len(items)} prompts x {proposals} proposals", total=len(items), info="")
        rows = estimate(the_task, items, ref, mu, tok, proposals, beta, temperature, length_norm, seed,
                        on_chunk=lambda k: bar.advance(job, k))
    header = {"beta": beta, "length_norm": length_norm, "proposals": proposals, "temperature": temperature,
              "proposal": proposal or reference, "reference": reference, "task": the_task.name}
    write_table(out, header, rows)
    stats = summary(rows)
    if as_json:
        print(json.dumps({**stats, "ess_histogram": ess_histogram(rows),
                          "ess_tilted_histogram": ess_histogram(rows, "ess_tilted")}, indent=2))
        return
    console.print(summary_table(f"DISA table -> {out}", stats))
    console.print(_histogram_table(ess_histogram(rows), ess_histogram(rows, "ess_tilted"), proposals))


def estimate(task, items, ref, mu, tok, n: int, beta: float, temperature: float, length_norm: bool, seed: int,
             chunk: int = 32, on_chunk=lambda k: None) -> list:
    """The table's rows: ``n`` proposals of each item from ``mu`` (seeded per item), scored under ``ref``."""
    from ..data.partition import estimate_rows

    scores = proposal_scores(task, items, ref, mu, tok, n, temperature, length_norm, seed, chunk, on_chunk)
    return estimate_rows(items, *scores, beta)


def proposal_scores(task, items, ref, mu, tok, n: int, temperature: float, length_norm: bool, seed: int,
                    chunk: int = 32, on_chunk=lambda k: None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(B, N) reference and proposal log-likelihoods (the residual's convention) and raw rewards of ``n``
    proposals per item from ``mu``: everything log Z_hat needs, for any beta."""
    from ..data.partition import sequence_scores
    from ..eval.runner import task_max_new_tokens
    from ..models.scoring import score_completions
    from ..rollout import SamplingParams, engine_for
    from ..seeds import stable_seed

    engine = engine_for(mu, tok)
    sp = SamplingParams(temperature=temperature, max_new_tokens=task_max_new_tokens(task))
    out: list[tuple[torch.Tensor, ...]] = []
    for s in range(0, len(items), chunk):
        part = items[s:s + chunk]
        ro = engine.generate([it.prompt for it in part], n, sp, seeds=[stable_seed(seed, "disa", s + i) for i in range(len(part))])
        rewards = torch.tensor([float(task.verify(ro.texts[r], it.answer, it.meta))
                                for i, it in enumerate(part) for r in range(i * n, (i + 1) * n)]).view(-1, n)
        with torch.no_grad():
            lp, _ = score_completions(ref, ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask,
                                      temperature=temperature, entropies=False)
        out.append((sequence_scores(lp, ro.completion_mask, length_norm).view(-1, n),
                    sequence_scores(ro.logprobs, ro.completion_mask, length_norm).view(-1, n), rewards))
        on_chunk(len(part))
    return tuple(torch.cat([o[i] for o in out]) for i in range(3))  # type: ignore[return-value]


def _histogram_table(ess: list, tilted: list, n: int) -> Table:
    table = Table(title=f"prompts by effective sample size (of {n} proposals)")
    for col in ("ESS", "IS weights pi_ref/mu", "tilted terms exp(L_ref - L_mu + beta r)"):
        table.add_column(col, justify="right")
    for (label, a), (_, b) in zip(ess, tilted):
        table.add_row(label, str(a), str(b))
    return table
