"""Preference pairs for a Bradley-Terry reward model: built from a scripted judge, read from JSONL.

A pairs file holds one JSON object per line: ``prompt``, ``chosen``, ``rejected`` (texts; the
completions without the prompt) and optionally ``margin`` (how much more ``chosen`` is preferred,
TRL's reward-trainer column). :func:`read_pairs` checks every line and names the first bad one.

:func:`judged_pairs` makes such a file for a task with a scripted judge (``explain``): per prompt,
candidates are the model's own samples plus the task's edits of its canonical working
(``task.variants``); the judge ranks them (``task.judge``) and up to ``per_prompt`` pairs with
different verdicts are drawn, the better side as ``chosen``. Model samples make the reward model
see the policy's distribution; the edits make it see every way an answer can be worse.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from ..errors import MissingPathError, UserError
from ..rollout import HFEngine, SamplingParams
from ..seeds import stable_seed
from ..tasks import Item, in_test_split, take_items
from ..tasks.protocols import Judged, budget, provides

FIELDS = ("prompt", "chosen", "rejected")


def read_pairs(path: str | Path) -> list[dict[str, Any]]:
    """Every pair of a JSONL file, checked: the three text fields, an optional finite ``margin``."""
    path = Path(path)
    if not path.is_file():
        raise MissingPathError(f"pairs file {str(path)!r} does not exist (make one with `reasonrl rm pairs`)")
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise UserError(f"{path}:{n}: not JSON ({err.msg})") from None
        bad = [k for k in FIELDS if not isinstance(row.get(k) if isinstance(row, dict) else None, str)]
        if bad:
            raise UserError(f"{path}:{n}: a pair needs text fields {list(FIELDS)}; missing or not text: {bad}")
        margin = row.get("margin", 0.0)
        if isinstance(margin, bool) or not isinstance(margin, (int, float)) or margin != margin:
            raise UserError(f"{path}:{n}: 'margin' must be a number, got {margin!r}")
        out.append(
            {"prompt": row["prompt"], "chosen": row["chosen"], "rejected": row["rejected"], "margin": float(margin)}
        )
    if not out:
        raise UserError(f"pairs file {path} holds no pairs")
    return out


def pair_lines(pairs: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(p) + "\n" for p in pairs)


def judged_pairs(
    model,
    tok,
    task: Any,
    n_prompts: int,
    samples: int = 4,
    per_prompt: int = 4,
    temperature: float = 1.0,
    seed: int = 0,
    max_rows: int = 512,
) -> list[dict[str, Any]]:
    """Up to ``per_prompt`` judged pairs for each of ``n_prompts`` train problems of ``task`` (see the
    module notes); ``samples`` model completions per prompt join the task's edits."""
    if not provides(task, Judged):
        raise UserError(
            f"task {task.name!r} has no scripted judge (judge, variants): bring your own pairs file "
            "(JSONL with prompt, chosen, rejected) to `reasonrl rm train`"
        )
    items: list[Item] = take_items(task, "train", n_prompts, seed=seed)
    texts: list[list[str]] = [[] for _ in items]
    if samples:
        sp = SamplingParams(temperature=temperature, max_new_tokens=budget(task))
        ro = HFEngine(model, tok, max_rows=max_rows).generate(
            [it.prompt for it in items], samples, sp, seeds=[stable_seed(seed, "rm-pairs", it.key) for it in items]
        )
        for r, text in enumerate(ro.texts):  # item-major rows
            texts[r // samples].append(text)
    out = []
    for it, sampled in zip(items, texts):
        rng = random.Random(stable_seed(seed, "rm-pairs-pick", it.key))
        out += _pairs_of(task, it, sampled + task.variants(it, rng), per_prompt, rng)
    return out


def _pairs_of(task: Any, item: Item, candidates: list[str], per_prompt: int, rng: random.Random) -> list[dict]:
    """Up to ``per_prompt`` distinct (better, worse) pairs among ``candidates`` by the task's judge."""
    unique = list(dict.fromkeys(candidates))
    verdicts = [task.judge(item, c) for c in unique]
    ordered = [(i, j) for i in range(len(unique)) for j in range(len(unique)) if verdicts[i] > verdicts[j]]
    picked = rng.sample(ordered, min(per_prompt, len(ordered)))
    return [{"prompt": item.prompt, "chosen": unique[i], "rejected": unique[j]} for i, j in picked]


def split_pairs(pairs: list[dict[str, Any]], eval_frac: float, seed: int = 0) -> tuple[list[dict], list[dict]]:
    """(train, held-out) by a seeded hash of each pair's prompt, so every pair of a prompt falls on one
    side and the held-out accuracy is measured on prompts the model was not trained on."""
    held = [in_test_split(p["prompt"], eval_frac, salt=f"reasonrl-rm-split-{seed}") for p in pairs]
    return [p for p, h in zip(pairs, held) if not h], [p for p, h in zip(pairs, held) if h]
