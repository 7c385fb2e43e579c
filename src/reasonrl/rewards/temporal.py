"""TEMPO: a two-mode reward that makes leak-freedom a hard prerequisite (arXiv 2605.18843, Zhang & Stadie).

For backtesting, a model must reason only from facts dated on or before each instance's cutoff.
TEMPO scores a response in one of two modes:

* **leakage mode** -- the response makes ``k > 0`` post-cutoff claims: ``r = -lf`` with
  ``lf = k / max(n, 1)`` (``n`` = number of claims); the task result is ignored;
* **performance mode** -- ``k == 0``: ``r = R_task in [0, 1]``.

Every leak-free response thus scores >= 0, above every leaking one (the lexicographic order the
paper calls a "hard prerequisite"); advantages are then plain GRPO on ``r``.

Leakage checker (pluggable). A checker is any callable ``(completion, meta) -> (k, n)``: the spec
allows claim extraction plus date lookup (the default :func:`count_claims`) or an LLM judge given
the cutoff (wrap an expensive one in :class:`CachedChecker`). The default checker reads:

* ``meta["cutoff"]`` -- an int day or an ISO ``"YYYY-MM-DD"`` date;
* ``meta["facts"]`` -- ``[{"date": <same kind>, "stmt": "<statement>"}, ...]``, the dated evidence.

Claim syntax (one claim per line): ``use <date> <statement>`` or ``use <statement>``, e.g.
``use d3 x=7`` or ``use 2020-03-01 price=12``; ``d<int>`` is a synthetic day. A claim leaks iff

1. its stated date is after the cutoff, or
2. its statement matches facts of the evidence and *all* of them are dated after the cutoff --
   so a post-cutoff fact leaks even when its date is omitted or misstated; a statement that is
   also supported by a fact on/before the cutoff does not leak (the coincidence case).

[inferred] Facts dated exactly on the cutoff are known (``date <= cutoff`` is allowed). A claim
date of the other kind than the cutoff (``d5`` against ISO data) or an invalid date is treated as
omitted; a statement found nowhere in the evidence (a hallucination) is not a leak by itself.
Statements are compared after folding case and whitespace, spaces around ``=`` and a numeric value
to its canonical form (``x = 07`` is ``x=7``).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from .answers import normalize_number, normalize_text
from .base import Reward, RewardResult
from .match import ExactMatch, column_values

# three statements, each within a line: ruff format would put one name per line
__all__ = ["CHECKERS", "CLAIM_RE", "Claim", "CachedChecker", "LeakChecker", "TempoReward", "TempoRows", "count_claims"]
__all__ += ["extract_claims", "extract_final_answer", "is_grounded", "normalize_statement", "parse_date"]
__all__ += ["render_date", "tempo_rewards"]

LeakChecker = Callable[[str, dict], "tuple[int, int]"]
TaskScore = Callable[[str, Any, dict], float]

CLAIM_RE = re.compile(r"^[ \t]*use[ \t]+(.*?)[ \t]*$", re.MULTILINE)
_DAY = re.compile(r"d(\d+)")
_ISO = re.compile(r"\d{4}-\d{2}-\d{2}")
_ANSWER = re.compile(r"A:[ \t]*([^\n]*)")
LEAK_PENALTIES = ("fraction", "count")
MODE_SCHEDULES = ("per_response", "global")


def parse_date(value: Any, what: str = "date") -> int | dt.date:
    """An evidence/cutoff date: a JSON int day (``3``) or an ISO string ``"YYYY-MM-DD"``; raises otherwise."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and _ISO.fullmatch(value):
        try:
            return dt.date.fromisoformat(value)
        except ValueError as err:
            raise ValueError(f"{what} {value!r} is not a valid calendar date ({err})") from err
    raise ValueError(f"{what} must be an int day or an ISO 'YYYY-MM-DD' string, got {value!r}")


def render_date(value: Any) -> str:
    """How a date is written in prompts and claims: ``d3`` for an int day, the ISO string otherwise."""
    parsed = parse_date(value)
    return f"d{parsed}" if isinstance(parsed, int) else parsed.isoformat()


def _claim_date(token: str) -> int | dt.date | None:
    """The date a claim states, or None when the token is not a (valid) date."""
    if _DAY.fullmatch(token):
        return int(token[1:])
    if _ISO.fullmatch(token):
        try:
            return dt.date.fromisoformat(token)
        except ValueError:
            return None  # e.g. 2020-13-45: a garbled date is read as "date omitted"
    return None


def normalize_statement(stmt: str) -> str:
    """Canonical statement: case/whitespace folded, ``key = 07`` -> ``key=7``."""
    text = re.sub(r"\s*=\s*", "=", normalize_text(stmt, lowercase=True))
    key, sep, value = text.partition("=")
    number = normalize_number(value) if sep else None
    return f"{key}={number}" if number is not None else text


@dataclass(frozen=True)
class Claim:
    date: int | dt.date | None  # None: omitted or unparseable
    stmt: str  # normalised statement


def extract_claims(completion: str) -> list[Claim]:
    """Every ``use [<date>] <statement>`` line of a completion, in order."""
    claims = []
    for body in CLAIM_RE.findall(completion):
        first, _, rest = body.partition(" ")
        date = _claim_date(first)
        stmt = rest if date is not None else body
        claims.append(Claim(date, normalize_statement(stmt)))
    return claims


def _evidence(meta: dict) -> tuple[int | dt.date, dict[str, list[int | dt.date]]]:
    """(cutoff, statement -> dates of the facts stating it) from an instance's meta."""
    for field in ("cutoff", "facts"):
        if field not in meta:
            raise ValueError(f"the leakage checker needs meta[{field!r}]; meta has {sorted(meta)}")
    cutoff = parse_date(meta["cutoff"], "meta['cutoff']")
    dates: dict[str, list[int | dt.date]] = {}
    for i, fact in enumerate(meta["facts"]):
        if not isinstance(fact, dict) or "date" not in fact or "stmt" not in fact:
            raise ValueError(f"meta['facts'][{i}] must be a dict with 'date' and 'stmt', got {fact!r}")
        date = parse_date(fact["date"], f"meta['facts'][{i}]['date']")
        if type(date) is not type(cutoff):
            raise ValueError(
                f"meta['facts'][{i}] date {fact['date']!r} and cutoff {meta['cutoff']!r} are not "
                "the same kind (int days vs ISO dates)"
            )
        dates.setdefault(normalize_statement(fact["stmt"]), []).append(date)
    return cutoff, dates


def count_claims(completion: str, meta: dict) -> tuple[int, int]:
    """The default rule-based checker: ``(k post-cutoff claims, n claims)`` (rules in the module doc)."""
    cutoff, dates = _evidence(meta)
    claims = extract_claims(completion)
    k = 0
    for claim in claims:
        stated_late = claim.date is not None and type(claim.date) is type(cutoff) and claim.date > cutoff
        known = dates.get(claim.stmt)
        only_late = bool(known) and all(d > cutoff for d in known)
        k += stated_late or only_late
    return k, len(claims)


def is_grounded(completion: str, meta: dict) -> bool:
    """True iff the response makes at least one claim and every claim restates a fact known at the cutoff.

    Known: a fact dated on/before the cutoff with that statement; a stated date must be one of those
    facts' dates (an omitted date is fine). A diagnostic, not part of the reward: a response can be
    leak-free by citing made-up or misdated evidence, which :func:`count_claims` does not flag.
    """
    cutoff, dates = _evidence(meta)
    claims = extract_claims(completion)
    for claim in claims:
        known = [d for d in dates.get(claim.stmt, []) if d <= cutoff]
        if not known or (claim.date is not None and claim.date not in known):
            return False
    return bool(claims)


CHECKERS: dict[str, LeakChecker] = {"claims": count_claims}


class CachedChecker:
    """Memoises an expensive checker (e.g. an LLM judge) by (completion, meta); ``maxsize`` entries, FIFO."""

    def __init__(self, checker: LeakChecker, maxsize: int = 100_000):
        if maxsize < 1:
            raise ValueError(f"maxsize must be >= 1, got {maxsize}")
        self.checker, self.maxsize, self._cache = checker, maxsize, {}
        self.hits = self.misses = 0

    def __call__(self, completion: str, meta: dict) -> tuple[int, int]:
        key = (completion, json.dumps(meta, sort_keys=True, default=str))
        if key in self._cache:
            self.hits += 1
            return self._cache[key]
        self.misses += 1
        out = self.checker(completion, meta)
        if len(self._cache) >= self.maxsize:
            self._cache.pop(next(iter(self._cache)))
        self._cache[key] = out
        return out


def extract_final_answer(completion: str) -> str | None:
    """The text after the last ``A:``, normalised (canonical number, else whitespace-folded); None if empty."""
    found = _ANSWER.findall(completion)
    if not found or not found[-1].strip():
        return None
    number = normalize_number(found[-1])
    return number if number is not None else normalize_text(found[-1])


def _check_options(leak_penalty: str, k_cap: int, mode_schedule: str, tau: float, min_claims: int = 0) -> None:
    if not isinstance(min_claims, int) or isinstance(min_claims, bool) or min_claims < 0:
        raise ValueError(f"min_claims must be an int >= 0, got {min_claims!r}")
    if leak_penalty not in LEAK_PENALTIES:
        raise ValueError(f"unknown leak_penalty {leak_penalty!r}; valid: {list(LEAK_PENALTIES)}")
    if mode_schedule not in MODE_SCHEDULES:
        raise ValueError(f"unknown mode_schedule {mode_schedule!r}; valid: {list(MODE_SCHEDULES)}")
    if not isinstance(k_cap, int) or isinstance(k_cap, bool) or k_cap < 1:
        raise ValueError(f"k_cap must be an int >= 1, got {k_cap!r}")
    if not 0.0 <= tau <= 1.0:
        raise ValueError(f"tau must be in [0, 1], got {tau}")


def tempo_rewards(
    k: Sequence[int],
    n: Sequence[int],
    task: Sequence[float],
    *,
    leak_penalty: str = "fraction",
    k_cap: int = 5,
    mode_schedule: str = "per_response",
    tau: float = 0.01,
    min_claims: int = 0,
) -> tuple[list[float], list[bool]]:
    """TEMPO rewards and, per response, whether it was scored in performance mode.

    Per response (default): ``-penalty`` if ``k > 0`` else ``R_task``. ``mode_schedule="global"``:
    while the batch leak rate (fraction with ``k > 0``) is above ``tau``, every response gets the
    leakage-only reward (``-penalty``, 0 for a leak-free one); at or below ``tau``, the per-response rule.
    ``min_claims`` [inferred, not in the paper]: a leak-free response citing fewer claims scores 0
    and is not in performance mode (no evidence shown, no task credit).
    """
    _check_options(leak_penalty, k_cap, mode_schedule, tau, min_claims)
    leaky = [ki > 0 for ki in k]
    leak_rate = sum(leaky) / max(len(leaky), 1)
    leakage_only = mode_schedule == "global" and leak_rate > tau
    values, performance = [], []
    for ki, ni, ti, bad in zip(k, n, task, leaky):
        if leak_penalty == "fraction":  # lf = k / max(n, 1)
            pen = ki / max(ni, 1)
        else:  # "count": saturates at k_cap claims
            pen = min(ki, k_cap) / k_cap
        perf = not bad and not leakage_only and ni >= min_claims
        values.append(float(ti) if perf else (-pen if bad else 0.0))
        performance.append(perf)
    return values, performance


@dataclass
class TempoRows:
    """Both TEMPO components per response, for logging: claims, leaks, task score, reward, mode."""

    k: list[int]
    n: list[int]
    task: list[float]
    values: list[float]
    performance: list[bool]

    @property
    def leak_frac(self) -> list[float]:
        return [ki / max(ni, 1) for ki, ni in zip(self.k, self.n)]


class TempoReward(Reward):
    """TEMPO's two-mode reward (arXiv 2605.18843); defaults from the spec, [inferred] where marked.

    Options:
        checker: leakage checker ``(completion, meta) -> (k, n)``, or a name in :data:`CHECKERS`;
            default ``"claims"`` = :func:`count_claims` (claim extraction + date lookup).
        task_score: ``R_task(completion, answer, meta) -> [0, 1]``, e.g. a task's ``verify``; default
            (None) = exact match of :func:`extract_final_answer` with the ``answer`` column.
        leak_penalty: ``"fraction"`` (default, ``-k/max(n,1)``) or ``"count"`` (``-min(k,k_cap)/k_cap``).
        k_cap: [inferred] 5 -- the spec gives no value; claims beyond it add no penalty.
        mode_schedule: ``"per_response"`` (default) or ``"global"`` (leakage-only rewards for the
            whole batch while its leak rate exceeds ``tau``).
        tau: 0.01 (the spec's "e.g. 1%").
        min_claims: [inferred, not in the paper] 0 -- with ``n >= 1``, a leak-free response must cite
            evidence to earn task credit. A claim-based checker cannot see evidence that is not
            written down: from a tiny base that cites poorly (grounded rate 0.005), TEMPO learned to
            stop citing (3.0 -> 0 claims per answer in 90 steps). This closes that shortcut; from a
            base that cites accurately no answer went uncited in 30 steps, so it never triggered. A
            judge that reads free-form reasoning has the same blind spot when the reasoning is dropped.
        latch: [inferred] False -- with ``"global"``, the spec's "until ... then switch" is read per
            batch (stateless, so resume needs no state); True keeps per-response mode for good once
            one batch has reached ``tau`` (state in ``self.switched``, not checkpointed).
    """

    def __init__(
        self,
        *,
        checker: LeakChecker | str = "claims",
        task_score: TaskScore | None = None,
        leak_penalty: str = "fraction",
        k_cap: int = 5,
        mode_schedule: str = "per_response",
        tau: float = 0.01,
        latch: bool = False,
        min_claims: int = 0,
        answer_column: str = "answer",
        name: str = "tempo",
    ):
        _check_options(leak_penalty, k_cap, mode_schedule, tau, min_claims)
        if isinstance(checker, str) and checker not in CHECKERS:
            raise ValueError(
                f"unknown checker {checker!r}; valid: {sorted(CHECKERS)} or a callable (completion, meta) -> (k, n)"
            )
        self.checker = CHECKERS[checker] if isinstance(checker, str) else checker
        self._checker_spec, self._task_score_spec = checker, task_score
        self.task_score = task_score or self._exact_match
        self.leak_penalty, self.k_cap, self.mode_schedule, self.tau = leak_penalty, k_cap, mode_schedule, tau
        self.latch, self.switched, self.answer_column, self.name = latch, False, answer_column, name
        self.min_claims = min_claims
        self._match = ExactMatch(extract=extract_final_answer)

    def options(self) -> dict[str, Any]:
        """Constructor arguments (``rewards.tempo.min_claims=1`` on the command line; see rewards.options)."""
        return {
            "checker": self._checker_spec,
            "task_score": self._task_score_spec,
            "leak_penalty": self.leak_penalty,
            "k_cap": self.k_cap,
            "mode_schedule": self.mode_schedule,
            "tau": self.tau,
            "latch": self.latch,
            "min_claims": self.min_claims,
            "answer_column": self.answer_column,
            "name": self.name,
        }

    def _exact_match(self, completion: str, answer: Any, meta: dict) -> float:
        return self._match.judge(completion, answer) or 0.0

    def _check(self, i: int, completion: str, meta: dict) -> tuple[int, int]:
        k, n = self.checker(completion, meta)
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (k, n)) or not 0 <= k <= n:
            raise ValueError(f"leakage checker returned {(k, n)!r} for row {i}; expected ints with 0 <= k <= n")
        return k, n

    def _task(self, i: int, completion: str, answer: Any, meta: dict) -> float:
        if answer is None:
            raise ValueError(f"row {i}: column {self.answer_column!r} is None; TEMPO needs a reference answer")
        score = self.task_score(completion, answer, meta)
        if not isinstance(score, (int, float)) or not math.isfinite(score) or not 0.0 <= score <= 1.0:
            raise ValueError(f"row {i}: task score {score!r} is not in [0, 1] (TEMPO's R_task must be)")
        return float(score)

    def components(self, completions: Sequence[str], **columns: Any) -> TempoRows:
        """Per-response leak counts, task scores, rewards and modes (what :meth:`score` logs)."""
        answers = column_values(columns, self.answer_column, len(completions))
        metas = column_values(columns, "meta", len(completions))
        kn = [self._check(i, c, m) for i, (c, m) in enumerate(zip(completions, metas))]
        task = [self._task(i, c, a, m) for i, (c, a, m) in enumerate(zip(completions, answers, metas))]
        schedule = "per_response" if (self.latch and self.switched) else self.mode_schedule
        k, n = [a for a, _ in kn], [b for _, b in kn]
        values, perf = tempo_rewards(
            k,
            n,
            task,
            leak_penalty=self.leak_penalty,
            k_cap=self.k_cap,
            mode_schedule=schedule,
            tau=self.tau,
            min_claims=self.min_claims,
        )
        if self.mode_schedule == "global" and sum(x > 0 for x in k) / max(len(k), 1) <= self.tau:
            self.switched = True  # same comparison as tempo_rewards
        return TempoRows(k, n, task, values, perf)

    def score(self, prompts: Sequence[str], completions: Sequence[str], **columns: Any) -> RewardResult:
        rows = self.components(completions, **columns)
        m = max(len(rows.k), 1)
        p = f"reward/{self.name}"
        metrics = {
            f"{p}/leak_rate": sum(x > 0 for x in rows.k) / m,
            f"{p}/leak_frac_mean": sum(rows.leak_frac) / m,
            f"{p}/task_score": sum(rows.task) / m,
            f"{p}/performance_mode_frac": sum(rows.performance) / m,
            f"{p}/claims_mean": sum(rows.n) / m,
        }
        return RewardResult(list(rows.values), metrics)
