"""Built-in task ``diagnosis``: a structured set of labels from rules over several readings.

The synthetic stand-in for CardioThink's ECG diagnosis (arXiv 2605.17308, spec section 10):
a case shows a few readings, each reading implies at most one finding by threshold rules, and
the answer is the *set* of findings (variable size, ``none`` when empty), reached through four
fixed stages named neutrally after the paper's rhythm / conduction / morphology / impression:
``R:``, ``C:`` and ``M:`` each cover a third of the readings, ``I:`` collects the findings (and
the combination findings), and ``D:`` gives the label set in canonical (sorted) order (shown
with ``aspects=6``)::

    a72 b40 c15 d88 e33 f61            <- prompt (one line, then a newline)
    R:a72=AH b40=ok
    C:c15=CL d88=DH
    M:e33=ok f61=ok
    I:AH,CL,DH
    D:AH,CL,DH

Rules (fixed by ``rule_seed``, the same for every case): reading ``x`` of letter ``X`` is a
two-digit number; ``x >= hi_X`` gives ``XH`` and, with ``labels_per_aspect=2``, ``x < lo_X``
gives ``XL``; anything else is ``ok``. ``combos`` adds impression-level labels ``Z1`` (findings
in both R and C), ``Z2`` (C and M), ``Z3`` (R and M). The label vocabulary therefore has
``aspects * labels_per_aspect + combos`` labels. Cases draw the number of abnormal readings
uniformly from ``0..max_labels`` and are redrawn until the whole set has at most ``max_labels``;
a reading is drawn uniformly within its status range, or, with chance ``near``, within 5 of the
threshold on its side (the comparisons that need both digits).

Difficulty knobs: ``aspects`` (readings and rules), ``labels_per_aspect`` and ``combos`` (label
vocabulary), ``max_labels`` (set size), ``near`` (readings next to a threshold). The defaults
(9 readings, 18 labels, sets of 0..5, near=0.3) put the tiny "small" model, warm-started for 150
supervised steps (batch 64, lr 1e-3), at greedy pass@1 0.44 (mean Jaccard 0.71) on 100 held-out
cases: learnable, with room for RL. Measured for tuning: 6 readings and sets of 0..4 gave 0.81
with near=0 and 0.98 with near=0.6 -- readings next to a threshold also teach the thresholds, so
raising ``near`` made the warm-started model better, not worse; the number of readings is the knob.

Answers are parsed by :func:`reasonrl.rewards.sets.parse_label_set` with the vocabulary and a
synonym table (case and whitespace never matter; ``A+``, ``A HIGH``, ``HIGH A`` mean ``AH``;
``A-``, ``A LOW``, ``LOW A`` mean ``AL``). ``verify`` is exact set match (the task's accuracy);
partial credit is the job of the SSPO reward (:class:`reasonrl.rewards.sets.SetReward`), which
reads the vocabulary from each item's ``meta["label_space"]``.

User data (options ``data`` / ``test_data``): JSONL, one case per line::

    {"case": "a72 b40 c15 d88 e33 f61", "labels": ["AH", "CL", "DH"], "demo": "R:...\\nD:AH,CL,DH"}

* ``case`` (non-empty string): the case text; the prompt is ``case + "\\n"`` as for synthetic cases.
* ``labels`` (list of strings, ``[]`` for none): the gold set, normalised and mapped through the
  option ``synonyms`` (the built-in aliases name synthetic labels, so they are off here). The
  vocabulary is the union of all rows' labels (train and test files), so a predicted label seen
  in no row does not parse.
* ``demo`` (optional string): a correct completion for warm starts: sections ``R:``, ``C:``,
  ``M:``, ``I:`` in order, then the ``D:`` answer line last, which must equal ``labels``. Rows without
  demos can be trained on by RL but not warm-started.

With ``data`` the synthetic knobs (``aspects`` ... ``rule_seed``) are unused.
"""

from __future__ import annotations

import random
import string
from dataclasses import dataclass
from typing import Any, Iterator

from ..rewards.sets import (
    DEFAULT_ANSWER_TAG,
    DEFAULT_SECTIONS,
    answer_block,
    canonical_set,
    parse_label_set,
    set_score,
    structure_ok,
)
from .base import Item, check_split, epochs, in_test_split, make_config, split_user_items, stable_seed, user_splits
from .files import read_rows

MAX_ASPECTS = 12  # reading letters a..l; labels AH..LL, then Z1..Z3 sort after them
STAGE_PAIRS = ((0, 1), (1, 2), (0, 2))  # combos Z1, Z2, Z3: findings in both stages of the pair
LOW, HIGH = 10, 99  # readings are two-digit numbers
NEAR = 5  # a "near" reading is at most this far from the threshold on its side


@dataclass(frozen=True)
class DiagnosisConfig:
    aspects: int = 9  # readings per case, split over the R, C, M stages
    labels_per_aspect: int = 2  # 1: only a high finding XH; 2: also a low finding XL
    combos: int = 0  # impression-level labels Z1..Z3 (0..3)
    max_labels: int = 5  # largest gold set
    near: float = 0.3  # chance that a reading sits within NEAR of a threshold (the hard comparisons)
    rule_seed: int = 0  # draws the thresholds
    test_fraction: float = 0.1
    data: str | None = None  # JSONL train rows (see the module docstring)
    test_data: str | None = None  # JSONL held-out rows; without it a hash fraction of `data`
    synonyms: dict | None = None  # extra alias -> label entries

    def __post_init__(self):
        if not 3 <= self.aspects <= MAX_ASPECTS:
            raise ValueError(f"aspects must be in 3..{MAX_ASPECTS} (one or more per stage), got {self.aspects}")
        if self.labels_per_aspect not in (1, 2):
            raise ValueError(f"labels_per_aspect must be 1 or 2, got {self.labels_per_aspect}")
        if not 0 <= self.combos <= len(STAGE_PAIRS):
            raise ValueError(f"combos must be in 0..{len(STAGE_PAIRS)}, got {self.combos}")
        if not 0 <= self.max_labels <= self.aspects + self.combos:
            raise ValueError(
                f"max_labels must be in 0..aspects+combos={self.aspects + self.combos}, got {self.max_labels}"
            )
        if not 0.0 <= self.near <= 1.0:
            raise ValueError(f"near must be in [0, 1], got {self.near}")
        if not 0.0 < self.test_fraction < 1.0:
            raise ValueError(f"test_fraction must be in (0, 1), got {self.test_fraction}")
        if self.test_data is not None and self.data is None:
            raise ValueError("test_data needs data (the train rows) as well")
        if self.synonyms is not None and not all(
            isinstance(k, str) and isinstance(v, str) for k, v in dict(self.synonyms).items()
        ):
            raise ValueError(f"synonyms must map strings to strings, got {self.synonyms!r}")


def stage_sizes(aspects: int) -> list[int]:
    """Readings per stage, as even as possible, earlier stages first: 7 -> [3, 2, 2]."""
    return [aspects // 3 + (1 if s < aspects % 3 else 0) for s in range(3)]


def thresholds(aspects: int, rule_seed: int) -> list[tuple[int, int]]:
    """``(lo, hi)`` per reading: ``x < lo`` is low, ``x >= hi`` high. Off round numbers on purpose,
    so a rule needs both digits of the reading."""
    rng = random.Random(stable_seed("diagnosis-rules", rule_seed))
    return [(rng.randint(25, 44), rng.randint(56, 84)) for _ in range(aspects)]


def builtin_synonyms(letters: str) -> dict[str, str]:
    """Aliases of the synthetic labels: ``A+``, ``A HIGH``, ``HIGH A`` -> AH; likewise AL."""
    out = {}
    for x in letters.upper():
        for word, sign, level in (("HIGH", "+", "H"), ("LOW", "-", "L")):
            out.update({f"{x}{sign}": x + level, f"{x} {word}": x + level, f"{word} {x}": x + level})
    return out


class DiagnosisTask:
    """Structured multi-label diagnosis (SSPO's task): readings -> four stages -> a label set."""

    name = "diagnosis"

    def __init__(self, **options: Any):
        self.config = c = make_config(DiagnosisConfig, "diagnosis", options)
        self.letters = string.ascii_lowercase[: c.aspects]
        self.rules = thresholds(c.aspects, c.rule_seed)
        self.stages = stage_sizes(c.aspects)
        # the built-in aliases name the synthetic labels, so user data gets only its own
        builtin = builtin_synonyms(self.letters) if c.data is None else {}
        self.synonyms = {**builtin, **dict(c.synonyms or {})}
        self._rows: dict[str, list[Item] | None] = {"train": None, "test": None}
        if c.data is None:
            levels = "HL"[: c.labels_per_aspect]
            vocab = [x.upper() + lv for x in self.letters for lv in levels]
            vocab += [f"Z{j + 1}" for j in range(c.combos)]
        else:
            raw = user_splits(c.data, c.test_data, self._load)
            vocab = sorted({lab for rows in raw.values() if rows for _, labels, _ in rows for lab in labels})
        self.vocab = tuple(sorted(vocab))
        # one shared object: every item's meta points at it (SetReward reads it per row)
        self.label_space = {"vocab": list(self.vocab), "synonyms": dict(self.synonyms)}
        if c.data is not None:
            self._rows = {
                k: None if rows is None else [self._user_item(r, i) for i, r in enumerate(rows)]
                for k, rows in raw.items()
            }
            self._check_demos()

    # ----- answers ---------------------------------------------------------------------------
    def parse(self, text: str | None) -> frozenset | None:
        return parse_label_set(text, self.vocab, self.synonyms, strict=True)

    def extract_answer(self, completion: str) -> str | None:
        """Canonical sorted label set after the last ``D:`` (``none`` if empty), or None."""
        got = self.parse(answer_block(completion, DEFAULT_ANSWER_TAG))
        return None if got is None else canonical_set(got)

    def verify(self, completion: str, answer: str, meta: dict[str, Any]) -> float:
        """1.0 iff the predicted set equals the reference set exactly."""
        gold = self.parse(answer)
        if gold is None:
            raise ValueError(f"diagnosis: reference answer {answer!r} is not a label set of this task")
        return float(self.parse(answer_block(completion, DEFAULT_ANSWER_TAG)) == gold)

    def diagnostics(self, completions: list[str], metas: list[dict[str, Any]], scores: list[float]) -> dict[str, float]:
        """Beside pass@1 (exact sets): the rate of well-formed completions (SSPO's ``R_fmt``) and
        the mean Jaccard of the predicted sets against ``meta["labels"]`` (SSPO's ``R_set``)."""
        n = max(len(completions), 1)
        fmt = sum(structure_ok(c, DEFAULT_SECTIONS, DEFAULT_ANSWER_TAG, self.vocab, self.synonyms) for c in completions)
        jac = sum(
            set_score(self.parse(answer_block(c, DEFAULT_ANSWER_TAG)), set(m["labels"]))
            for c, m in zip(completions, metas)
        )
        return {"format_rate": fmt / n, "set_jaccard": jac / n}

    @property
    def max_new_tokens(self) -> int:
        """About 1.5x the longest demonstration (user demos: measured; user rows without demos:
        stages restating the case plus two answer lines; synthetic: worst case of 7 characters a
        reading, 3 a label, markers and newlines)."""
        rows = [it for part in self._rows.values() if part for it in part]
        demos = [it.demo for it in rows if it.demo]
        if demos:
            return int(1.5 * max(map(len, demos))) + 8
        if rows:
            longest = max(len(it.prompt) + 2 * len(it.answer) + 16 for it in rows)
            return int(1.5 * longest) + 8
        c = self.config
        longest = 7 * c.aspects + 6 + 2 * (1 + max(4, 3 * c.max_labels - 1)) + 1
        return int(1.5 * longest) + 8

    # ----- synthetic cases ---------------------------------------------------------------------
    def finding(self, i: int, value: int) -> str | None:
        lo, hi = self.rules[i]
        if value >= hi:
            return self.letters[i].upper() + "H"
        if self.config.labels_per_aspect == 2 and value < lo:
            return self.letters[i].upper() + "L"
        return None

    def solve(self, values: list[int]) -> tuple[str, list[str]]:
        """The demonstration and the gold labels (sorted) of a case."""
        lines, found, start = [], [], 0
        stage_hits = []
        for marker, size in zip(DEFAULT_SECTIONS, self.stages):
            parts, hits = [], []
            for i in range(start, start + size):
                f = self.finding(i, values[i])
                parts.append(f"{self.letters[i]}{values[i]}={f or 'ok'}")
                hits += [f] if f else []
            lines.append(marker + " ".join(parts))
            stage_hits.append(bool(hits))
            found += hits
            start += size
        found += [
            f"Z{j + 1}" for j, (s, t) in enumerate(STAGE_PAIRS[: self.config.combos]) if stage_hits[s] and stage_hits[t]
        ]
        answer = canonical_set(found)
        lines += [DEFAULT_SECTIONS[3] + answer, DEFAULT_ANSWER_TAG + answer]
        return "\n".join(lines), sorted(found)

    def _value(self, i: int, status: str, rng: random.Random) -> int:
        """A reading of the given status (H, L or N); with chance ``near`` next to a threshold."""
        lo, hi = self.rules[i]
        two_sided = self.config.labels_per_aspect == 2
        ranges = {"H": (hi, HIGH), "L": (LOW, lo - 1), "N": (lo if two_sided else LOW, hi - 1)}
        a, b = ranges[status]
        if rng.random() < self.config.near:
            if status == "N":  # either edge of the normal range (the upper one when one-sided)
                a, b = rng.choice([(lo, lo + NEAR - 1), (hi - NEAR, hi - 1)] if two_sided else [(hi - NEAR, hi - 1)])
            else:
                a, b = (hi, hi + NEAR - 1) if status == "H" else (lo - NEAR, lo - 1)
        return rng.randint(a, b)

    def sample_case(self, rng: random.Random) -> list[int]:
        c = self.config
        while True:  # redraw until combos keep the set within max_labels
            k = rng.randint(0, min(c.max_labels, c.aspects))
            abnormal = set(rng.sample(range(c.aspects), k))
            status = [rng.choice("HL"[: c.labels_per_aspect]) if i in abnormal else "N" for i in range(c.aspects)]
            values = [self._value(i, s, rng) for i, s in enumerate(status)]
            if len(self.solve(values)[1]) <= c.max_labels:
                return values

    def make_item(self, values: list[int]) -> Item:
        case = " ".join(f"{x}{v}" for x, v in zip(self.letters, values))
        demo, labels = self.solve(values)
        return Item(
            key=case,
            prompt=case + "\n",
            answer=canonical_set(labels),
            meta={"label_space": self.label_space, "labels": labels, "n_labels": len(labels)},
            demo=demo,
        )

    def iter_items(self, split: str, seed: int) -> Iterator[Item]:
        check_split(split)
        if self.config.data is not None:
            yield from self._iter_rows(split, seed)
            return
        rng, want_test = random.Random(f"{seed}:{split}"), split == "test"
        while True:
            item = self.make_item(self.sample_case(rng))
            if in_test_split(item.key, self.config.test_fraction) == want_test:
                yield item

    # ----- user data ---------------------------------------------------------------------------
    def _load(self, path: str) -> list[tuple[str, list[str], str | None]]:
        """Validated ``(case, labels, demo)`` rows; labels normalised through the synonym table."""
        rows = read_rows(path)
        if not rows:
            raise ValueError(f"{path}: no rows")
        out = []
        for i, row in enumerate(rows):
            extra = set(row) - {"case", "labels", "demo"}
            if extra:
                raise ValueError(f"{path}: row {i}: unknown field(s) {sorted(extra)}; valid: case, labels, demo")
            case, labels, demo = row.get("case"), row.get("labels"), row.get("demo")
            if not isinstance(case, str) or not case.strip():
                raise ValueError(f"{path}: row {i}: field 'case' must be a non-empty string, got {case!r}")
            if not isinstance(labels, list) or not all(isinstance(x, str) and "," not in x for x in labels):
                raise ValueError(
                    f"{path}: row {i}: field 'labels' must be a list of strings without commas "
                    f"([] for none), got {labels!r}"
                )
            if demo is not None and not isinstance(demo, str):
                raise ValueError(f"{path}: row {i}: field 'demo' must be a string, got {type(demo).__name__}")
            parsed = parse_label_set(",".join(labels), None, self.synonyms) if labels else frozenset()
            if parsed is None:
                raise ValueError(
                    f"{path}: row {i}: field 'labels' has an empty or 'none' label: {labels!r} (write [] for no labels)"
                )
            out.append((case.strip(), sorted(parsed), demo))
        return out

    def _user_item(self, row: tuple[str, list[str], str | None], i: int) -> Item:
        case, labels, demo = row
        return Item(
            key=case,
            prompt=case + "\n",
            answer=canonical_set(labels),
            meta={"label_space": self.label_space, "labels": labels, "n_labels": len(labels), "row": i},
            demo=demo,
        )

    def _check_demos(self) -> None:
        """A demo must have the structure the SSPO reward asks for and answer the row's labels:
        a warm start on anything else would teach what RL then punishes."""
        paths = {"train": self.config.data, "test": self.config.test_data}
        for split, items in self._rows.items():
            for i, it in enumerate(items or []):
                if it.demo is None:
                    continue
                if not structure_ok(it.demo, DEFAULT_SECTIONS, DEFAULT_ANSWER_TAG, self.vocab, self.synonyms):
                    raise ValueError(
                        f"{paths[split]}: row {i}: field 'demo' is not sections "
                        f"{' '.join(DEFAULT_SECTIONS)} in order, then one {DEFAULT_ANSWER_TAG} line last"
                    )
                if self.verify(it.demo, it.answer, it.meta) != 1.0:
                    raise ValueError(
                        f"{paths[split]}: row {i}: field 'demo' answers "
                        f"{self.extract_answer(it.demo)!r}, but labels are {it.answer!r}"
                    )

    def _iter_rows(self, split: str, seed: int) -> Iterator[Item]:
        items = split_user_items(
            "diagnosis",
            self._rows["train"],
            self._rows["test"],
            split,
            self.config.test_fraction,
            str(self.config.data),
        )
        return epochs(items, random.Random(f"{seed}:{split}"))


__all__ = ["DiagnosisConfig", "DiagnosisTask", "builtin_synonyms", "stage_sizes", "thresholds"]
