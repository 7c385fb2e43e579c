"""Built-in task ``recommend``: next-item recommendation over semantic IDs, one reasoning step per level.

The testbed of SAPO (arXiv 2605.17648): items carry coarse-to-fine semantic IDs (SIDs) of K levels,
level k written as a letter (``a``, ``b``, ``c``, ...) and a code ``0..codes-1``, so with the
defaults (K=3, 8 codes) an item is ``a3b1c4`` and the catalogue is all 512 such SIDs. A user's
history is a list of items; the next item is fixed level by level by simple rules:

* level 1 (coarse): the most frequent level-1 code of the history (the generator makes it unique,
  seen ``min_mode``..``max_mode`` times);
* level k >= 2: ``(level-k code of the anchor + shift) mod codes``, where the anchor is an item of
  the *mode group* (the history items carrying that coarse code): its **last** item for even k
  (2, 4, ...), its **first** item for odd k (3, 5, ...). So every finer step is a look-up keyed
  by step 1's answer, and a wrong coarse step drags the finer ones down.

Each step's thinking block shows its inputs: level 1 lists the history's coarse codes, level k
names the group and the code it reads. ``shift`` (default 0: the code is copied) turns the read
code into its ``shift``-th cyclic successor, a map the tiny model learns much more slowly.

A warm-started tiny model finds the coarse code nearly always but the anchors only partly (the
last or first history item is a tempting positional guess that is right only when it belongs to
the group), which is the per-step structure SAPO's credit assignment exploits. Knobs: ``levels``,
``codes``, ``history``, ``min_mode``/``max_mode`` (how often the coarse code recurs; a rarer one
makes the anchors harder to guess by position), ``shift``, ``rule_noise``.

With probability ``rule_noise`` per level the target code is replaced by a random other code (an
irreducible error; the demo's thinking still shows the rule's inputs). The prompt lists the history;
the completion is one line per level: a short thinking block, ``>``, then the SID token::

    prompt:      h:a3b1c4,a5b6c0,a3b2c7,a1b4c1,a6b0c2,a3b5c3
    completion:  a:353163>a3
                 b:a3b5>b5
                 c:a3c4>c4

The reference answer is the full SID (``a3b5c4``), ``meta["sid"]`` its tokens (``["a3", "b5",
"c4"]``). There is no separate answer line: the last step line ends with the last SID token, and
the answer is the K SID tokens joined (so the exact-match outcome and SAPO's per-step rewards
never disagree). :meth:`RecommendTask.verify` is exact match of the full SID; lines after step K
are ignored. Steps are parsed by :func:`reasonrl.rewards.steps.parse_steps`.

User data (options ``data`` / ``test_data``): JSONL rows, one user each::

    {"history": ["a3b1c4", "a3b6c0", "a5b2c7"], "target": "a3b6c4", "demo": "a:335>a3\\nb:a3b6>b6\\nc:a3c4>c4"}

* ``history``: non-empty list of SID strings, each with exactly ``levels`` tokens, letters ``a,b,...``
  in order, codes any non-negative integer;
* ``target``: the next item's SID, same format;
* ``demo`` (optional string): a correct completion for warm starts; it must parse to ``target``.

The prompt is built from ``history`` as for synthetic items; the item key is the prompt.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterator

from ..rewards.steps import parse_steps, parsed_sid, split_sid, step_rewards
from .base import Item, check_split, epochs, in_test_split, make_config, split_user_items, user_splits
from .files import read_rows

LEVEL_LETTERS = "abcdefgh"


@dataclass(frozen=True)
class RecommendConfig:
    levels: int = 3  # K, SID levels (1..8)
    codes: int = 8  # codes per level (2..10: one digit each)
    history: int = 6  # items in a synthetic history
    min_mode: int = 2  # least count of the most frequent coarse code
    max_mode: int | None = 4  # most count of it, capped at ``history`` (None: ``history``); low counts
    # make the anchor of the fine levels hard to guess by position
    shift: int = 0  # level k >= 2 emits the anchor's code + shift (mod codes); 0 copies it
    rule_noise: float = 0.0  # per-level probability that the target code breaks the rule
    test_fraction: float = 0.1
    data: str | None = None  # JSONL user rows (train); see the module docstring
    test_data: str | None = None  # JSONL held-out rows; without it: a hash fraction of ``data``

    def __post_init__(self):
        if not 1 <= self.levels <= len(LEVEL_LETTERS):
            raise ValueError(f"levels must be in 1..{len(LEVEL_LETTERS)}, got {self.levels}")
        if not 2 <= self.codes <= 10:
            raise ValueError(f"codes must be in 2..10 (one digit per code), got {self.codes}")
        if self.history < 1:
            raise ValueError(f"history must be >= 1, got {self.history}")
        top = self._top()
        if not 1 <= self.min_mode <= top:
            raise ValueError(
                f"need 1 <= min_mode <= min(max_mode, history), got min_mode={self.min_mode}, "
                f"max_mode={self.max_mode}, history={self.history}"
            )
        if not self.mode_counts():
            raise ValueError(
                f"no history of {self.history} items over {self.codes} codes has a unique most "
                f"frequent coarse code seen {self.min_mode}..{top} times"
            )
        if not 0 <= self.shift < self.codes:
            raise ValueError(f"shift must be in 0..codes-1 = 0..{self.codes - 1}, got {self.shift}")
        if not 0.0 <= self.rule_noise <= 1.0:
            raise ValueError(f"rule_noise must be in [0, 1], got {self.rule_noise}")
        if self.test_data is not None and self.data is None:
            raise ValueError("test_data needs data (the train rows) as well")

    def _top(self) -> int:
        return self.history if self.max_mode is None else min(self.max_mode, self.history)

    def mode_counts(self) -> list[int]:
        """The feasible counts of the most frequent coarse code in a synthetic history."""
        return [n for n in range(self.min_mode, self._top() + 1) if _mode_feasible(n, self.history, self.codes)]


def _mode_feasible(count: int, n: int, codes: int) -> bool:
    """Can ``n - count`` items use the other codes, each fewer than ``count`` times?"""
    return count >= 1 and (n - count) <= (codes - 1) * (count - 1) and (count > 1 or n == 1)


def build_prompt(history: list[str]) -> str:
    return "h:" + ",".join(history) + "\n"


def format_sid(codes: list[int]) -> str:
    return "".join(f"{LEVEL_LETTERS[k]}{c}" for k, c in enumerate(codes))


def rule_step(history: list[list[int]], k: int, codes: int, shift: int = 0) -> tuple[int, str]:
    """The rule's code for level ``k`` (0-based) and that step's thinking block (the text before ``>``)."""
    letter = LEVEL_LETTERS[k]
    mode = _mode([h[0] for h in history])
    if k == 0:  # coarse: the most frequent code; the block lists the history's coarse codes
        return mode, "a:" + "".join(str(h[0]) for h in history)
    group = [h for h in history if h[0] == mode]
    anchor = group[-1] if k % 2 == 1 else group[0]  # level 2, 4, ...: last item; 3, 5, ...: first
    read = anchor[k]
    return (read + shift) % codes, f"{letter}:a{mode}{letter}{read}"


def _mode(coarse: list[int]) -> int:
    counts = Counter(coarse).most_common()
    if len(counts) > 1 and counts[0][1] == counts[1][1]:
        raise ValueError(f"history coarse codes {coarse} have no unique most frequent code")
    return counts[0][0]


def demo_text(thoughts: list[str], target: list[int]) -> str:
    return "\n".join(f"{t}>{LEVEL_LETTERS[k]}{c}" for k, (t, c) in enumerate(zip(thoughts, target)))


def _demo_estimate(n_history: int, width: int, levels: int) -> int:
    """Length of a rule-style demo: ``a:`` + the history's coarse codes + ``>a3``, then one line of
    ``c:a3c2>c2`` per finer level (codes ``width`` digits wide), newlines between."""
    return 2 + n_history * width + 2 + width + (levels - 1) * (7 + 4 * width)


def _read_sid(value: Any, levels: int, where: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{where}: expected a SID string like 'a3b1c4', got {type(value).__name__} {value!r}")
    try:
        tokens = split_sid(value)
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from err
    letters = "".join(t[0] for t in tokens)
    if letters != LEVEL_LETTERS[:levels]:
        raise ValueError(
            f"{where}: SID {value!r} must have {levels} levels lettered "
            f"{LEVEL_LETTERS[:levels]!r}, got letters {letters!r}"
        )
    return value


class RecommendTask:
    """Semantic-ID next-item recommendation with one thinking block + SID token per level (SAPO)."""

    name = "recommend"

    def __init__(self, **options: Any):
        self.config = make_config(RecommendConfig, "recommend", options)
        self._rows = user_splits(self.config.data, self.config.test_data, self._load)

    # ---- user data -------------------------------------------------------------------------
    def _load(self, path: str) -> list[Item]:
        items = []
        for i, row in enumerate(read_rows(path)):
            where = f"{path}: row {i}"
            extra = set(row) - {"history", "target", "demo"}
            if extra or "history" not in row or "target" not in row:
                raise ValueError(f"{where}: needs fields 'history', 'target' (and optional 'demo'); got {sorted(row)}")
            hist = row["history"]
            if not isinstance(hist, list) or not hist:
                raise ValueError(f"{where}: field 'history' must be a non-empty list of SIDs, got {hist!r}")
            history = [_read_sid(h, self.config.levels, f"{where}: history[{j}]") for j, h in enumerate(hist)]
            target = _read_sid(row["target"], self.config.levels, f"{where}: field 'target'")
            demo = row.get("demo")
            if demo is not None and (not isinstance(demo, str) or parsed_sid(demo, self.config.levels) != target):
                raise ValueError(
                    f"{where}: field 'demo' must be a completion whose SID tokens give {target!r}, got {demo!r}"
                )
            prompt = build_prompt(history)
            width = max(len(t) - 1 for sid in history + [target] for t in split_sid(sid))
            meta = {"sid": split_sid(target), "levels": self.config.levels, "history": len(history), "width": width}
            items.append(Item(key=prompt, prompt=prompt, answer=target, meta=meta, demo=demo))
        if not items:
            raise ValueError(f"{path}: no rows")
        return items

    def _split_rows(self, split: str) -> list[Item]:
        return split_user_items(
            "recommend",
            self._rows["train"],
            self._rows["test"],
            split,
            self.config.test_fraction,
            str(self.config.data),
        )

    # ---- synthetic items -------------------------------------------------------------------
    def _history(self, rng: random.Random) -> list[list[int]]:
        c = self.config
        mode, count = rng.randrange(c.codes), rng.choice(c.mode_counts())
        while True:  # rejection: every other coarse code strictly rarer than the mode
            others = [rng.choice([x for x in range(c.codes) if x != mode]) for _ in range(c.history - count)]
            if all(n < count for n in Counter(others).values()):
                break
        coarse = [mode] * count + others
        rng.shuffle(coarse)
        return [[a] + [rng.randrange(c.codes) for _ in range(c.levels - 1)] for a in coarse]

    def make_item(self, history: list[list[int]], rng: random.Random | None = None) -> Item:
        """The item for a history of code lists; ``rng`` draws the rule noise (none without it)."""
        c = self.config
        target: list[int] = []
        thoughts: list[str] = []
        for k in range(c.levels):
            code, thought = rule_step(history, k, c.codes, c.shift)
            if rng is not None and c.rule_noise > 0 and rng.random() < c.rule_noise:
                code = rng.choice([x for x in range(c.codes) if x != code])
            target.append(code)
            thoughts.append(thought)
        prompt, answer = build_prompt([format_sid(h) for h in history]), format_sid(target)
        mode_count = Counter(h[0] for h in history).most_common(1)[0][1]
        meta = {
            "sid": split_sid(answer),
            "levels": c.levels,
            "history": len(history),
            "width": 1,
            "mode_count": mode_count,
        }
        return Item(key=prompt, prompt=prompt, answer=answer, meta=meta, demo=demo_text(thoughts, target))

    def iter_items(self, split: str, seed: int) -> Iterator[Item]:
        check_split(split)
        rng = random.Random(f"{seed}:{split}")
        if self._rows is not None:
            yield from epochs(self._split_rows(split), rng)
        want_test = split == "test"
        while True:
            item = self.make_item(self._history(rng), rng)
            if in_test_split(item.key, self.config.test_fraction) == want_test:
                yield item

    # ---- verification ----------------------------------------------------------------------
    @property
    def max_new_tokens(self) -> int:
        """About 1.5x the longest demonstration (user demos count with their own length), plus EOS."""
        c = self.config
        longest = _demo_estimate(c.history, 1, c.levels)
        if self._rows is not None:
            items = self._rows["train"] + (self._rows["test"] or [])
            longest = max(
                len(it.demo) if it.demo else _demo_estimate(it.meta["history"], it.meta["width"], c.levels)
                for it in items
            )
        return int(1.5 * longest) + 2

    def extract_answer(self, completion: str) -> str | None:
        """The SID the completion emits: its K step SID tokens joined, None if any is missing."""
        return parsed_sid(completion, self.config.levels)

    def verify(self, completion: str, answer: str, meta: dict[str, Any]) -> float:
        return float(self.extract_answer(completion) == answer)

    def diagnostics(self, completions: list[str], metas: list[dict[str, Any]], scores: list[float]) -> dict[str, float]:
        """Per-level accuracy ``level_<k>_acc`` (k = 1..K) of held-out outputs: the per-step structure
        SAPO's credit works on (coarse levels should beat fine ones)."""
        hits = [
            step_rewards([s.sid for s in parse_steps(c, self.config.levels)], m["sid"])
            for c, m in zip(completions, metas)
        ]
        n = max(len(hits), 1)
        return {f"level_{k + 1}_acc": sum(h[k] for h in hits) / n for k in range(self.config.levels)}

    def step_rewards(self, completion: str, meta: dict[str, Any], mode: str = "position_match"):
        """SAPO's segmentation (arXiv 2605.17648): per step, the character span of its thinking block
        and SID token (None when missing) and its reward against the target's SID token."""
        steps = parse_steps(completion, self.config.levels)
        return [s.span for s in steps], step_rewards([s.sid for s in steps], meta["sid"], mode)
