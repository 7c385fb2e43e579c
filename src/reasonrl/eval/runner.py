"""Evaluate a model on a task's held-out split: greedy pass@1 plus, from n sampled completions per
problem, unbiased pass@k for several k <= n, avg@n and maj@k (spec envs-selfplay-eval.md section 9).

Both passes go through the same Generator as training, so what eval measures is what RL sees.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np
import torch

from ..loop.checkpoint import atomic_write_text
from ..errors import UserError
from ..models.chat import PromptFormatter
from ..rollout import Generator, SamplingParams, engine_for
from ..rollout.agent import EpisodeOptions, environment_rollouts, is_episodic
from ..seeds import stable_seed
from ..tasks import Item, Task, is_correct, take_items
from ..tasks.protocols import Episodic, WithDiagnostics, budget, prepare_verify, provides
from .majority import Equivalence, MathEquivalence, exact_equal, majority_vote_grouped
from .metrics import pass_at_k


@dataclass(frozen=True)
class EvalConfig:
    n_problems: int = 500  # held-out problems (`reasonrl eval --problems`)
    samples_per_problem: int = 8  # n sampled completions per problem; 0 = greedy only
    ks: tuple[int, ...] = ()  # the k of pass@k and maj@k, each in [1, n]; () = (n,)
    temperature: float = 1.0  # of the sampled completions (greedy pass@1 is always temperature 0)
    top_p: float = 1.0
    min_p: float = 0.0  # 0 = off
    max_new_tokens: int | None = None  # None: the task's own budget
    seed: int = 0  # which held-out problems (fixed, so runs and models share them)
    sample_seed: int | None = None  # seed of the sampled completions; None = seed
    maj_equiv: bool = False  # maj@k groups answers by math-verify equivalence instead of string equality
    max_rows: int = 512

    def __post_init__(self) -> None:
        bad = [k for k in self.ks if not 1 <= k <= self.samples_per_problem]
        if bad:
            raise UserError(
                f"EvalConfig.ks: k={bad[0]} needs 1 <= k <= samples_per_problem = "
                f"{self.samples_per_problem} (pass@k is estimated from n >= k samples per problem)"
            )

    @property
    def k_values(self) -> tuple[int, ...]:
        """The k reported, ascending; none when greedy only."""
        if self.samples_per_problem <= 0:
            return ()
        return tuple(sorted(set(self.ks))) or (self.samples_per_problem,)


def pass_key(k: int) -> str:
    """Summary key of sampled pass@k; sampled pass@1 (= avg@n) is ``pass@1_sampled``, since
    ``pass@1`` has always been the greedy pass@1 that training curves and ``compare`` read."""
    return "pass@1_sampled" if k == 1 else f"pass@{k}"


def task_max_new_tokens(task: Task) -> int:
    return budget(task)


def _records(items: list[Item], texts, reasons, lengths, task: Task, n: int, mode: str) -> list[dict]:
    prepare_verify(task, texts, [items[r // n].meta for r in range(len(texts))])
    out = []
    for r, text in enumerate(texts):
        item = items[r // n]
        score = task.verify(text, item.answer, item.meta)
        out.append(
            {
                "problem": r // n,
                "key": item.key,
                "mode": mode,
                "prompt": item.prompt,
                "answer": item.answer,
                "completion": text,
                "extracted": task.extract_answer(text),
                "score": score,
                "correct": is_correct(score),
                "length": int(lengths[r]),
                "finish": reasons[r],
            }
        )
    return out


def _generate(
    engine: Generator,
    items,
    n: int,
    sampling: SamplingParams,
    task,
    mode,
    progress,
    formatter: PromptFormatter | None = None,
) -> list[dict]:
    """Records of ``n`` samples per item. Sampled rows are keyed by ``sampling.seed`` and the
    problem's index, so the result does not depend on ``max_rows`` or on ranks sharing the work.
    Prompts are rendered by ``formatter`` (the run's), else by the engine's own. A task with
    environments is rolled out as episodes (:mod:`reasonrl.rollout.agent`)."""
    recs, step = [], max(1, getattr(engine, "max_rows", 512) // n)
    keyed = sampling.temperature > 0 and sampling.seed is not None
    for s in range(0, len(items), step):
        chunk = items[s : s + step]
        extra = {"seeds": [stable_seed(sampling.seed, "eval", s + i) for i in range(len(chunk))]} if keyed else {}
        if is_episodic(task):  # an agent task: each row is an episode, its text the episode's answer
            seeds = extra.get("seeds") or [stable_seed(0, "eval", s + i) for i in range(len(chunk))]
            ro = environment_rollouts(
                engine,
                task,
                chunk,
                n,
                sampling,
                seeds,
                formatter or engine.formatter,
                task.episode_options if provides(task, Episodic) else EpisodeOptions(),
            )
        else:
            prompts = [it.prompt for it in chunk]
            ro = engine.generate(formatter.render_all(prompts) if formatter else prompts, n, sampling, **extra)
        part = _records(chunk, ro.texts, ro.finish_reasons, ro.lengths.tolist(), task, n, mode)
        for rec in part:
            rec["problem"] += s
        recs += part
        if progress:
            progress(len(chunk) * n)
    return recs


def evaluate_model(
    model,
    tokenizer,
    task: Task,
    cfg: EvalConfig = EvalConfig(),
    progress: Callable[[int], None] | None = None,
    formatter: PromptFormatter | None = None,
) -> tuple[dict[str, Any], list[dict]]:
    """:func:`evaluate` with the in-process engine of ``model`` (the diffusion sampler for a masked-diffusion LM)."""
    return evaluate(engine_for(model, tokenizer, max_rows=cfg.max_rows, formatter=formatter), task, cfg, progress)


def evaluate(
    engine: Generator,
    task: Task,
    cfg: EvalConfig = EvalConfig(),
    progress: Callable[[int], None] | None = None,
    formatter: PromptFormatter | None = None,
) -> tuple[dict[str, Any], list[dict]]:
    """Summary dict (keys as ``reasonrl eval --json`` writes) and one record per sample."""
    summary, records, _ = evaluate_items(engine, task, cfg, progress, formatter)
    return summary, records


def evaluate_items(
    engine: Generator,
    task: Task,
    cfg: EvalConfig = EvalConfig(),
    progress: Callable[[int], None] | None = None,
    formatter: PromptFormatter | None = None,
) -> tuple[dict[str, Any], list[dict], list[dict]]:
    """:func:`evaluate`, plus one row per problem (:func:`item_rows`, what ``NAME.items.jsonl`` holds).
    ``formatter``: the run's prompt formatter (None: the engine renders prompts with its own).

    Summary: greedy ``pass@1``; with n = ``samples_per_problem`` > 0 also ``avg@n`` and, per k,
    unbiased pass@k (:func:`pass_key`) and ``maj@k``: each the unweighted mean of the rows' values.

    The caller's torch RNG is left as it was: an engine that draws from the global RNG (the diffusion
    sampler's greedy pass) would otherwise shift every later draw of a training run (a dropout mask), so a
    run's training would depend on whether, and how often, it evaluated.
    """
    device = getattr(engine, "device", None)  # the engine's model device (a user's Generator may have none)
    device = torch.device(device) if isinstance(device, (str, torch.device)) else None
    with torch.random.fork_rng(devices=[device] if device is not None and device.type == "cuda" else []):
        return _evaluate_items(engine, task, cfg, progress, formatter)


def _evaluate_items(
    engine: Generator,
    task: Task,
    cfg: EvalConfig,
    progress: Callable[[int], None] | None,
    formatter: PromptFormatter | None,
) -> tuple[dict[str, Any], list[dict], list[dict]]:
    items = take_items(task, "test", cfg.n_problems, seed=cfg.seed)
    budget = cfg.max_new_tokens or task_max_new_tokens(task)
    greedy = _generate(
        engine, items, 1, SamplingParams(temperature=0, max_new_tokens=budget), task, "greedy", progress, formatter
    )
    summary: dict[str, Any] = {"pass@1": sum(r["correct"] for r in greedy) / len(items), "n_problems": len(items)}
    n, sampled = cfg.samples_per_problem, []
    if n > 0:
        sp = SamplingParams(
            temperature=cfg.temperature,
            top_p=cfg.top_p,
            min_p=cfg.min_p,
            max_new_tokens=budget,
            seed=cfg.seed if cfg.sample_seed is None else cfg.sample_seed,
        )
        sampled = _generate(engine, items, n, sp, task, "sampled", progress, formatter)
    rows = item_rows(greedy, sampled, n, cfg.k_values, MathEquivalence() if cfg.maj_equiv else exact_equal)
    if n > 0:
        summary["samples_per_problem"] = n
        summary.update(
            {
                key: float(np.mean([r[key] for r in rows]))
                for key in (*map(pass_key, cfg.k_values), f"avg@{n}", *(f"maj@{k}" for k in cfg.k_values))
            }
        )
    summary.update(_shape_stats(greedy, sampled))
    if provides(task, WithDiagnostics):  # task-specific rates (e.g. TEMPO's leakage)
        summary.update(
            task.diagnostics([r["completion"] for r in greedy], [it.meta for it in items], [r["score"] for r in greedy])
        )
    return summary, greedy + sampled, rows


def item_rows(
    greedy: list[dict], sampled: list[dict], n: int, ks: tuple[int, ...], equivalent: Equivalence = exact_equal
) -> list[dict]:
    """One row per problem from its greedy record and its ``n`` sampled records (problem-major).

    Row: problem, key, prompt, answer, greedy ``correct`` and ``extracted`` (so the file serves
    ``eval --against`` as a ``--samples`` file does), the greedy ``completion`` text and its ``finish``
    reason, and with samples the first sample's text (``sample``) and ``n``, ``c`` (correct samples), ``avg@n`` =
    c/n, and per k the unbiased pass@k from all n samples (Chen et al. 2021; spec section 9),
    ``maj@k`` (0/1) and ``maj_answer@k``: the majority vote over the problem's *first* k samples
    (samples are i.i.d., so the first k are a random k-subset: an unbiased, higher-variance
    estimate of maj@k; :mod:`reasonrl.eval.majority` has the grouping and tie rules).
    """
    if len(sampled) != n * len(greedy):
        raise ValueError(f"item_rows: {len(sampled)} sampled records for {len(greedy)} problems x n = {n}")
    rows = []
    for p, g in enumerate(greedy):
        row = {k: g[k] for k in ("problem", "key", "prompt", "answer", "correct", "extracted", "completion", "finish")}
        if n > 0:
            mine = sampled[p * n : (p + 1) * n]
            c = sum(bool(r["correct"]) for r in mine)
            row.update(
                {
                    "sample": mine[0]["completion"],
                    "sample_correct": bool(mine[0]["correct"]),
                    "n": n,
                    "c": c,
                    f"avg@{n}": c / n,
                    **distinct_correct(mine),
                }
            )
            row.update({pass_key(k): pass_at_k(n, c, k) for k in ks})
            for k in ks:
                answer, ok = majority_vote_grouped(
                    [r["extracted"] for r in mine[:k]], [r["correct"] for r in mine[:k]], equivalent
                )
                row.update({f"maj@{k}": int(ok), f"maj_answer@{k}": answer})
        rows.append(row)
    return rows


def distinct_correct(samples: list[dict]) -> dict[str, int]:
    """How many different correct solutions a problem's samples hold: ``correct_chains``, distinct
    completion texts among the correct samples (the reasoning paths distribution matching spreads
    over), and ``correct_answers``, distinct extracted answers among them (1 when the task has one
    answer)."""
    right = [r for r in samples if r["correct"]]
    return {
        "correct_chains": len({r["completion"] for r in right}),
        "correct_answers": len({r["extracted"] for r in right}),
    }


def _shape_stats(greedy: list[dict], sampled: list[dict]) -> dict[str, float]:
    """Length, format (an answer could be extracted) and truncation rates of the greedy pass."""
    n = len(greedy)
    out = {
        "mean_length": sum(r["length"] for r in greedy) / n,
        "format_rate": sum(r["extracted"] is not None for r in greedy) / n,
        "truncation_rate": sum(r["finish"] == "length" for r in greedy) / n,
    }
    if sampled:
        out["sampled_mean_length"] = sum(r["length"] for r in sampled) / len(sampled)
    return out


def item_lines(records: list[dict]) -> str:
    """The greedy records, one JSON line each: problem key and correctness (what the paired tests need:
    ``reasonrl compare``, ``reasonrl eval --against``), the greedy completion's text and, when the
    evaluation sampled, the text of the problem's first sample (``sample``; why a score is what it is)."""
    keep = ("problem", "key", "mode", "score", "correct", "completion")
    first = {}
    for r in records:
        if r["mode"] == "sampled":
            first.setdefault(r["problem"], r["completion"])
    return "".join(
        json.dumps({**{k: r[k] for k in keep}, **({"sample": first[r["problem"]]} if r["problem"] in first else {})})
        + "\n"
        for r in records
        if r["mode"] == "greedy"
    )


def write_jsonl(rows: Iterable[dict], path: str | Path) -> Path:
    """Rows as JSON lines, written atomically (a killed process leaves the old file or none)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write_text(path, "".join(json.dumps(row) + "\n" for row in rows))


def items_path(json_path: str | Path) -> Path:
    """``NAME.items.jsonl`` beside a summary ``NAME.json`` (any suffix of the summary is replaced)."""
    path = Path(json_path)
    return path.with_name(path.stem + ".items.jsonl")
