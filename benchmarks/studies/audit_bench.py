"""Contamination audit (``reasonrl audit``) measured: counts, seconds, memory.

    PYTHONPATH=src python benchmarks/studies/audit_bench.py [--parts a,b,c] [--scale-train 100000 --scale-eval 10000]

(a) the built-in arithmetic task, train split vs test split (disjoint by construction): stage 1
    (5-gram Jaccard >= 0.4) and stage 2 (MiniLM cosine >= 0.85, and the count at other thresholds);
(b) a planted set (benchmarks/studies/audit_planted.py): 12 near-duplicates and 12 paraphrases of eval
    items mixed into 200 reasoning-gym filler problems: what each stage finds at 0.85, the
    threshold at which every paraphrase is found and the false positives there;
(c) stage 1 at scale on synthetic templated texts, exact (inverted index) and MinHash/LSH, each in
    its own process: seconds and peak RSS (ru_maxrss), and whether both find the same pairs.
Prints a table per part and merges the results into benchmarks/results/audit_bench.json.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from audit_planted import EVAL, NEAR_DUP, PARAPHRASE  # noqa: E402

from reasonrl.eval.audit import ContaminationAuditor, EmbeddingStage, JaccardStage  # noqa: E402
from reasonrl.eval.audit_io import from_pairs, load_items  # noqa: E402
from reasonrl.eval.audit_sim import cosine_pairs, jaccard_pairs, minhash_pairs  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "results" / "audit_bench.json"
console = Console()


class CachingEmbedder:
    """The packaged MiniLM, remembering its last outputs so a threshold sweep needs no re-embedding."""

    def __init__(self):
        from reasonrl.eval.audit_models import SentenceEmbedder

        t0 = time.perf_counter()
        self.model = SentenceEmbedder()
        self.load_seconds = round(time.perf_counter() - t0, 2)
        self.outputs: list[np.ndarray] = []

    def __call__(self, texts):
        self.outputs.append(self.model(texts))
        return self.outputs[-1]


def part_a(emb: CachingEmbedder, n_train: int, n_eval: int) -> dict:
    train, evals = load_items("arithmetic:train", n=n_train), load_items("arithmetic:test", n=n_eval)
    res = ContaminationAuditor([JaccardStage(0.4), EmbeddingStage(emb, 0.85)]).run(train, evals)
    a, b = emb.outputs[-2], emb.outputs[-1]
    sweep = {str(t): len(cosine_pairs(a, b, t)) for t in (0.85, 0.9, 0.95, 0.99)}
    embed_pairs = [p for p in res.pairs if p["stage"] == "embed"]
    examples = sorted(embed_pairs, key=lambda p: -p["score"])[:3] + embed_pairs[:2]
    return {
        "n_train": n_train,
        "n_eval": n_eval,
        "counts": res.counts,
        "seconds": res.seconds,
        "embed_pairs_by_threshold": sweep,
        "embed_model_load_seconds": emb.load_seconds,
        "eval_items_with_an_embed_neighbour": len({p["eval_id"] for p in embed_pairs}),
        "shared_train_eval_ids": len(set(train.ids) & set(evals.ids)),
        "examples": [{k: p[k] for k in ("train_id", "eval_id", "score")} for p in examples],
    }


def filler(n_each: int = 70) -> list[str]:
    import reasoning_gym as rg

    out = []
    for name in ("gsm_symbolic", "time_intervals", "leg_counting"):
        out += [e["question"] for e in rg.create_dataset(name, size=n_each, seed=7)]
    return out


def part_b(emb: CachingEmbedder) -> dict:
    rows = [(f"fill{i}", t) for i, t in enumerate(filler())]
    rows += [(f"dup{i}", t) for i, t in enumerate(NEAR_DUP)] + [(f"para{i}", t) for i, t in enumerate(PARAPHRASE)]
    random.Random(0).shuffle(rows)
    planted = {f"dup{i}": f"e{i}" for i in range(12)} | {f"para{i}": f"e{12 + i}" for i in range(12)}
    train, evals = (
        from_pairs(rows, "planted train"),
        from_pairs([(f"e{i}", t) for i, t in enumerate(EVAL)], "planted eval"),
    )
    res = ContaminationAuditor([JaccardStage(0.4), EmbeddingStage(emb, 0.85)]).run(train, evals)
    a, b = emb.outputs[-2], emb.outputs[-1]
    sims = a @ b.T  # (N, M) MiniLM rows are unit-norm
    row, col = {t: i for i, t in enumerate(train.ids)}, {e: j for j, e in enumerate(evals.ids)}
    cos = {t: float(sims[row[t], col[e]]) for t, e in planted.items()}
    found = {(p["stage"], p["train_id"]) for p in res.pairs if planted.get(p["train_id"]) == p["eval_id"]}
    false_pos = [p for p in res.pairs if planted.get(p["train_id"]) != p["eval_id"]]
    t_all = min(cos[f"para{i}"] for i in range(12))  # every paraphrase found at cosine >= t_all
    fp_at = int((sims >= t_all).sum()) - sum(cos[t] >= t_all for t in planted)
    mh = minhash_pairs(train.texts, evals.texts, 0.4)
    return {
        "n_train": len(train),
        "n_eval": len(evals),
        "counts": res.counts,
        "seconds": res.seconds,
        "near_dup_found": {s: sum((s, f"dup{i}") in found for i in range(12)) for s in ("jaccard", "embed")},
        "paraphrase_found": {s: sum((s, f"para{i}") in found for i in range(12)) for s in ("jaccard", "embed")},
        "false_positives_at_0.85": len(false_pos),
        "paraphrase_cosine": {"min": round(t_all, 4), "max": round(max(cos[f"para{i}"] for i in range(12)), 4)},
        "near_dup_cosine_min": round(min(cos[f"dup{i}"] for i in range(12)), 4),
        "threshold_all_paraphrases": round(t_all, 4),
        "false_positives_at_that_threshold": fp_at,
        "max_cosine_filler_vs_eval": round(
            float(max(sims[row[t]].max() for t in train.ids if t.startswith("fill"))), 4
        ),
        "minhash_jaccard_pairs": len(mh),
        "exact_jaccard_pairs": res.counts["jaccard"],
    }


def synthetic(n_train: int, n_eval: int, seed: int = 0) -> tuple[list[str], list[str], list[tuple[int, int]]]:
    """Templated texts: one of 50 six-word prefixes + 15-25 words of a 20k vocabulary; 200 planted
    near-duplicates (one word of an eval text replaced) appended to the train set."""
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(20000)]
    prefixes = [" ".join(rng.choice(vocab) for _ in range(6)) for _ in range(50)]

    def text():
        return rng.choice(prefixes) + " " + " ".join(rng.choice(vocab) for _ in range(rng.randint(15, 25)))

    evals = [text() for _ in range(n_eval)]
    train = [text() for _ in range(n_train - 200)]
    planted = []
    for j in rng.sample(range(n_eval), 200):
        words = evals[j].split()
        words[-3] = "changed"
        planted.append((len(train), j))
        train.append(" ".join(words))
    return train, evals, planted


def scale_worker(method: str, n_train: int, n_eval: int) -> None:
    train, evals, planted = synthetic(n_train, n_eval)
    base_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    pairs = jaccard_pairs(train, evals, 0.4) if method == "exact" else minhash_pairs(train, evals, 0.4)
    seconds = time.perf_counter() - t0
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    got = {(i, j) for i, j, _ in pairs}
    print(
        json.dumps(
            {
                "method": method,
                "seconds": round(seconds, 1),
                "rss_after_texts_mb": round(base_kb / 1024),
                "peak_rss_mb": round(peak_kb / 1024),
                "pairs": len(pairs),
                "planted_recall": sum(p in got for p in planted) / len(planted),
                "pair_list": sorted([i, j] for i, j in got),
            }
        )
    )


def part_c(n_train: int, n_eval: int) -> dict:
    out = {"n_train": n_train, "n_eval": n_eval}
    for method in ("exact", "minhash"):
        proc = subprocess.run(
            [sys.executable, __file__, "--worker", method, "--scale-train", str(n_train), "--scale-eval", str(n_eval)],
            capture_output=True,
            text=True,
            check=True,
        )
        out[method] = json.loads(proc.stdout.strip().splitlines()[-1])
    same = out["exact"].pop("pair_list") == out["minhash"].pop("pair_list")
    out["minhash_pairs_equal_exact"] = same
    return out


def show(title: str, rows: dict) -> None:
    table = Table(title=title)
    table.add_column("measure")
    table.add_column("value", justify="right")
    for k, v in rows.items():
        table.add_row(k, json.dumps(v) if isinstance(v, (dict, list)) else str(v))
    console.print(table)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--parts", default="a,b,c")
    ap.add_argument("--arith-train", type=int, default=2000)
    ap.add_argument("--arith-eval", type=int, default=200)
    ap.add_argument("--scale-train", type=int, default=100_000)
    ap.add_argument("--scale-eval", type=int, default=10_000)
    ap.add_argument("--worker", default=None)
    args = ap.parse_args()
    if args.worker:
        return scale_worker(args.worker, args.scale_train, args.scale_eval)
    results = json.loads(OUT.read_text()) if OUT.exists() else {}
    parts = args.parts.split(",")
    emb = CachingEmbedder() if {"a", "b"} & set(parts) else None
    if "a" in parts:
        results["a_arithmetic"] = part_a(emb, args.arith_train, args.arith_eval)
        show("(a) arithmetic train vs test", results["a_arithmetic"])
    if "b" in parts:
        results["b_planted"] = part_b(emb)
        show("(b) planted near-duplicates and paraphrases", results["b_planted"])
    if "c" in parts:
        results["c_scale"] = part_c(args.scale_train, args.scale_eval)
        show("(c) stage 1 at scale", results["c_scale"])
    results["machine"] = "2 shared CPU cores (load from other jobs), torch CPU"
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
