"""Sections a run page and a compare page share: completions, the audit summary, a config, and
the before/after table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from .folders import read_jsonl
from .html import Raw, details, esc, fmt, note, pre, section, table, tag

AUDIT_PAIRS_SHOWN = 10


def sample_block(rec: dict[str, Any]) -> Raw:
    """One completion with its prompt, reference answer and verdict; every field escaped."""
    verdict = tag("span", "correct" if rec.get("correct") else "wrong", "ok" if rec.get("correct") else "bad")
    meta = (
        f"key {esc(rec.get('key', '-'))} · answer {esc(rec.get('answer', '-'))} · extracted "
        f"{esc(rec.get('extracted'))} · score {esc(fmt(rec.get('score')))} · {esc(rec.get('length', '-'))} tokens"
        f" ({esc(rec.get('finish', '-'))})"
    )
    return Raw(
        f'<div class="sample">{verdict} <span class="meta">{meta}</span>'
        f'<div class="pc"><div><span class="meta">prompt</span>{pre(rec.get("prompt", ""))}</div>'
        f'<div><span class="meta">completion</span>{pre(rec.get("completion", ""))}</div></div></div>'
    )


def training_block(rec: dict[str, Any]) -> Raw:
    """One logged training rollout (``completions.jsonl``): its rewards, advantage and texts; every field escaped."""
    terms = " · ".join(f"{esc(name)} {esc(fmt(v))}" for name, v in (rec.get("rewards") or {}).items())
    verdict = tag("span", "correct" if rec.get("correct") else "wrong", "ok" if rec.get("correct") else "bad")
    meta = (
        f"step {esc(rec.get('step', '-'))} · group {esc(rec.get('group', '-'))} sample {esc(rec.get('sample', '-'))}"
        f" · key {esc(rec.get('key', '-'))} · answer {esc(rec.get('answer', '-'))} · reward "
        f"{esc(fmt(rec.get('reward')))} ({terms}) · advantage {esc(fmt(rec.get('advantage')))} · "
        f"{esc(rec.get('length', '-'))} tokens ({esc(rec.get('finish', '-'))})"
    )
    return Raw(
        f'<div class="sample">{verdict} <span class="meta">{meta}</span>'
        f'<div class="pc"><div><span class="meta">prompt as the model saw it</span>{pre(rec.get("prompt", ""))}'
        f'</div><div><span class="meta">completion</span>{pre(rec.get("completion", ""))}</div></div></div>'
    )


def training_parts(rows: list[dict[str, Any]] | None, where: str, steps: int = 3) -> list[str]:
    """The rollouts ``completions.jsonl`` logged in the last ``steps`` steps, newest first, or why there are none."""
    if rows is None:
        return [
            note(
                f"No completions.jsonl in {where}: a run written before reasonrl logged training rollouts, "
                "or one with log_completions=0."
            )
        ]
    if not rows:
        return [note(f"completions.jsonl in {where} holds no row yet.")]
    last = sorted({r["step"] for r in rows})[-steps:]
    shown = [r for r in reversed(rows) if r["step"] in last]
    return [
        note(
            f"Training rollouts logged by log_completions in the last {len(last)} logged steps "
            f"({len(shown)} of {len(rows)} rows in completions.jsonl), newest first: the prompt decoded from "
            "its token ids, the completion, the total reward and each reward's value, the advantage."
        ),
        *[training_block(r) for r in shown],
    ]


def samples_parts(samples: list[dict[str, Any]] | None, where: str) -> list[str]:
    """Correct and wrong completions of the final greedy evaluation, or why there are none."""
    if samples is None:
        return [
            note(
                f"No samples.jsonl in {where}: a run written before reasonrl saved completion samples, or "
                "one that has not finished (or ran with final_eval_problems=0)."
            )
        ]
    if not samples:
        return [note(f"samples.jsonl in {where} is empty (no greedy completion was evaluated).")]
    right = [s for s in samples if s.get("correct")]
    wrong = [s for s in samples if not s.get("correct")]
    return [
        note(
            f"Greedy completions of the final evaluation: the first {len(right)} correct and the first "
            f"{len(wrong)} wrong held-out problems (problem order; samples.jsonl)."
        ),
        details(f"correct ({len(right)})", *[sample_block(s) for s in right], open_=True),
        details(f"wrong ({len(wrong)})", *[sample_block(s) for s in wrong], open_=True),
    ]


def config_yaml(config: dict[str, Any]) -> Raw:
    return pre(yaml.safe_dump(config, sort_keys=False))


def before_after_table(before: dict[str, Any] | None, after: dict[str, Any] | None) -> Raw:
    """Every metric of the before/after evaluations (``reasonrl eval --json`` keys) and the change."""
    before, after = before or {}, after or {}
    rows = []
    for key in list(after) + [k for k in before if k not in after]:
        b, a = before.get(key), after.get(key)
        change = fmt(a - b) if isinstance(a, float) and isinstance(b, float) else ""
        rows.append((key, fmt(b), fmt(a), change))
    return table(("metric", "before", "after", "change"), rows)


def _audit_pairs(audit_path: Path, audit: dict[str, Any]) -> list[str]:
    name = audit.get("pairs_file")
    if not name:
        return []
    path = audit_path.parent / name
    if not path.is_file():
        return [note(f"pairs file {name} is not beside audit.json")]
    pairs = read_jsonl(path)
    cols = ("stage", "train_id", "eval_id", "score", "label")
    rows = [[fmt(p.get(c)) for c in cols] for p in pairs[:AUDIT_PAIRS_SHOWN]]
    return [tag("h3", f"flagged pairs ({len(pairs)}; the first {len(rows)} shown)"), table(cols, rows, left=3)]


def audit_section(audit_path: Path | None, audit: dict[str, Any] | None) -> Raw:
    """The contamination audit's summary (AUDIT_SCHEMA: counts per stage, thresholds, timings)."""
    if audit is None or audit_path is None:
        return section(
            "audit",
            "Contamination audit",
            note(
                "No audit.json here (nor audit/audit.json): run `reasonrl audit --train T --eval E "
                "--out DIR/audit` to check the training set against the held-out set."
            ),
        )
    sets = [(k, audit.get(k, {}).get("source", "-"), fmt(audit.get(k, {}).get("n"))) for k in ("train", "eval")]
    thresholds, counts, seconds = audit.get("thresholds") or {}, audit["counts"], audit["seconds"]
    stages = [(s, fmt(thresholds.get(s)), fmt(counts.get(s)), fmt(seconds.get(s))) for s in audit["stages"]]
    stages.append(("total", "", "", fmt(seconds.get("total"))))
    removed = (
        f"{fmt(counts.get('linked_train'))} training items linked to an evaluation item and removed; "
        f"{fmt(counts.get('kept_train'))} kept"
        + (f" (cleaned set: {audit['cleaned_file']})." if audit.get("cleaned_file") else ".")
    )
    return section(
        "audit",
        "Contamination audit",
        note(f"From {audit_path}."),
        table(("set", "source", "items"), sets, left=2),
        table(("stage", "threshold", "pairs flagged", "seconds"), stages),
        tag("p", removed),
        *_audit_pairs(audit_path, audit),
    )
