"""Evaluate a model on a task's held-out split: greedy pass@1 plus sampled pass@k, avg@k, maj@k.

Both passes go through the same Generator as training, so what eval measures is what RL sees.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..rollout import Generator, HFEngine, SamplingParams
from ..seeds import stable_seed
from ..tasks import Item, Task, is_correct, take_items
from .metrics import avg_at_k, maj_at_k, mean_pass_at_k


@dataclass(frozen=True)
class EvalConfig:
    n_problems: int = 500
    k: int = 8  # sampled completions per problem; 0 = greedy only
    temperature: float = 1.0
    top_p: float = 1.0
    min_p: float = 0.0  # 0 = off
    max_new_tokens: int | None = None  # None: the task's own budget
    seed: int = 0
    max_rows: int = 512


def task_max_new_tokens(task: Task) -> int:
    return int(getattr(task, "max_new_tokens", 128))


def _records(items: list[Item], texts, reasons, lengths, task: Task, n: int, mode: str) -> list[dict]:
    out = []
    for r, text in enumerate(texts):
        item = items[r // n]
        score = task.verify(text, item.answer, item.meta)
        out.append({"problem": r // n, "key": item.key, "mode": mode, "prompt": item.prompt, "answer": item.answer,
                    "completion": text, "extracted": task.extract_answer(text), "score": score,
                    "correct": is_correct(score), "length": int(lengths[r]), "finish": reasons[r]})
    return out


def _generate(engine: Generator, items, n: int, sampling: SamplingParams, task, mode, progress) -> list[dict]:
    """Records of ``n`` samples per item. Sampled rows are keyed by ``sampling.seed`` and the
    problem's index, so the result does not depend on ``max_rows`` or on ranks sharing the work."""
    recs, step = [], max(1, getattr(engine, "max_rows", 512) // n)
    keyed = sampling.temperature > 0 and sampling.seed is not None
    for s in range(0, len(items), step):
        chunk = items[s:s + step]
        extra = {"seeds": [stable_seed(sampling.seed, "eval", s + i) for i in range(len(chunk))]} if keyed else {}
        ro = engine.generate([it.prompt for it in chunk], n, sampling, **extra)
        part = _records(chunk, ro.texts, ro.finish_reasons, ro.lengths.tolist(), task, n, mode)
        for rec in part:
            rec["problem"] += s
        recs += part
        if progress:
            progress(len(chunk) * n)
    return recs


def evaluate_model(model, tokenizer, task: Task, cfg: EvalConfig = EvalConfig(),
                   progress: Callable[[int], None] | None = None) -> tuple[dict[str, Any], list[dict]]:
    """:func:`evaluate` with the HF engine over ``model``."""
    return evaluate(HFEngine(model, tokenizer, max_rows=cfg.max_rows), task, cfg, progress)


def evaluate(engine: Generator, task: Task, cfg: EvalConfig = EvalConfig(),
             progress: Callable[[int], None] | None = None) -> tuple[dict[str, Any], list[dict]]:
    """Summary dict (keys as ``reasonrl eval --json`` writes) and one record per sample."""
    items = take_items(task, "test", cfg.n_problems, seed=cfg.seed)
    budget = cfg.max_new_tokens or task_max_new_tokens(task)
    greedy = _generate(engine, items, 1, SamplingParams(temperature=0, max_new_tokens=budget), task, "greedy", progress)
    summary: dict[str, Any] = {"pass@1": sum(r["correct"] for r in greedy) / len(items), "n_problems": len(items)}
    sampled: list[dict] = []
    if cfg.k > 0:
        sp = SamplingParams(temperature=cfg.temperature, top_p=cfg.top_p, min_p=cfg.min_p, max_new_tokens=budget,
                            seed=cfg.seed)
        sampled = _generate(engine, items, cfg.k, sp, task, "sampled", progress)
        correct = [[r["correct"] for r in sampled[i * cfg.k:(i + 1) * cfg.k]] for i in range(len(items))]
        answers = [[r["extracted"] for r in sampled[i * cfg.k:(i + 1) * cfg.k]] for i in range(len(items))]
        summary.update({f"pass@{cfg.k}": mean_pass_at_k(correct, cfg.k), f"avg@{cfg.k}": avg_at_k(correct),
                        f"maj@{cfg.k}": maj_at_k(answers, correct)})
    summary.update(_shape_stats(greedy, sampled))
    diagnostics = getattr(task, "diagnostics", None)  # optional: task-specific rates (e.g. TEMPO's leakage)
    if diagnostics is not None:
        summary.update(diagnostics([r["completion"] for r in greedy], [it.meta for it in items],
                                   [r["score"] for r in greedy]))
    return summary, greedy + sampled


def _shape_stats(greedy: list[dict], sampled: list[dict]) -> dict[str, float]:
    """Length, format (an answer could be extracted) and truncation rates of the greedy pass."""
    n = len(greedy)
    out = {"mean_length": sum(r["length"] for r in greedy) / n,
           "format_rate": sum(r["extracted"] is not None for r in greedy) / n,
           "truncation_rate": sum(r["finish"] == "length" for r in greedy) / n}
    if sampled:
        out["sampled_mean_length"] = sum(r["length"] for r in sampled) / len(sampled)
    return out


def item_lines(records: list[dict]) -> str:
    """The greedy records, one small JSON line each (problem key and correctness): what the paired
    tests need (``reasonrl compare``, ``reasonrl eval --against``), without the completions."""
    keep = ("problem", "key", "mode", "score", "correct")
    return "".join(json.dumps({k: r[k] for k in keep}) + "\n" for r in records if r["mode"] == "greedy")


def write_samples(records: list[dict], path: str | Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for rec in records:
            f.write(json.dumps(rec) + "\n")
