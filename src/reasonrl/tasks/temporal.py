"""Built-in task ``temporal``: answer as of a cutoff date without using look-ahead facts (TEMPO, arXiv 2605.18843).

A synthetic world of dated facts: entities (``x``, ``y``, ...) take integer values that change on
given days. The prompt asks for an entity's value as of a cutoff day and lists the evidence, some
of it dated AFTER the cutoff (the temptation a backtest must resist)::

    x @d14
    d2 x=5
    d7 x=3
    d9 y=8
    d11 y=1
    d16 x=3
    d21 y=2

The demonstration cites the target's facts dated on or before the cutoff, oldest first, one claim
per line in the claim syntax of :mod:`reasonrl.rewards.temporal` (``use <date> <key>=<value>``),
then the answer (the latest of them)::

    use d2 x=5
    use d7 x=3
    A:3

Why outcome reward alone does not punish leakage here: with probability ``tempt_prob`` the target
has facts after the cutoff (its latest fact is post-cutoff), and with probability ``coincide_prob``
that latest value equals the correct answer, so a look-ahead answer is sometimes right. A fraction
``leaky_demo_frac`` of demonstrations is leaky-but-correct: it also cites the post-cutoff facts of
the target (the instance is drawn with a coinciding latest value, so the answer stays right). That
mimics a pretrained model that habitually uses look-ahead information, giving TEMPO something to fix.
``verify`` checks the final answer only; leakage is the job of :class:`~reasonrl.rewards.temporal.TempoReward`.

Options (difficulty knobs; defaults in :class:`TemporalConfig`): ``n_facts``, ``n_entities``,
``max_day``, ``max_value``, ``post_frac`` (``round(post_frac * n_facts)`` facts are dated after the
cutoff), ``tempt_prob``, ``coincide_prob``, ``leaky_demo_frac``, ``shuffle_facts`` (list the evidence
out of date order), ``test_fraction``, ``data``, ``test_data``. [inferred] Facts dated on the cutoff
day are known (leak iff date > cutoff). Observed rates: an instance has a lure with probability
``L = leaky_demo_frac + (1 - leaky_demo_frac) * tempt_prob`` and a coinciding lure with probability
``leaky_demo_frac + (1 - leaky_demo_frac) * tempt_prob * coincide_prob``.

User data (options ``data`` / ``test_data``): JSONL, one object per line::

    {"question": "x", "cutoff": 14, "answer": 3,
     "facts": [{"date": 2, "key": "x", "value": 5}, {"date": 16, "key": "x", "value": 3}],
     "target": "x", "demo": "use d2 x=5\\nA:5"}

* ``question`` (str, required, one line): shown as the first prompt line ``<question> @<cutoff>``.
* ``cutoff`` (required): an int day or an ISO date ``"YYYY-MM-DD"``; the facts' dates must be of
  the same kind (ISO dates are compared as dates). Prompts write int days as ``d<int>``.
* ``facts`` (required, non-empty list): ``{"date", "key", "value"}`` (statement ``key=value``) or
  ``{"date", "text"}`` (a free-text one-line statement), listed one per prompt line ``<date> <stmt>``.
* ``answer`` (str or number, required): the reference; ``verify`` compares it with the ``A:`` line.
* ``demo`` (str, optional): a demonstration; it must end with an ``A:`` line that verifies.
  Without it, a ``target`` key (optional str) makes a clean demo from the target's key/value
  facts dated on/before the cutoff; otherwise the row has no demo.
* ``id`` (optional): the row's identity for the hash split (default: its prompt).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any, Iterator

from ..rewards.answers import normalize_number, normalize_text
from ..rewards.temporal import count_claims, extract_final_answer, is_grounded, parse_date, render_date
from .base import Item, check_split, epochs, in_test_split, make_config, split_user_items, user_splits
from .files import read_rows

ENTITIES = "xyzwvuts"
ROW_FIELDS = ("question", "cutoff", "facts", "answer", "demo", "target", "id")


@dataclass(frozen=True)
class TemporalConfig:
    n_facts: int = 6
    n_entities: int = 2
    max_day: int = 30
    max_value: int = 9
    post_frac: float = 0.33  # round(0.33 * 6) = 2 post-cutoff facts of 6
    tempt_prob: float = 0.8
    coincide_prob: float = 0.3
    leaky_demo_frac: float = 0.3
    shuffle_facts: bool = False
    test_fraction: float = 0.1
    data: str | None = None
    test_data: str | None = None

    @property
    def n_post(self) -> int:
        return int(self.post_frac * self.n_facts + 0.5)

    def __post_init__(self):
        if self.n_facts < 1 or not 1 <= self.n_entities <= len(ENTITIES):
            raise ValueError(
                f"need n_facts >= 1 and 1 <= n_entities <= {len(ENTITIES)}, got {self.n_facts}, {self.n_entities}"
            )
        if self.max_day < self.n_facts or self.max_value < 1:
            raise ValueError(
                f"need max_day >= n_facts (distinct days) and max_value >= 1, got max_day="
                f"{self.max_day}, max_value={self.max_value}"
            )
        for name in ("post_frac", "tempt_prob", "coincide_prob", "leaky_demo_frac"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        if not 0.0 < self.test_fraction < 1.0:
            raise ValueError(f"test_fraction must be in (0, 1), got {self.test_fraction}")
        if self.n_post >= self.n_facts:
            raise ValueError(
                f"post_frac={self.post_frac} puts all {self.n_facts} facts after the cutoff; "
                "at least one must be before it"
            )
        if self.n_post == 0 and (self.tempt_prob > 0 or self.leaky_demo_frac > 0):
            raise ValueError("tempt_prob and leaky_demo_frac need post-cutoff facts: raise post_frac or set them to 0")
        if self.n_entities == 1 and self.n_post > 0 and self.tempt_prob < 1:
            raise ValueError("with n_entities=1 every post-cutoff fact is about the target: tempt_prob must be 1")
        if self.test_data is not None and self.data is None:
            raise ValueError("test_data needs data (the train rows) as well")


@dataclass(frozen=True)
class World:
    """One synthetic instance: target entity, cutoff day, facts in date order, and flags."""

    target: str
    cutoff: int
    facts: list[tuple[int, str, int]]  # (day, entity, value)
    lure: bool  # the target has a fact after the cutoff
    coincide: bool  # ... and its latest value equals the answer
    leaky_demo: bool

    @property
    def answer(self) -> int:
        return [v for d, e, v in self.facts if e == self.target and d <= self.cutoff][-1]


def _entities(rng: random.Random, c: TemporalConfig, target: str, lure: bool) -> list[str]:
    """Entity of each fact: >= 1 pre-cutoff target fact; post-cutoff target facts iff ``lure``."""
    names, n_pre = list(ENTITIES[: c.n_entities]), c.n_facts - c.n_post
    ents = [rng.choice(names) for _ in range(c.n_facts)]
    if target not in ents[:n_pre]:
        ents[rng.randrange(n_pre)] = target
    others = [e for e in names if e != target]
    for i in range(n_pre, c.n_facts):
        if not lure and ents[i] == target:
            ents[i] = rng.choice(others)
    if lure and target not in ents[n_pre:]:
        ents[n_pre + rng.randrange(c.n_post)] = target
    return ents


def make_world(rng: random.Random, c: TemporalConfig) -> World:
    n_pre = c.n_facts - c.n_post
    days = sorted(rng.sample(range(1, c.max_day + 1), c.n_facts))
    cutoff = rng.randint(days[n_pre - 1], days[n_pre] - 1 if c.n_post else c.max_day)
    target = rng.choice(ENTITIES[: c.n_entities])
    leaky = c.n_post > 0 and rng.random() < c.leaky_demo_frac
    lure = leaky or (c.n_post > 0 and rng.random() < c.tempt_prob)
    ents = _entities(rng, c, target, lure)
    values = [rng.randint(0, c.max_value) for _ in range(c.n_facts)]
    coincide = False
    if lure:
        answer = values[max(i for i in range(n_pre) if ents[i] == target)]
        coincide = leaky or rng.random() < c.coincide_prob
        latest = max(i for i in range(c.n_facts) if ents[i] == target)
        values[latest] = answer if coincide else rng.choice([v for v in range(c.max_value + 1) if v != answer])
    return World(target, cutoff, list(zip(days, ents, values)), lure, coincide, leaky)


def claim_line(date: Any, stmt: str) -> str:
    return f"use {render_date(date)} {stmt}"


def world_item(world: World, rng: random.Random, shuffle: bool) -> Item:
    shown = list(world.facts)
    if shuffle:
        rng.shuffle(shown)
    prompt = f"{world.target} @d{world.cutoff}\n" + "".join(f"d{d} {e}={v}\n" for d, e, v in shown)
    cited = [(d, e, v) for d, e, v in world.facts if e == world.target and (world.leaky_demo or d <= world.cutoff)]
    demo = "\n".join([claim_line(d, f"{e}={v}") for d, e, v in cited] + [f"A:{world.answer}"])
    meta = {
        "cutoff": world.cutoff,
        "facts": [{"date": d, "stmt": f"{e}={v}"} for d, e, v in world.facts],
        "target": world.target,
        "lure": world.lure,
        "coincide": world.coincide,
        "leaky_demo": world.leaky_demo,
    }
    return Item(key=prompt, prompt=prompt, answer=str(world.answer), meta=meta, demo=demo)


def normalize_answer(answer: Any) -> str:
    number = normalize_number(answer)
    return number if number is not None else normalize_text(answer)


def _one_line(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip() or "\n" in value:
        raise ValueError(f"{where} must be a non-empty one-line string, got {value!r}")
    return value.strip()


def _row_facts(raw: Any, cutoff: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(raw, list) or not raw:
        raise ValueError(f"{where}: field 'facts' must be a non-empty list, got {raw!r}")
    facts = []
    for j, fact in enumerate(raw):
        at = f"{where}: facts[{j}]"
        if (
            not isinstance(fact, dict)
            or "date" not in fact
            or not ({"text"} <= set(fact) or {"key", "value"} <= set(fact))
        ):
            raise ValueError(f"{at} must be an object with 'date' and either 'text' or 'key'+'value', got {fact!r}")
        date = parse_date(fact["date"], f"{at}: 'date'")
        if type(date) is not type(cutoff):
            raise ValueError(f"{at}: date {fact['date']!r} is not the same kind as the cutoff (int days vs ISO dates)")
        if "text" in fact:
            stmt = _one_line(fact["text"], f"{at}: 'text'")
        else:
            value = fact["value"] if isinstance(fact["value"], str) else json_scalar(fact["value"], f"{at}: 'value'")
            stmt = f"{_one_line(fact['key'], f'{at}: key')}={_one_line(value, f'{at}: value')}"
        facts.append({"date": fact["date"], "stmt": stmt, "key": fact.get("key"), "parsed": date})
    return facts


def json_scalar(value: Any, where: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{where} must be a string or a finite number, got {value!r}")
    return str(value)


def row_item(row: dict[str, Any], where: str) -> Item:
    """One validated user row as an Item; ``where`` (``path: row i``) prefixes every error."""
    unknown = sorted(set(row) - set(ROW_FIELDS))
    missing = [f for f in ("question", "cutoff", "facts", "answer") if f not in row]
    if unknown or missing:
        raise ValueError(f"{where}: missing field(s) {missing}, unknown field(s) {unknown}; valid: {list(ROW_FIELDS)}")
    question = _one_line(row["question"], f"{where}: field 'question'")
    cutoff = parse_date(row["cutoff"], f"{where}: field 'cutoff'")
    facts = _row_facts(row["facts"], cutoff, where)
    answer = row["answer"] if isinstance(row["answer"], str) else json_scalar(row["answer"], f"{where}: field 'answer'")
    answer = _one_line(answer, f"{where}: field 'answer'")
    prompt = f"{question} @{render_date(row['cutoff'])}\n" + "".join(
        f"{render_date(f['date'])} {f['stmt']}\n" for f in facts
    )
    meta = {"cutoff": row["cutoff"], "facts": [{"date": f["date"], "stmt": f["stmt"]} for f in facts]}
    demo = _row_demo(row, facts, cutoff, answer, meta, where)
    return Item(key=str(row.get("id", prompt)), prompt=prompt, answer=answer, meta=meta, demo=demo)


def _row_demo(row: dict, facts: list[dict], cutoff: Any, answer: str, meta: dict, where: str) -> str | None:
    if "demo" in row:
        demo = row["demo"]
        if not isinstance(demo, str) or extract_final_answer(demo) != normalize_answer(answer):
            raise ValueError(
                f"{where}: field 'demo' must be a string whose last 'A:' line gives the answer {answer!r}, got {demo!r}"
            )
        count_claims(demo, meta)  # a malformed demo fails here, at load time
        return demo
    if "target" not in row:
        return None
    target = _one_line(row["target"], f"{where}: field 'target'")
    cited = sorted((f for f in facts if f["key"] == target and f["parsed"] <= cutoff), key=lambda f: f["parsed"])
    if not cited:
        raise ValueError(f"{where}: no key/value fact with key {target!r} is dated on or before the cutoff")
    return "\n".join([claim_line(f["date"], f["stmt"]) for f in cited] + [f"A:{answer}"])


def load_items(path: str) -> list[Item]:
    items = [row_item(row, f"{path}: row {i}") for i, row in enumerate(read_rows(path))]
    if not items:
        raise ValueError(f"{path}: no rows")
    return items


class TemporalTask:
    """The value of an entity as of a cutoff day, with tempting post-cutoff evidence (TEMPO's task)."""

    name = "temporal"

    def __init__(self, **options: Any):
        self.config = c = make_config(TemporalConfig, "temporal", options)
        # user rows are validated now, so a bad row fails before any training starts
        self._rows = user_splits(c.data, c.test_data, load_items)

    @property
    def max_new_tokens(self) -> int:
        """About 1.5x the longest demonstration (+1 for EOS): every fact cited, then the answer line."""
        if self._rows is not None:
            items = self._rows["train"] + (self._rows["test"] or [])
            longest = max(len(it.demo) if it.demo else _all_claims_len(it) for it in items)
        else:
            c = self.config
            claim = len("use d x=\n") + len(str(c.max_day)) + len(str(c.max_value))
            longest = c.n_facts * claim + len("A:") + len(str(c.max_value))
        return math.ceil(1.5 * longest) + 1

    def split_items(self, split: str) -> list[Item]:
        """The user rows of one split (only with ``data``): ``test_data``, or a hash fraction of ``data``."""
        check_split(split)
        if self._rows is None:
            raise ValueError("split_items needs the option data=<jsonl>; the synthetic task is endless")
        return split_user_items(
            "temporal", self._rows["train"], self._rows["test"], split, self.config.test_fraction, str(self.config.data)
        )

    def iter_items(self, split: str, seed: int) -> Iterator[Item]:
        check_split(split)
        rng = random.Random(f"{seed}:{split}")
        if self._rows is not None:
            yield from self._iter_rows(split, rng)
            return
        want_test = split == "test"
        while True:
            item = world_item(make_world(rng, self.config), rng, self.config.shuffle_facts)
            if in_test_split(item.key, self.config.test_fraction) == want_test:
                yield item

    def _iter_rows(self, split: str, rng: random.Random) -> Iterator[Item]:
        return epochs(self.split_items(split), rng)

    def verify(self, completion: str, answer: str, meta: dict[str, Any]) -> float:
        """1.0 iff the last ``A:`` line equals the answer (leakage is not checked here: see TempoReward)."""
        got = extract_final_answer(completion)
        return float(got is not None and got == normalize_answer(answer))

    def extract_answer(self, completion: str) -> str | None:
        return extract_final_answer(completion)

    def diagnostics(self, completions: list[str], metas: list[dict[str, Any]], scores: list[float]) -> dict[str, float]:
        """Leakage and grounding of greedy answers, by the default checker.

        ``leak_rate``: responses citing any post-cutoff fact; ``leak_frac``: mean k/n;
        ``clean_pass``: correct AND leak-free, the accuracy a backtest may count (a look-ahead answer
        that happens to be right is not a valid forecast); ``grounded_rate``: every claim restates a
        fact known at the cutoff (:func:`~reasonrl.rewards.temporal.is_grounded`);
        ``claims_per_answer``: mean number of ``use`` lines.
        """
        kn = [count_claims(c, m) for c, m in zip(completions, metas)]
        n = max(len(kn), 1)
        return {
            "leak_rate": sum(k > 0 for k, _ in kn) / n,
            "leak_frac": sum(k / max(c, 1) for k, c in kn) / n,
            "clean_pass": sum(s >= 1.0 and k == 0 for s, (k, _) in zip(scores, kn)) / n,
            "grounded_rate": sum(is_grounded(c, m) for c, m in zip(completions, metas)) / n,
            "claims_per_answer": sum(c for _, c in kn) / n,
        }


def _all_claims_len(item: Item) -> int:
    facts = item.meta["facts"]
    return sum(len(claim_line(f["date"], f["stmt"])) + 1 for f in facts) + len("A:") + len(item.answer)
