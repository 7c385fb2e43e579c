"""The three-stage contamination audit of Physics-R1 (spec envs-selfplay-eval.md section 7(b)).

``ContaminationAuditor(stages=[JaccardStage(0.4), EmbeddingStage(embed, 0.85), JudgeStage(judge)])``
(or the names ``"jaccard"``, ``"embed"``, ``"judge"``, in that order, any subset that does not start
with the judge):

1. **jaccard** -- word 5-gram Jaccard >= 0.4 over every train x eval pair (exact inverted index, or
   MinHash/LSH re-scored exactly: :mod:`.audit_sim`);
2. **embed** -- sentence-embedding cosine >= 0.85 over the pairs stage 1 did NOT flag (a recall pass);
3. **judge** -- an LLM labels every pair stage 1 OR stage 2 flagged as near-duplicate, paraphrase or
   same-topic-only (the spec sends it the stage-2 candidates; the stage-1 pairs go too, so that a
   templated 5-gram overlap can be cleared by the judge as well).

A pair *links* its train item to the eval set when the judge labels it near-duplicate or paraphrase,
or, without a judge, when any stage flagged it. The cleaned training set drops every linked train
item (spec: "drops every train item linked to any eval item"). :meth:`ContaminationAuditor.write`
writes ``audit.json`` (format: AUDIT_SCHEMA, read by ``reasonrl report``), ``pairs.jsonl`` (one
flagged pair per line: stage, train_id, eval_id, score, label when judged, linked) and the cleaned set.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence, Union

from ..errors import UserError
from .audit_io import AuditItems, from_pairs, load_items, write_cleaned
from .audit_models import CONTAMINATION, embed_texts, make_embedder, make_judge, parse_verdict
from .audit_sim import cosine_pairs, jaccard_pairs, minhash_pairs

STAGE_ORDER = ("jaccard", "embed", "judge")
Source = Union[str, AuditItems, Sequence[tuple[str, str]]]


@dataclass
class JaccardStage:
    threshold: float = 0.4
    k: int = 5
    method: str = "exact"  # "exact" (inverted index) | "minhash" (datasketch LSH, re-scored exactly)
    name = "jaccard"

    def __post_init__(self):
        if self.method not in ("exact", "minhash"):
            raise UserError(f"jaccard method must be 'exact' or 'minhash', got {self.method!r}")
        _check_threshold("jaccard", self.threshold)

    def find(self, train: AuditItems, evals: AuditItems) -> list[tuple[int, int, float]]:
        fn = jaccard_pairs if self.method == "exact" else minhash_pairs
        return fn(train.texts, evals.texts, threshold=self.threshold, k=self.k)


@dataclass
class EmbeddingStage:
    embed: Any = None  # None (packaged MiniLM) | a local model directory | a callable list[str] -> (n, d)
    threshold: float = 0.85
    name = "embed"

    def __post_init__(self):
        _check_threshold("embed", self.threshold)

    def find(self, train: AuditItems, evals: AuditItems, exclude: set[tuple[int, int]]) -> list[tuple[int, int, float]]:
        fn = make_embedder(self.embed)
        a, b = embed_texts(fn, train.texts, "train"), embed_texts(fn, evals.texts, "eval")  # (N, d), (M, d)
        return cosine_pairs(a, b, self.threshold, exclude=exclude)


@dataclass
class JudgeStage:
    judge: Any  # a local causal LM directory | a callable (train_text, eval_text) -> str
    name = "judge"

    def labels(self, train: AuditItems, evals: AuditItems, pairs: list[dict]) -> list[str]:
        if not pairs:  # nothing flagged: no model to load
            return []
        fn = make_judge(self.judge)
        return [
            parse_verdict(
                fn(train.texts[p["i"]], evals.texts[p["j"]]), f"train id {p['train_id']!r} / eval id {p['eval_id']!r}"
            )
            for p in pairs
        ]


def _check_threshold(stage: str, value: float) -> None:
    if not 0.0 < value <= 1.0:
        raise UserError(f"{stage} threshold must be in (0, 1], got {value}")


def make_stages(stages: Sequence[Any]) -> list[Any]:
    """Names -> default stages; checks the order jaccard, embed, judge and that the judge has candidates."""
    built = []
    for s in stages:
        if isinstance(s, str):
            if s not in STAGE_ORDER:
                raise UserError(f"unknown audit stage {s!r}; valid: {list(STAGE_ORDER)}")
            if s == "judge":
                raise UserError("the judge stage needs a judge: JudgeStage(callable or model dir) / --judge-model")
            s = JaccardStage() if s == "jaccard" else EmbeddingStage()
        if getattr(s, "name", None) not in STAGE_ORDER:
            raise UserError(f"not an audit stage: {s!r}")
        built.append(s)
    names = [s.name for s in built]
    if not names or names != sorted(set(names), key=STAGE_ORDER.index):
        raise UserError(f"audit stages {names}: give each at most once, in the order {list(STAGE_ORDER)}")
    if names == ["judge"]:
        raise UserError("the judge only sees pairs flagged by jaccard or embed: run at least one of them first")
    return built


@dataclass
class AuditResult:
    train: AuditItems
    eval: AuditItems
    stages: list[str]
    thresholds: dict[str, float]
    pairs: list[dict]  # i, j, stage, train_id, eval_id, score, [label], linked
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def linked_train(self) -> set[str]:
        return {p["train_id"] for p in self.pairs if p["linked"]}

    @property
    def counts(self) -> dict[str, int]:
        out = {s: sum(p["stage"] == s for p in self.pairs) for s in self.stages if s != "judge"}
        if "judge" in self.stages:
            out["judge"] = sum(p.get("label") in CONTAMINATION for p in self.pairs)
        linked = len(self.linked_train)
        return {**out, "linked_train": linked, "kept_train": len(self.train) - linked}


class ContaminationAuditor:
    def __init__(self, stages: Sequence[Any] = ("jaccard", "embed")):
        self.stages = make_stages(stages)

    def run(self, train: Source, evals: Source, log: Callable[[str], None] | None = None) -> AuditResult:
        """All stages on ``train`` x ``evals`` (items, ``[(id, text)]`` or a source spec for load_items)."""
        train, evals = _items(train, "train"), _items(evals, "eval")
        names = [s.name for s in self.stages]
        res = AuditResult(
            train, evals, names, {s.name: s.threshold for s in self.stages if hasattr(s, "threshold")}, []
        )
        t_all = time.perf_counter()
        for stage in self.stages:
            t0 = time.perf_counter()
            if log:
                log(f"{stage.name}: {len(train)} train x {len(evals)} eval")
            if stage.name == "judge":
                for p, label in zip(res.pairs, stage.labels(train, evals, res.pairs)):
                    p["label"] = label
            else:
                exclude = {(p["i"], p["j"]) for p in res.pairs}
                found = stage.find(train, evals, exclude) if stage.name == "embed" else stage.find(train, evals)
                res.pairs += [
                    {
                        "i": i,
                        "j": j,
                        "stage": stage.name,
                        "train_id": train.ids[i],
                        "eval_id": evals.ids[j],
                        "score": round(s, 6),
                    }
                    for i, j, s in found
                ]
            res.seconds[stage.name] = round(time.perf_counter() - t0, 3)
        judged = "judge" in names
        for p in res.pairs:
            p["linked"] = p.get("label") in CONTAMINATION if judged else True
        res.seconds["total"] = round(time.perf_counter() - t_all, 3)
        return res

    def write(self, res: AuditResult, out_dir: str | Path) -> Path:
        """``audit.json``, ``pairs.jsonl`` and the cleaned training set under ``out_dir``."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        with open(out / "pairs.jsonl", "w", encoding="utf-8") as fh:
            for p in res.pairs:
                fh.write(json.dumps({k: v for k, v in p.items() if k not in ("i", "j")}) + "\n")
        cleaned = write_cleaned(res.train, res.linked_train, out)
        summary = {
            "train": {"source": res.train.source, "n": len(res.train)},
            "eval": {"source": res.eval.source, "n": len(res.eval)},
            "stages": res.stages,
            "thresholds": res.thresholds,
            "counts": res.counts,
            "seconds": res.seconds,
            "pairs_file": "pairs.jsonl",
            "cleaned_file": cleaned,
        }
        (out / "audit.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
        return out / "audit.json"

    def audit(self, train: Source, evals: Source, out_dir: str | Path) -> AuditResult:
        res = self.run(train, evals)
        self.write(res, out_dir)
        return res


def _items(src: Source, side: str) -> AuditItems:
    if isinstance(src, AuditItems):
        return src
    if isinstance(src, (str, Path)):
        return load_items(str(src))
    return from_pairs(list(src), source=f"{side} (in memory)")
