"""Set-valued answers and the SSPO reward (CardioThink, arXiv 2605.17308, spec section 10).

SSPO is GRPO whose reward scores (1) a fixed four-stage reasoning structure and (2) the
set-level accuracy of a predicted *set* of labels of variable size (possibly empty):
``R = w_fmt * R_fmt + w_set * R_set``.

Pure functions (no torch, reusable by tasks):

* :func:`normalize_label` -- the normaliser: strip, upper-case, whitespace runs -> one space.
* :func:`parse_label_set` -- a comma-separated label list -> canonical ``frozenset`` or ``None``.
* :func:`canonical_set` -- the canonical answer string: labels sorted and comma-joined, ``none``
  for the empty set.
* :func:`answer_block` -- the text after the last answer tag, up to the end of that line.
* :func:`set_score` -- Jaccard (default), F1 or exact match, with the spec's edge cases.
* :func:`structure_ok` -- the format check ``R_fmt``.

Inferred choices (the paper names the two reward components; their forms are [inferred] in
the spec), each an option with the spec's default:

* Sections are literal markers (default ``R:``, ``C:``, ``M:``, ``I:`` -- neutral stand-ins
  for the paper's rhythm / conduction / morphology / impression) and the answer block starts at
  ``D:``. A well-formed completion has every marker exactly once, in order, each followed by
  non-blank content, then exactly one answer tag, whose line is the last non-blank line and
  parses into a label set.
* ``strict=True``: a label that is not in the vocabulary (after synonyms) makes the answer
  unparsable -- the spec says the answer "must parse into a label set ... mapped onto the
  dataset's label vocabulary". ``strict=False`` keeps it as an (always wrong) extra label.
  Without a vocabulary every normalised label is accepted.
* The empty set is written ``none`` (``none_words``); an empty answer block, an empty item
  (``AF,,LBBB``) or ``none`` mixed with labels is unparsable.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping, Sequence

from .base import Reward, RewardResult

__all__ = [
    "DEFAULT_SECTIONS",
    "DEFAULT_ANSWER_TAG",
    "SET_METRICS",
    "normalize_label",
    "parse_label_set",
    "canonical_set",
    "answer_block",
    "set_score",
    "structure_ok",
    "SetReward",
]

DEFAULT_SECTIONS = ("R:", "C:", "M:", "I:")
DEFAULT_ANSWER_TAG = "D:"
NONE_WORDS = ("none",)
SET_METRICS = ("jaccard", "f1", "exact")
_SPACES = re.compile(r"\s+")


def normalize_label(label: str) -> str:
    """Case- and whitespace-insensitive form of a label: ``' l  bbb '`` -> ``'L BBB'``."""
    return _SPACES.sub(" ", str(label).strip()).upper()


def _lookup(vocab: Iterable[str] | None, synonyms: Mapping[str, str] | None) -> tuple[dict, dict | None]:
    """Normalised synonym -> canonical label, and normalised label -> canonical label (or None)."""
    table = {normalize_label(k): v for k, v in (synonyms or {}).items()}
    canon = None if vocab is None else {normalize_label(v): v for v in vocab}
    return table, canon


def parse_label_set(
    text: str | None,
    vocab: Iterable[str] | None = None,
    synonyms: Mapping[str, str] | None = None,
    *,
    strict: bool = True,
    none_words: Sequence[str] = NONE_WORDS,
) -> frozenset | None:
    """The label set written in ``text`` (``"AF, lbbb"``), or ``None`` when it does not parse.

    Each comma-separated item is normalised (:func:`normalize_label`), mapped through
    ``synonyms`` (alias -> label, aliases compared normalised) and then onto ``vocab`` (returned
    in the vocabulary's own spelling). Without ``vocab`` the normalised (upper-case) form is the
    label. ``strict``: an out-of-vocabulary label makes the whole answer unparsable.
    """
    if text is None or not text.strip():
        return None
    table, canon = _lookup(vocab, synonyms)
    nones = {normalize_label(w) for w in none_words}
    items = [normalize_label(part) for part in text.split(",")]
    if len(items) == 1 and items[0] in nones:
        return frozenset()
    out = set()
    for item in items:
        if not item or item in nones:
            return None
        label = table.get(item, item)
        if canon is not None:
            found = canon.get(normalize_label(label))
            if found is None and strict:
                return None
            label = found if found is not None else label
        out.add(label)
    return frozenset(out)


def canonical_set(labels: Iterable[str], none_word: str = NONE_WORDS[0]) -> str:
    """Sorted, comma-joined labels (the reference answer format); ``none`` for the empty set."""
    labels = sorted(labels)
    return ",".join(labels) if labels else none_word


def answer_block(completion: str, answer_tag: str = DEFAULT_ANSWER_TAG) -> str | None:
    """Text after the last ``answer_tag`` up to the end of its line, or ``None`` without a tag."""
    at = completion.rfind(answer_tag)
    if at == -1:
        return None
    return completion[at + len(answer_tag) :].split("\n", 1)[0]


def set_score(pred: frozenset | set | None, gold: frozenset | set, metric: str = "jaccard") -> float:
    """Set-level accuracy of ``pred`` against ``gold`` (spec section 10).

    ``jaccard`` = |P n G| / |P u G| (example-based accuracy), ``f1`` = 2|P n G| / (|P| + |G|),
    ``exact`` = [P == G]. Both empty -> 1.0; ``pred is None`` (unparsable) -> 0.0.
    """
    if metric not in SET_METRICS:
        raise ValueError(f"unknown set metric {metric!r}; valid: {list(SET_METRICS)}")
    if pred is None:
        return 0.0
    pred, gold = set(pred), set(gold)
    if not pred and not gold:
        return 1.0
    inter = len(pred & gold)
    if metric == "jaccard":
        return inter / len(pred | gold)
    if metric == "f1":
        return 2 * inter / (len(pred) + len(gold))
    return float(pred == gold)


def structure_ok(
    completion: str,
    sections: Sequence[str] = DEFAULT_SECTIONS,
    answer_tag: str = DEFAULT_ANSWER_TAG,
    vocab: Iterable[str] | None = None,
    synonyms: Mapping[str, str] | None = None,
    *,
    strict: bool = True,
) -> bool:
    """``R_fmt``: every section exactly once, in order, non-blank, then one parsable answer line last."""
    cuts = []
    for marker in (*sections, answer_tag):
        if completion.count(marker) != 1:
            return False
        cuts.append(completion.index(marker))
    if cuts != sorted(cuts):
        return False
    for marker, start, end in zip(sections, cuts, cuts[1:]):
        if not completion[start + len(marker) : end].strip():
            return False
    tail = completion[cuts[-1] + len(answer_tag) :]
    if tail.strip() and "\n" in tail.strip():  # the answer line must be the last non-blank line
        return False
    return parse_label_set(tail.strip(), vocab, synonyms, strict=strict) is not None


class SetReward(Reward):
    """The SSPO reward ``R = w_fmt * R_fmt + w_set * R_set`` (arXiv 2605.17308; spec section 10).

    Options (spec defaults): ``metric`` in ``jaccard`` (default) | ``f1`` | ``exact``;
    ``w_fmt = w_set = 1.0`` (R1 style); ``gate=False`` (True: ``R_set`` counts only when
    ``R_fmt == 1``); ``sections`` / ``answer_tag`` (default the ``diagnosis`` task's markers);
    ``vocab`` / ``synonyms`` / ``strict`` as in :func:`parse_label_set` ([inferred]).

    The gold set is parsed from the ``answer`` column (a gold that does not parse raises, naming
    the row). A row's ``meta["label_space"]`` (``{"vocab": [...], "synonyms": {...}}``, what the
    ``diagnosis`` task supplies) replaces the constructor's ``vocab`` / ``synonyms`` for that
    row, so the reward knows each dataset's vocabulary without extra wiring ([inferred]).

    Metrics: ``reward/sspo/format_rate`` (mean R_fmt), ``reward/sspo/set_score`` (mean ungated
    R_set), ``reward/sspo/exact_rate`` (predicted set == gold) and ``reward/sspo/unparsed_frac``
    (no parsable answer block).
    """

    def __init__(
        self,
        metric: str = "jaccard",
        w_fmt: float = 1.0,
        w_set: float = 1.0,
        gate: bool = False,
        sections: Sequence[str] = DEFAULT_SECTIONS,
        answer_tag: str = DEFAULT_ANSWER_TAG,
        vocab: Sequence[str] | None = None,
        synonyms: Mapping[str, str] | None = None,
        strict: bool = True,
        name: str = "sspo",
    ):
        if metric not in SET_METRICS:
            raise ValueError(f"SetReward: unknown metric {metric!r}; valid: {list(SET_METRICS)}")
        if isinstance(sections, str) or not sections or not all(isinstance(s, str) and s for s in sections):
            raise ValueError(f"SetReward: sections must be a non-empty list of non-empty strings, got {sections!r}")
        if not isinstance(answer_tag, str) or not answer_tag or answer_tag in sections:
            raise ValueError(
                f"SetReward: answer_tag must be a non-empty string distinct from the sections, got {answer_tag!r}"
            )
        self.metric, self.w_fmt, self.w_set, self.gate = metric, float(w_fmt), float(w_set), bool(gate)
        self.sections, self.answer_tag, self.strict, self.name = tuple(sections), answer_tag, strict, name
        self.vocab = None if vocab is None else tuple(vocab)
        self.synonyms = dict(synonyms or {})

    def options(self) -> dict[str, Any]:
        """Constructor arguments (``rewards.sspo.metric=f1`` on the command line; see rewards.options)."""
        return {
            "metric": self.metric,
            "w_fmt": self.w_fmt,
            "w_set": self.w_set,
            "gate": self.gate,
            "sections": self.sections,
            "answer_tag": self.answer_tag,
            "vocab": self.vocab,
            "synonyms": self.synonyms,
            "strict": self.strict,
            "name": self.name,
        }

    def _space(self, meta: dict[str, Any]) -> tuple[Sequence[str] | None, Mapping[str, str]]:
        space = (meta or {}).get("label_space")
        if space is None:
            return self.vocab, self.synonyms
        return space.get("vocab"), space.get("synonyms") or {}

    def score_one(self, completion: str, answer: str, meta: dict[str, Any] | None = None) -> dict[str, Any]:
        """``R_fmt``, ``R_set`` (ungated), the parsed prediction and the total for one row."""
        vocab, synonyms = self._space(meta or {})
        gold = parse_label_set(answer, vocab, synonyms, strict=self.strict)
        if gold is None:
            raise ValueError(f"gold answer {answer!r} does not parse as a label set (vocab={vocab})")
        pred = parse_label_set(answer_block(completion, self.answer_tag), vocab, synonyms, strict=self.strict)
        r_fmt = float(structure_ok(completion, self.sections, self.answer_tag, vocab, synonyms, strict=self.strict))
        r_set = set_score(pred, gold, self.metric)
        counted = r_set if (r_fmt == 1.0 or not self.gate) else 0.0
        return {
            "fmt": r_fmt,
            "set": r_set,
            "pred": pred,
            "gold": gold,
            "reward": self.w_fmt * r_fmt + self.w_set * counted,
        }

    def score(self, prompts: Sequence[str], completions: Sequence[str], **columns: Any) -> RewardResult:
        answers = columns["answer"]
        metas = columns.get("meta") or [{}] * len(completions)
        rows = []
        for i, (c, a, m) in enumerate(zip(completions, answers, metas)):
            try:
                rows.append(self.score_one(c, a, m))
            except ValueError as err:
                raise ValueError(f"{self.name}: row {i}: {err}") from err
        n = max(len(rows), 1)
        metrics = {
            f"reward/{self.name}/format_rate": sum(r["fmt"] for r in rows) / n,
            f"reward/{self.name}/set_score": sum(r["set"] for r in rows) / n,
            f"reward/{self.name}/exact_rate": sum(r["pred"] == r["gold"] for r in rows) / n,
            f"reward/{self.name}/unparsed_frac": sum(r["pred"] is None for r in rows) / n,
        }
        return RewardResult([r["reward"] for r in rows], metrics)
