"""Drafts from a weak model for a task's train problems (``reasonrl drafts make``; spec 9 (b) 1).

The spec samples 32 drafts per problem (T = 0.8, top-p 0.95) from a small model and keeps them all;
the dataset builder then picks one per problem by tiers. Each draft is judged here: ``correct`` by
the task's verifier, ``quasi`` when the last number of the draft equals the reference answer
(the right answer without the task's format, the spec's "quasi-correct").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..rewards.answers import extract_last_number, normalize_number
from ..rollout import HFEngine, SamplingParams
from ..seeds import stable_seed
from ..tasks import Item, is_correct, take_items
from ..tasks.protocols import budget as task_budget
from .draft_files import DraftEntry, draft_line
from .draft_task import UNIVERSE_SEED


def quasi_correct(text: str, answer: str) -> bool:
    """The draft's last number equals the (numeric) reference answer; False for a non-numeric answer."""
    got, want = normalize_number(extract_last_number(text)), normalize_number(answer)
    return want is not None and got == want


@dataclass(frozen=True)
class DraftSample:
    key: str
    text: str
    correct: bool
    quasi: bool


def make_drafts(
    model,
    tokenizer,
    task: Any,
    n_problems: int,
    samples: int,
    temperature: float = 0.8,
    top_p: float = 0.95,
    max_new_tokens: int | None = None,
    seed: int = 0,
    max_rows: int = 512,
) -> list[DraftSample]:
    """``samples`` drafts for each of the first ``n_problems`` distinct train problems of ``task``'s
    stream (seed :data:`~reasonrl.data.draft_task.UNIVERSE_SEED`, where the drafts recipe looks them up)."""
    items: list[Item] = take_items(task, "train", n_problems, seed=UNIVERSE_SEED)
    budget = max_new_tokens or task_budget(task)
    sp = SamplingParams(temperature=temperature, top_p=top_p, max_new_tokens=budget)
    engine = HFEngine(model, tokenizer, max_rows=max_rows)
    ro = engine.generate(
        [it.prompt for it in items], samples, sp, seeds=[stable_seed(seed, "draft", it.key) for it in items]
    )
    out = []
    for i, text in enumerate(
        ro.texts
    ):  # rows are item-major: item i's samples are rows i*samples .. i*samples+samples-1
        it = items[i // samples]
        correct = is_correct(task.verify(text, it.answer, it.meta))
        out.append(DraftSample(it.key, text, correct, correct or quasi_correct(text, it.answer)))
    return out


BUILTIN = "builtin"  # `drafts make --model builtin`, and the drafts recipe without drafts.file
BUILTIN_PROBLEMS, BUILTIN_SAMPLES = 512, 4  # `drafts make`'s defaults
MAX_EDITS = 8  # digit changes of a built-in draft at most


def builtin_drafts(
    task: Any, n_problems: int = BUILTIN_PROBLEMS, samples: int = BUILTIN_SAMPLES, seed: int = 0
) -> list[DraftSample]:
    """The built-in weak drafter, no model: each draft is the problem's own demonstration with digits
    of its steps changed one at a time (:func:`reasonrl.tasks.guidance.corrupt_digit`, seeded by the
    problem's key and the sample) until the verifier rejects it, at most ``MAX_EDITS`` changes (a
    change inside the working alone leaves the answer right); judged by the verifier as a model's
    draft is. It stands in for the spec's small math model (9 (b) 1) where none is at hand: a
    formatted, wrong draft that is instant and the same on every machine. [inferred here]"""
    import random

    items: list[Item] = take_items(task, "train", n_problems, seed=UNIVERSE_SEED)
    out = []
    for it in items:
        if not it.demo:
            raise ValueError(f"the built-in drafter needs the task's demonstrations; item {it.key!r} has none")
        for j in range(samples):
            text, correct = wrong_version(task, it, random.Random(stable_seed(seed, "builtin-draft", it.key, j)))
            out.append(DraftSample(it.key, text, correct, correct or quasi_correct(text, it.answer)))
    return out


def wrong_version(task: Any, item: Item, rng: Any) -> tuple[str, bool]:
    """``item``'s demonstration with digits of its steps changed one at a time until the verifier
    rejects it (at most ``MAX_EDITS`` changes), and whether it is still correct."""
    from ..tasks import guidance

    text, correct = item.demo, True
    for _ in range(MAX_EDITS):
        text = guidance.corrupt_digit(task, text, rng)
        correct = is_correct(task.verify(text, item.answer, item.meta))
        if not correct:
            break
    return text, correct


def draft_table(drafts: list[DraftSample]) -> dict[str, list[DraftEntry]]:
    """Drafts as :func:`reasonrl.data.draft_files.load_drafts` returns a file's rows (by key, in order)."""
    out: dict[str, list[DraftEntry]] = {}
    for n, d in enumerate(drafts, 1):
        out.setdefault(d.key, []).append(DraftEntry(d.text, d.correct, d.quasi, n))
    return out


def drafter_summary(drafts: list[DraftSample]) -> dict[str, float]:
    """Draft accuracy (strict), the quasi-only share, and per problem: the share with a definitely
    wrong draft (tier 1 of a wrong pick) and with only correct drafts (tier 3)."""
    by_key: dict[str, list[DraftSample]] = {}
    for d in drafts:
        by_key.setdefault(d.key, []).append(d)
    n, p = max(len(drafts), 1), max(len(by_key), 1)
    return {
        "problems": float(len(by_key)),
        "drafts": float(len(drafts)),
        "draft_accuracy": sum(d.correct for d in drafts) / n,
        "quasi_only_frac": sum(d.quasi and not d.correct for d in drafts) / n,
        "problems_with_wrong_draft": sum(any(not d.quasi for d in ds) for ds in by_key.values()) / p,
        "problems_all_correct": sum(all(d.correct for d in ds) for ds in by_key.values()) / p,
    }


def draft_lines(drafts: list[DraftSample]) -> str:
    return "".join(draft_line(d.key, d.text, d.correct, d.quasi) for d in drafts)


__all__ = [
    "BUILTIN",
    "DraftSample",
    "builtin_drafts",
    "wrong_version",
    "draft_lines",
    "draft_table",
    "drafter_summary",
    "make_drafts",
    "quasi_correct",
]
