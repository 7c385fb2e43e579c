"""Similarity maths of the contamination audit (Physics-R1, spec envs-selfplay-eval.md section 7(b)).

Stage 1 is word 5-gram Jaccard over normalised text, J >= 0.4; stage 2 is embedding cosine >= 0.85
over the pairs stage 1 did not flag. Everything here is pure (numpy, and ``datasketch`` lazily for
the MinHash path); the models that make embeddings live in :mod:`.audit_models`.

Choices where the spec is silent (or where this module departs from it, and why):

* **Normalisation** (:func:`normalize_text`): Unicode NFKC, lowercase, LaTeX commands
  (``\\frac``, ``\\times`` ...) removed as the spec says, then every character that is not a
  letter, digit, ``_`` or whitespace becomes a space -- EXCEPT the math operators
  ``+ - * / = ^``, which are KEPT, so ``9-34`` and ``9+34`` stay different texts (the spec's
  "strip non-word punctuation" would make every arithmetic problem with the same numbers
  identical). Whitespace is then collapsed. So ``$\\frac{1}{2}$`` -> ``1 2`` and
  ``Don't!`` -> ``don t``.
* **Short texts** (:func:`shingles`): a text with fewer than ``k`` words becomes ONE shingle, its
  whole word tuple (spec: "a text shorter than 5 words becomes one shingle"); so two short texts
  have Jaccard 1 when their normalised words are equal and 0 otherwise. An empty text has no
  shingles and is never flagged.
* **Exact at scale** (:func:`jaccard_pairs`): an inverted index over the EVAL shingles (each
  shingle -> the eval items holding it); train items stream through in blocks, and only pairs
  sharing at least one shingle are ever counted. Memory: the eval index plus one block's
  (train, eval) hits, capped by ``max_hits``; the train shingles are never all held at once.
  The result is exactly the brute-force O(N*M) answer (a test checks it).
* **MinHash/LSH** (:func:`minhash_pairs`, ``datasketch``): LSH gives candidate pairs at a lower
  threshold than the target (default ``threshold - 0.1``, for recall), then every candidate is
  re-scored with the exact Jaccard, so no false positive survives; misses are possible (a test
  measures recall on planted pairs).
"""

from __future__ import annotations

import re
import unicodedata
from typing import Iterable, Sequence

import numpy as np

from ..errors import UserError

KEEP_OPERATORS = "+-*/=^"
_LATEX_CMD = re.compile(r"\\[a-zA-Z]+")
_DROP = re.compile(r"[^\w\s+\-*/=^]")  # anything but word characters, whitespace and the kept operators
_SPACE = re.compile(r"\s+")

Pair = tuple[int, int, float]  # (train index, eval index, score)


def normalize_text(text: str) -> str:
    """NFKC, lowercase, LaTeX commands out, punctuation to spaces except ``+ - * / = ^``, whitespace
    collapsed (see the module doc for why the operators stay)."""
    t = unicodedata.normalize("NFKC", text).lower()
    t = _LATEX_CMD.sub(" ", t)
    t = _DROP.sub(" ", t)
    return _SPACE.sub(" ", t).strip()


def shingles(text: str, k: int = 5) -> frozenset[str]:
    """The word ``k``-grams of the normalised text (joined by one space); a text of fewer than ``k``
    words is one shingle, its whole word sequence; an empty text has none."""
    if k < 1:
        raise UserError(f"shingle size k must be >= 1, got {k}")
    words = normalize_text(text).split()
    if not words:
        return frozenset()
    if len(words) < k:
        return frozenset([" ".join(words)])
    return frozenset(" ".join(words[i : i + k]) for i in range(len(words) - k + 1))


def jaccard(a: Iterable[str], b: Iterable[str]) -> float:
    """|A & B| / |A | B|; 0.0 when both are empty (nothing to be a duplicate of)."""
    a, b = set(a), set(b)
    union = len(a | b)
    return len(a & b) / union if union else 0.0


class EvalShingleIndex:
    """The eval side of the exact stage 1: a vocabulary of eval shingles and, per shingle, the eval
    items holding it (CSR: ``indices[indptr[s]:indptr[s + 1]]``)."""

    def __init__(self, eval_texts: Sequence[str], k: int = 5):
        self.k, self.vocab = k, {}
        postings: list[list[int]] = []
        self.sizes = np.zeros(len(eval_texts), dtype=np.int64)  # (M,) shingles per eval item
        for j, text in enumerate(eval_texts):
            sh = shingles(text, k)
            self.sizes[j] = len(sh)
            for s in sh:
                sid = self.vocab.setdefault(s, len(postings))
                if sid == len(postings):
                    postings.append([])
                postings[sid].append(j)
        lens = np.array([len(p) for p in postings], dtype=np.int64)  # (V,)
        self.indptr = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)  # (V + 1,)
        self.indices = np.fromiter((j for p in postings for j in p), dtype=np.int64, count=int(lens.sum()))

    def gather(self, rows: np.ndarray, sids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For hits (train row, eval shingle id): every (train row, eval item) sharing that shingle."""
        starts, lens = self.indptr[sids], self.indptr[sids + 1] - self.indptr[sids]  # (H,), (H,)
        total = int(lens.sum())
        # ragged gather: position p of hit h reads indices[starts[h] + p] for p < lens[h]
        first = np.cumsum(lens) - lens  # (H,) where each hit's run begins in the output
        offs = np.arange(total, dtype=np.int64) - np.repeat(first, lens) + np.repeat(starts, lens)  # (total,)
        return np.repeat(rows, lens), self.indices[offs]


def jaccard_pairs(
    train_texts: Sequence[str],
    eval_texts: Sequence[str],
    threshold: float = 0.4,
    k: int = 5,
    block: int = 512,
    max_hits: int = 4_000_000,
) -> list[Pair]:
    """Every (train i, eval j, J) with J >= ``threshold``, exact, via the inverted eval index.

    Train items are scored in blocks of at most ``block`` items, a block closing early once its
    (train, eval) hits reach ``max_hits`` (so memory stays bounded even when one shingle is in every
    eval item)."""
    index = EvalShingleIndex(eval_texts, k)
    out: list[Pair] = []
    sizes_a: list[int] = []
    rows: list[np.ndarray] = []
    sids: list[np.ndarray] = []
    base, hits = 0, 0
    for i, text in enumerate(train_texts):
        sh = shingles(text, k)
        ids = np.array([index.vocab[s] for s in sh if s in index.vocab], dtype=np.int64)
        sizes_a.append(len(sh))
        rows.append(np.full(len(ids), i - base, dtype=np.int64))
        sids.append(ids)
        hits += int((index.indptr[ids + 1] - index.indptr[ids]).sum())
        if len(sizes_a) >= block or hits >= max_hits:
            out += _score_block(index, base, np.array(sizes_a), rows, sids, threshold)
            base, hits, sizes_a, rows, sids = i + 1, 0, [], [], []
    if sizes_a:
        out += _score_block(index, base, np.array(sizes_a), rows, sids, threshold)
    return out


def _score_block(
    index: EvalShingleIndex,
    base: int,
    sizes_a: np.ndarray,
    rows: list[np.ndarray],
    sids: list[np.ndarray],
    threshold: float,
) -> list[Pair]:
    """J = |A & B| / (|A| + |B| - |A & B|) for every (train, eval) pair of one block sharing a shingle."""
    r, e = index.gather(np.concatenate(rows), np.concatenate(sids))  # (hits,), (hits,)
    m = len(index.sizes)
    keys, inter = np.unique(r * m + e, return_counts=True)  # one key per (row, eval) pair: |A & B|
    r, e = keys // m, keys % m
    jac = inter / (sizes_a[r] + index.sizes[e] - inter)  # (pairs,)
    keep = jac >= threshold
    return [(int(a) + base, int(b), float(s)) for a, b, s in zip(r[keep], e[keep], jac[keep])]


def minhash_pairs(
    train_texts: Sequence[str],
    eval_texts: Sequence[str],
    threshold: float = 0.4,
    k: int = 5,
    num_perm: int = 128,
    lsh_threshold: float | None = None,
    seed: int = 1,
) -> list[Pair]:
    """Stage 1 through ``datasketch`` MinHash/LSH: candidates at ``lsh_threshold`` (default
    ``threshold - 0.1``), each re-scored exactly, kept when J >= ``threshold``."""
    try:
        from datasketch import MinHash, MinHashLSH
    except ImportError as err:
        raise UserError("the minhash method needs datasketch: pip install 'reasonrl[audit]'") from err
    lsh_t = max(0.05, threshold - 0.1) if lsh_threshold is None else lsh_threshold
    lsh = MinHashLSH(threshold=lsh_t, num_perm=num_perm)
    eval_sh = [shingles(t, k) for t in eval_texts]
    for j, mh in enumerate(MinHash.bulk([[s.encode() for s in sh] for sh in eval_sh], num_perm=num_perm, seed=seed)):
        if eval_sh[j]:
            lsh.insert(j, mh, check_duplication=False)
    out: list[Pair] = []
    for start in range(0, len(train_texts), 2048):  # blocks of train items: bounded memory
        block = [shingles(t, k) for t in train_texts[start : start + 2048]]
        sketches = MinHash.bulk([[s.encode() for s in sh] for sh in block], num_perm=num_perm, seed=seed)
        for off, (sh, mh) in enumerate(zip(block, sketches)):
            if not sh:
                continue
            for j in sorted(lsh.query(mh)):
                score = jaccard(sh, eval_sh[j])  # exact re-score: no LSH false positive survives
                if score >= threshold:
                    out.append((start + off, j, score))
    return out


def cosine_pairs(
    train_emb: np.ndarray,
    eval_emb: np.ndarray,
    threshold: float = 0.85,
    exclude: set[tuple[int, int]] | None = None,
    block: int = 1024,
) -> list[Pair]:
    """Every (train i, eval j, cos) with cosine >= ``threshold`` and (i, j) not in ``exclude`` (the
    pairs stage 1 already flagged), computed ``block`` train rows at a time."""
    a, b = _unit_rows(train_emb, "train"), _unit_rows(eval_emb, "eval")  # (N, d), (M, d)
    if a.shape[1] != b.shape[1]:
        raise UserError(f"train and eval embeddings differ in width: {a.shape[1]} vs {b.shape[1]}")
    exclude = exclude or set()
    out: list[Pair] = []
    for start in range(0, len(a), block):
        sims = a[start : start + block] @ b.T  # (block, M)
        for i, j in zip(*np.nonzero(sims >= threshold)):
            if (start + int(i), int(j)) not in exclude:
                out.append((start + int(i), int(j), float(sims[i, j])))
    return out


def _unit_rows(x: np.ndarray, side: str) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2:
        raise UserError(f"{side} embeddings must be a 2-D array (items x dims), got shape {x.shape}")
    norms = np.linalg.norm(x, axis=1, keepdims=True)  # (n, 1)
    if np.any(norms == 0) or not np.all(np.isfinite(norms)):
        bad = int(np.flatnonzero((norms[:, 0] == 0) | ~np.isfinite(norms[:, 0]))[0])
        raise UserError(f"{side} embedding of item {bad} is zero or not finite: cosine is undefined")
    return x / norms
