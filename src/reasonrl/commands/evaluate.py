"""``reasonrl eval`` and ``reasonrl compare``: a model's held-out scores, and recipes x seeds in one table,
with paired tests on the same items."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, List, Optional

import typer
from rich.table import Table

from ..errors import UserError
from .common import console, parse_options, progress, quiet_transformers, summary_table

# `reasonrl compare` lives in commands/compare.py (this module stayed under 400 lines); its names stay importable
# from here (cli, tests/test_paired.py, benchmarks/learning/distmatch.py)
from .compare import _compare_table, checked_entries, compare_cmd, expected_config  # noqa: F401 - re-exports


def eval_cmd(
    model: Optional[str] = typer.Option(None, help="HF model directory or hub id (default: the shipped base)."),
    task: Optional[str] = typer.Option(None, help="arithmetic | rg:<name> | a .jsonl/.parquet file or dataset dir."),
    task_opt: Optional[List[str]] = typer.Option(None, "--task-opt", help="Task option key=value (repeatable)."),
    problems: int = typer.Option(500, help="Held-out problems."),
    samples_per_problem: int = typer.Option(
        8, help="n: sampled completions per problem for pass@k / avg@n / maj@k (0: greedy pass@1 only)."
    ),
    k: Optional[str] = typer.Option(None, help="Comma list of the k of pass@k and maj@k, each <= n (default: n)."),
    temperature: float = typer.Option(1.0, help="Sampling temperature of the n samples."),
    top_p: float = typer.Option(1.0, help="Top-p (nucleus) of the n samples."),
    sample_seed: Optional[int] = typer.Option(
        None,
        help="Seed of the n samples (default: --seed); each problem's "
        "samples are keyed by it and the problem, not by batching.",
    ),
    maj_equiv: bool = typer.Option(
        False,
        "--maj-equiv",
        help="maj@k groups answers by math-verify equivalence (0.5 = 1/2) instead of string equality.",
    ),
    max_new_tokens: Optional[int] = typer.Option(None, help="Generation budget (default: the task's)."),
    seed: int = typer.Option(0, help="Which held-out problems (and the samples' seed unless --sample-seed)."),
    json_path: Optional[Path] = typer.Option(
        None, "--json", help="Write the summary as JSON here, and one row per problem to NAME.items.jsonl beside it."
    ),
    samples: Optional[Path] = typer.Option(None, help="Write every sample as JSONL here."),
    against: Optional[Path] = typer.Option(
        None,
        help="Another model's --samples or .items.jsonl file (same task, "
        "--problems, --seed): paired tests (McNemar, sign test, bootstrap CI) on "
        "the greedy results.",
    ),
    old_n: Optional[int] = typer.Option(None, "--n", hidden=True, help="Renamed --problems."),
    refine: int = typer.Option(
        0, "--refine", help="SU-01 test-time loop: up to N verify -> refine rounds on each greedy answer (0: off)."
    ),
    reward: Optional[List[str]] = typer.Option(
        None,
        "--reward",
        help="path/to/file.py:fn, repeatable: each function's "
        "reward/<name>/mean and /std over the completions (TRL's arguments).",
    ),
    refine_verifier: str = typer.Option(
        "self",
        "--refine-verifier",
        help="Who checks an answer in --refine: self "
        "(the model, yes/no + report) | format (the task's answer extraction) | oracle "
        "(the gold answer: an upper bound, reported apart).",
    ),
    prompt: Optional[List[str]] = typer.Option(
        None,
        "--prompt",
        help="How prompts reach the model, as training's "
        "prompt.* keys: format=chat, system_prompt=..., max_tokens=512, "
        "chat_template_kwargs.enable_thinking=false (repeatable).",
    ),
) -> None:
    """Greedy pass@1 and, from n samples per problem, pass@k for each k, avg@n and maj@k on a task's held-out split."""
    import torch
    from ..eval.paired import load_item_results
    from ..eval.runner import evaluate_items
    from ..rewards import FunctionReward
    from ..tasks import get_task

    cfg = _eval_config(
        old_n,
        problems,
        samples_per_problem,
        k,
        temperature,
        top_p,
        max_new_tokens,
        seed,
        sample_seed,
        maj_equiv,
        refine,
        refine_verifier,
    )
    prompting = _prompting(prompt)
    the_task = get_task(task, **parse_options(task_opt))  # cheap, and it validates the data: before the model
    funcs = [FunctionReward(spec) for spec in reward or []]  # a missing file or a bad signature: before the model
    other = load_item_results(against) if against else None  # a bad file fails before the model loads
    quiet_transformers()
    torch.manual_seed(seed)
    engine, the_task = _engine(model, the_task, cfg, prompting)
    with progress() as bar:
        job = bar.add_task("evaluating", total=problems * (1 + samples_per_problem), info="")
        summary, records, rows = evaluate_items(
            engine, the_task, cfg, progress=lambda m: bar.advance(job, m), formatter=engine.formatter
        )
    records += _refine(engine, the_task, cfg, records, refine, refine_verifier, summary) if refine else []
    summary.update(reward_summary(funcs, [r for r in records if r["mode"] in ("greedy", "sampled")]))
    console.print(summary_table(f"{model or 'base'} on {the_task.name}", summary))
    if other is not None:
        _against(summary, records, other, against, model)
    settings = {
        **_settings(the_task.name, model, cfg, refine, refine_verifier),
        "prompts": _prompt_report(engine, the_task),
    }
    _write_eval_outputs(json_path, samples, {**summary, "settings": settings}, rows, records)


def _against(summary: dict, records: list[dict], other: dict, against: Path, model: str | None) -> None:
    """``--against``: paired tests of the greedy results against the other model's, into the summary and shown."""
    from ..eval.paired import paired_by_key

    mine = {r["key"]: r["correct"] for r in records if r["mode"] == "greedy"}
    summary["against"] = {"file": str(against), **paired_by_key(mine, other)}
    console.print(_paired_table(f"{model or 'base'} against {against}", summary["against"]))


def reward_summary(funcs: list, records: list[dict]) -> dict[str, float]:
    """Each ``--reward`` function's ``reward/<name>/mean`` and ``/std`` over the evaluation's completions (greedy
    and sampled), called with TRL's arguments (the prompt, the completion, the problem's answer)."""
    from ..rewards import score_rewards

    out: dict[str, float] = {}
    names: set[str] = {"correct"}
    for fn in funcs:
        base, k = fn.name, 2
        while fn.name in names:  # two functions of one name: the second is name_2, as in training
            fn.name, k = f"{base}_{k}", k + 1
        names.add(fn.name)
        res = score_rewards(
            fn,
            [r["prompt"] for r in records],
            [r["completion"] for r in records],
            {"answer": [r["answer"] for r in records]},
            task="eval",
        )
        out.update({k: v for k, v in res.metrics.items() if k.endswith(("/mean", "/std"))})
    return out


def _eval_config(
    old_n: int | None,
    problems: int,
    n: int,
    k: str | None,
    temperature: float,
    top_p: float,
    max_new_tokens: int | None,
    seed: int,
    sample_seed: int | None,
    maj_equiv: bool,
    refine: int,
    refine_verifier: str,
):
    """The options checked (each bad one named) and gathered into an :class:`EvalConfig`."""
    from ..eval.runner import EvalConfig

    if old_n is not None:
        raise UserError(
            f"--n {old_n}: the option is now --problems (held-out problems); sampled completions per "
            "problem are --samples-per-problem and --k lists the k of pass@k (docs/eval.md)"
        )
    _check_refine(refine, refine_verifier)
    _check_eval_options(problems, n, temperature, top_p, max_new_tokens, seed, sample_seed)
    return EvalConfig(
        n_problems=problems,
        samples_per_problem=n,
        ks=parse_ks(k, n),
        temperature=temperature,
        top_p=top_p,
        max_new_tokens=max_new_tokens,
        seed=seed,
        sample_seed=sample_seed,
        maj_equiv=maj_equiv,
    )


def _prompting(pairs: list[str] | None):
    """``--prompt key=value`` pairs as training's ``prompt.*`` section, checked (keys and rules) before
    the model loads."""
    import dataclasses

    from ..config.train import Prompting, build_part, check_section, dotted_to_nested
    from ..config.validate import class_rules, range_problems

    part = build_part(
        Prompting, None, check_section(Prompting, dotted_to_nested(parse_options(pairs)), "prompt"), "prompt"
    )
    found = range_problems(
        {f"prompt.{k}": v for k, v in dataclasses.asdict(part).items()},
        class_rules(Prompting, "prompt"),
        "option --prompt",
    )
    if found:
        raise UserError("\n".join(found))
    return part


def _engine(model: str | None, task, cfg, prompting):
    """The model behind an engine that renders prompts as ``prompting`` says, and the task limited
    to the prompts that fit (:func:`reasonrl.tasks.limits.prepare_prompts`)."""
    from ..eval.runner import task_max_new_tokens
    from ..models import load_model
    from ..rollout import engine_for
    from ..tasks.limits import prepare_prompts

    mdl, tok = load_model(model)
    fmt, task = prepare_prompts(
        task, tok, mdl, prompting, cfg.max_new_tokens or task_max_new_tokens(task), model or "the shipped base"
    )
    return engine_for(mdl, tok, max_rows=cfg.max_rows, formatter=fmt), task


def _prompt_report(engine, task) -> dict:
    from ..tasks.limits import LimitedTask

    fmt = engine.formatter
    return {
        "format": "chat" if fmt.chat else "plain",
        "why": fmt.why,
        **(task.report() if isinstance(task, LimitedTask) else {}),
    }


def _settings(task: str, model: str | None, cfg, refine: int, refine_verifier: str) -> dict:
    """What an eval JSON records of how it was made (the n samples' seed resolved)."""
    return {
        "task": task,
        "model": model,
        "problems": cfg.n_problems,
        "ks": list(cfg.k_values),
        **{f: getattr(cfg, f) for f in ("samples_per_problem", "temperature", "top_p", "seed", "maj_equiv")},
        "sample_seed": cfg.seed if cfg.sample_seed is None else cfg.sample_seed,
        "refine": refine,
        "refine_verifier": refine_verifier if refine else None,
    }


def _check_refine(rounds: int, verifier: str) -> None:
    from ..eval.refine import VERIFIERS

    if rounds < 0:
        raise UserError(f"--refine {rounds}: give the number of refine rounds, >= 0 (0: off)")
    if verifier not in VERIFIERS:
        raise UserError(f"--refine-verifier {verifier!r} is not one of {', '.join(VERIFIERS)}")


def _refine(engine, task, cfg, records: list[dict], rounds: int, verifier: str, summary: dict) -> list[dict]:
    """``--refine N``: the generate -> verify -> refine loop from the greedy answers; its gold-scored
    pass@1 per round goes into ``summary`` (the oracle verifier's under its upper-bound keys)."""
    from ..eval.refine import VERIFIERS, refine_loop, refine_summary
    from ..eval.runner import task_max_new_tokens
    from ..tasks import take_items

    items = take_items(task, "test", cfg.n_problems, seed=cfg.seed)  # the problems evaluate_items took
    greedy = {r["key"]: r["completion"] for r in records if r["mode"] == "greedy"}
    judge = VERIFIERS[verifier]()
    with progress() as bar:
        bar.add_task(f"refining ({verifier} verifier, {rounds} rounds)", total=None, info="")
        _, rows = refine_loop(
            engine,
            task,
            items,
            [greedy[it.key] for it in items],
            rounds,
            judge,
            cfg.max_new_tokens or task_max_new_tokens(task),
        )
    summary.update(refine_summary(task, items, rows, judge))
    if judge.oracle:
        console.print(
            "[yellow]--refine-verifier oracle reads the gold answers: its refine_oracle_upper_bound/* "
            "numbers are an upper bound, not a test-time result[/yellow]"
        )
    mode = "refine_oracle_upper_bound" if judge.oracle else "refine"
    return [{"mode": mode, "verifier": verifier, **r} for r in rows]


def _check_eval_options(problems, samples_per_problem, temperature, top_p, max_new_tokens, seed, sample_seed) -> None:
    from ..config.validate import OPTION_RULES, check_options

    check_options(
        {
            "--problems": problems,
            "--samples-per-problem": samples_per_problem,
            "--temperature": temperature,
            "--top-p": top_p,
            "--max-new-tokens": max_new_tokens,
            "--seed": seed,
            "--sample-seed": sample_seed,
        },
        OPTION_RULES["eval"],
    )


def _write_eval_outputs(
    json_path: Optional[Path], samples: Optional[Path], summary: dict[str, Any], rows: list[dict], records: list[dict]
) -> None:
    """``--json NAME.json``: the summary and, always beside it, ``NAME.items.jsonl`` (one row per
    problem); ``--samples``: every sample."""
    from ..eval.runner import items_path, write_jsonl

    if json_path:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(summary, indent=2))
        write_jsonl(rows, items_path(json_path))
    if samples:
        write_jsonl(records, samples)


def parse_ks(text: Optional[str], n: int) -> tuple[int, ...]:
    """``--k 1,4,16`` -> (1, 4, 16), each checked against n = ``--samples-per-problem``.

    Raises:
        UserError: naming the entry that is not an integer >= 1 or exceeds n.
    """
    if text is None:
        return ()
    out = []
    for part in text.split(","):
        try:
            value = int(part.strip())
        except ValueError as err:
            raise UserError(
                f"--k {text!r}: {part.strip()!r} is not an integer; give a comma list such as 1,4,16"
            ) from err
        if value < 1:
            raise UserError(f"--k {text!r}: k={value} must be >= 1")
        if value > n:
            raise UserError(
                f"--k {text!r}: k={value} > --samples-per-problem {n}; pass@k needs n >= k samples "
                f"per problem: raise --samples-per-problem to {value} or drop k={value}"
            )
        out.append(value)
    return tuple(sorted(set(out)))


def _paired_table(title: str, res: dict[str, Any]) -> Table:
    """``reasonrl eval --against``: this model (x) against the other (y) on the same problems."""
    table = Table(title=title)
    table.add_column("paired test")
    table.add_column("value", justify="right")
    table.add_row("problems", str(res["n_items"]))
    table.add_row("pass@1 this / other", f"{res['acc_x']:.4f} / {res['acc_y']:.4f}")
    table.add_row("b (only this right) / c (only other right)", f"{res['b']} / {res['c']}")
    table.add_row("sign test p (this better, one-sided)", f"{res['sign_p_greater']:.4g}")
    table.add_row("exact McNemar p (two-sided)", f"{res['mcnemar_p']:.4g}")
    table.add_row(
        f"Δ pass@1, bootstrap 95% CI (B={res['bootstrap_B']})",
        f"{res['diff']:+.4f} [{res['ci_low']:+.4f}, {res['ci_high']:+.4f}]",
    )
    return table
