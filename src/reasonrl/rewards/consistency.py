"""CodeThinker's consistency reward and the trace helpers behind it (arXiv 2605.17958, spec section 12).

The model predicts a program's output through a *consistency-tracing* chain of thought: one step
per executed line stating variable values, then the output. Two notations are parsed:

* compact (what the tiny character model is taught), one step per line::

      L1 x=2
      L2 y=6
      O:7

  ``L<line> <var>=<value>[ <var>=<value> ...]``; the output is ``O:<text>``, one ``O:`` line
  per printed line. A value written without spaces may carry its working: ``L2 b=5+5=10``
  claims ``b = 10`` (the text after the last ``=``); the working itself is not checked.
* the paper's template: ``[STEP k] line <L>: <var> = <value>, <var> = <value>`` and
  ``[OUTPUT] <value>``.

A value is a Python literal written the way ``repr`` writes it (``6``, ``'ab'``, ``[1,2]``;
spaces after commas optional). Values are compared after normalisation (:func:`canon_value`:
``repr(ast.literal_eval(text))`` when the text is a literal, else the stripped text), so
``[1,2]`` and ``[1, 2]`` agree. A step line whose body does not parse as assignments yields one
*malformed* assertion ``(line, None, rest)`` that can never be consistent: writing garbage in a
step costs consistency instead of escaping it [inferred].

Consistency [paper: component named; form inferred, spec 12(b)]: an assertion ``(line, var,
value)`` is consistent iff the true trace contains it, matched in execution order by a monotone
alignment (a longest common subsequence of the claims and the trace, so loop iterations align in
order and a claim can use a trace record once); ``c = #consistent / #assertions`` and ``c = 0``
without assertions.

Nothing here executes model text: the true trace comes with the item (``meta["trace"]``, a list
of ``[line, var, value]``), produced by the task that ran the program in the sandbox.
"""

from __future__ import annotations

import ast
import random
import re
from dataclasses import dataclass
from typing import Any, Sequence

from .base import Reward, RewardResult

__all__ = [
    "Assertion",
    "Step",
    "canon_value",
    "normalize_output",
    "parse_steps",
    "parse_output",
    "parse_trace",
    "step_boundaries",
    "consistency",
    "prefix_consistency",
    "first_inconsistent_step",
    "branch_point",
    "ConsistencyReward",
    "MODES",
]

Assertion = tuple  # (line: int, var: str | None, value: str); var None marks a malformed claim
PROCESS_TERMS = ("precision", "f1")
MODES = ("gated", "multiplicative", "outcome")
_MAX_LITERAL = 300  # longer texts are compared raw: literal_eval on huge inputs is slow

_COMPACT_STEP = re.compile(r"[ \t]*L(\d+)(?:[ \t]+(.*?))?[ \t]*")
_VERBOSE_STEP = re.compile(r"[ \t]*\[STEP[ \t]*\d+\][ \t]*line[ \t]*(\d+)[ \t]*:?[ \t]*(.*?)[ \t]*")
_OUTPUT = re.compile(r"[ \t]*(?:O:|\[OUTPUT\][ \t]?)(.*)")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_EQ = re.compile(r"[ \t]*=[ \t]*")
_CLOSE = {"[": "]", "(": ")", "{": "}"}


def canon_value(text: Any) -> str:
    """The comparable form of a value: ``repr(literal_eval(text))`` for a literal, else stripped text.
    Non-strings (JSON numbers, lists) are taken as values and written with ``repr``."""
    if not isinstance(text, str):
        return repr(text)
    text = text.strip()
    if len(text) > _MAX_LITERAL:
        return text
    try:
        return repr(ast.literal_eval(text))
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text  # not a literal (a bare word, a printed sentence): compare the text itself


def normalize_output(text: str) -> str:
    """Printed output made comparable: trailing blank lines dropped, each line through :func:`canon_value`."""
    lines = text.split("\n")
    while lines and not lines[-1].strip():
        lines.pop()
    return "\n".join(canon_value(line) for line in lines)


@dataclass(frozen=True)
class Step:
    offset: int  # character offset where the step's line starts in the completion
    line: int  # the program line the step is about
    assertions: tuple  # of Assertion


def _scan_quoted(s: str, i: int) -> int:
    quote, i = s[i], i + 1
    while i < len(s):
        if s[i] == "\\":
            i += 2
        elif s[i] == quote:
            return i + 1
        else:
            i += 1
    return -1


def _scan_value(s: str, i: int) -> int:
    """End of the literal starting at ``s[i]`` (quotes and brackets balanced), or -1 if unbalanced.
    A bare value (number, ``True``, ``None``) runs to the next space or comma."""
    if i >= len(s):
        return -1
    if s[i] in "'\"":
        return _scan_quoted(s, i)
    if s[i] in _CLOSE:
        stack = []
        while i < len(s):
            ch = s[i]
            if ch in "'\"":
                i = _scan_quoted(s, i)
                if i < 0:
                    return -1
                continue
            if ch in _CLOSE:
                stack.append(_CLOSE[ch])
            elif ch in ")]}":
                if not stack or stack.pop() != ch:
                    return -1
                if not stack:
                    return i + 1
            i += 1
        return -1
    j = i
    while j < len(s) and s[j] not in " \t,":
        j += 1
    return j if j > i else -1


def _parse_assignments(body: str, line: int) -> list:
    """``var=value`` pairs separated by spaces or commas; the unparseable rest becomes one malformed claim."""
    out, i = [], 0
    while True:
        while i < len(body) and body[i] in " \t,":
            i += 1
        if i >= len(body):
            return out
        name = _NAME.match(body, i)
        eq = _EQ.match(body, name.end()) if name else None
        end = _scan_value(body, eq.end()) if eq else -1
        if end < 0:
            return out + [(line, None, body[i:].strip())]
        text = body[eq.end() : end]
        if text[0] not in "'\"[({" and "=" in text:  # worked value "5+5=10": the claim is the last part
            text = text.rsplit("=", 1)[1]
        out.append((line, name.group(), canon_value(text)))
        i = end


def parse_steps(completion: str) -> list[Step]:
    """Every trace step (either notation), in the order written. A step with no assignments
    (``L3`` alone) is kept: it is still a boundary to branch at."""
    steps, offset = [], 0
    for raw in completion.split("\n"):
        m = _COMPACT_STEP.fullmatch(raw) or _VERBOSE_STEP.fullmatch(raw)
        if m:
            line = int(m.group(1))
            steps.append(Step(offset, line, tuple(_parse_assignments(m.group(2) or "", line))))
        offset += len(raw) + 1
    return steps


def parse_output(completion: str) -> tuple[str | None, int | None]:
    """The predicted output (the ``O:``/``[OUTPUT]`` lines joined by newlines) and the offset of the
    first such line; ``(None, None)`` when the completion states no output."""
    found, first, offset = [], None, 0
    for raw in completion.split("\n"):
        m = _OUTPUT.fullmatch(raw)
        if m:
            found.append(m.group(1))
            first = offset if first is None else first
        offset += len(raw) + 1
    return ("\n".join(found), first) if found else (None, None)


def parse_trace(completion: str) -> tuple[list, str | None]:
    """All claimed ``(line, var, value)`` assertions in order, and the predicted output (or None)."""
    assertions = [a for step in parse_steps(completion) for a in step.assertions]
    return assertions, parse_output(completion)[0]


def step_boundaries(completion: str) -> list[int]:
    """Character offsets where each step starts, then where the output starts (the template's
    last step) if there is one; branching at one of these keeps whole steps."""
    bounds = [s.offset for s in parse_steps(completion)]
    out_at = parse_output(completion)[1]
    return sorted(set(bounds + ([out_at] if out_at is not None else [])))


def _canon_trace(true_trace: Sequence) -> list[tuple]:
    out = []
    for k, rec in enumerate(true_trace):
        if not isinstance(rec, (list, tuple)) or len(rec) != 3:
            raise ValueError(f"true trace record {k} must be [line, var, value], got {rec!r}")
        out.append((int(rec[0]), str(rec[1]), canon_value(rec[2])))
    return out


def _norm_claims(assertions: Sequence) -> list[tuple]:
    return [(int(a[0]), a[1], canon_value(a[2])) for a in assertions]


def consistency(assertions: Sequence, true_trace: Sequence) -> tuple[float, list[bool]]:
    """``(c, per-assertion ok)`` under the best monotone alignment (longest common subsequence).

    Among the best alignments, earlier claims are matched first and at the earliest record, so a
    repeated claim of one record flags the repeat, not the original."""
    a, t = _norm_claims(assertions), _canon_trace(true_trace)
    n, m = len(a), len(t)
    if n == 0:
        return 0.0, []
    f = [[0] * (m + 1) for _ in range(n + 1)]  # f[i][j] = LCS(a[i:], t[j:])
    for i in range(n - 1, -1, -1):
        for j in range(m - 1, -1, -1):
            f[i][j] = max(f[i + 1][j], f[i][j + 1], 1 + f[i + 1][j + 1] if a[i] == t[j] else 0)
    ok, j = [], 0
    for i in range(n):
        hit = next((k for k in range(j, m) if a[i] == t[k] and 1 + f[i + 1][k + 1] == f[i][j]), None)
        ok.append(hit is not None)
        j = j if hit is None else hit + 1
    return sum(ok) / n, ok


def prefix_consistency(completion: str, true_trace: Sequence) -> list[float]:
    """Running consistency after each step: ``c`` of the claims in steps ``1..k`` (``0`` while none),
    for scoring step prefixes in dynamic beam sampling."""
    t = _canon_trace(true_trace)
    row, claims, out = [0] * (len(t) + 1), 0, []  # row[j] = LCS(claims so far, t[:j])
    for step in parse_steps(completion):
        for a in _norm_claims(step.assertions):
            new = [0] * (len(t) + 1)
            for j in range(len(t)):
                new[j + 1] = max(new[j], row[j + 1], row[j] + 1 if a == t[j] else 0)
            row, claims = new, claims + 1
        out.append(row[-1] / claims if claims else 0.0)
    return out


def first_inconsistent_step(completion: str, true_trace: Sequence) -> int | None:
    """Index of the first step whose claims cannot all be matched together with every claim before
    them (in order), i.e. the first step after which the prefix stops being fully consistent; None
    if the whole trace is consistent. Greedy earliest matching decides "all match" exactly."""
    t, j = _canon_trace(true_trace), 0
    for index, step in enumerate(parse_steps(completion)):
        for a in _norm_claims(step.assertions):
            j = next((k for k in range(j, len(t)) if t[k] == a), -1) + 1
            if j == 0:
                return index
    return None


def branch_point(completion: str, true_trace: Sequence, rng: random.Random) -> int:
    """Where to cut a completion for a branched continuation [spec 12(b), dynamic beam sampling]:
    the start of the first inconsistent step; if every step is consistent, a random step boundary
    (:func:`step_boundaries`, excluding offset 0 when another exists, since cutting there shares
    nothing); 0 when the completion has no step at all."""
    steps = parse_steps(completion)
    bad = first_inconsistent_step(completion, true_trace)
    if bad is not None:
        return steps[bad].offset
    candidates = [b for b in step_boundaries(completion) if b > 0]
    return rng.choice(candidates) if candidates else 0


@dataclass(frozen=True)
class ConsistencyReward(Reward):
    """CodeThinker's consistency reward [paper: "gated ORM + PRM"; forms inferred, spec 12(b)].

    ``o`` = predicted output equals the reference (column ``answer``) after :func:`normalize_output`;
    ``c`` = :func:`consistency` of the parsed claims against ``meta[trace_key]``.

    * ``mode="gated"`` (default): ``R = 1[c >= tau]*o + lambda_p*c`` -- a correct output with an
      inconsistent trace loses the outcome credit; a partly right trace still earns ``lambda_p*c``.
    * ``mode="multiplicative"``: ``R = o*(1 - lambda_p + lambda_p*c)`` (needs ``lambda_p`` in [0, 1]).
    * ``mode="outcome"``: ``R = o``.
    * ``process`` [inferred; the spec's ``c`` is the default]: what the process part pays, ``"precision"``
      = ``c`` or ``"f1"`` = the harmonic mean of ``c`` and recall (matched claims / true records). The
      gate always uses ``c``. Why: ``c`` is a precision, so a trace that claims less scores higher; on
      the tiny reasoner CodeThinker with ``c`` shortens its traces (recall 0.69 -> 0.50, 30 steps)
      and loses accuracy. F1 pays for covering the execution too.

    Metrics ``reward/<name>/``: ``c_mean``, ``outcome_rate``, ``gated_out_rate`` (correct output
    but ``c < tau``: the outcome credit withheld, i.e. a guessed or unfaithful answer),
    ``no_trace_rate`` (no claims at all), ``recall_mean`` (matched claims / true records: a
    trace that states one easy fact has ``c = 1`` but low recall), ``unparsed_frac`` (no output line).
    """

    tau: float = 0.5
    lambda_p: float = 0.5
    mode: str = "gated"
    process: str = "precision"
    trace_key: str = "trace"
    name: str = "consistency"

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"unknown mode {self.mode!r} for ConsistencyReward; valid: {list(MODES)}")
        if self.process not in PROCESS_TERMS:
            raise ValueError(f"unknown process {self.process!r} for ConsistencyReward; valid: {list(PROCESS_TERMS)}")
        if not 0.0 <= self.tau <= 1.0:
            raise ValueError(f"tau must be in [0, 1], got {self.tau}")
        if self.lambda_p < 0 or (self.mode == "multiplicative" and self.lambda_p > 1):
            raise ValueError(f"lambda_p must be >= 0 (<= 1 in multiplicative mode), got {self.lambda_p}")

    def value(self, o: float, c: float, recall: float | None = None) -> float:
        """``recall`` is needed only with ``process="f1"``."""
        if self.mode == "outcome":
            return o
        p = c
        if self.process == "f1":
            if recall is None:
                raise ValueError("process='f1' needs the recall of the trace")
            p = 2 * c * recall / (c + recall) if c + recall > 0 else 0.0
        if self.mode == "multiplicative":
            return o * (1.0 - self.lambda_p + self.lambda_p * p)
        return float(c >= self.tau) * o + self.lambda_p * p

    def score(self, prompts: Sequence[str], completions: Sequence[str], **columns: Any) -> RewardResult:
        answers, metas = columns.get("answer"), columns.get("meta")
        if answers is None or metas is None or len(answers) != len(completions) or len(metas) != len(completions):
            raise ValueError(f"{self.name} needs the columns 'answer' and 'meta' with one value per completion")
        values, stats = [], {"c": 0.0, "o": 0.0, "gated": 0.0, "none": 0.0, "recall": 0.0, "unparsed": 0.0}
        for row, (completion, answer, meta) in enumerate(zip(completions, answers, metas)):
            if not isinstance(meta, dict) or self.trace_key not in meta:
                raise ValueError(
                    f"{self.name}: row {row}: meta has no {self.trace_key!r} (the true trace); "
                    "use a task that traces its programs (task 'code')"
                )
            claims, predicted = parse_trace(completion)
            c, ok = consistency(claims, meta[self.trace_key])
            o = float(predicted is not None and normalize_output(predicted) == normalize_output(str(answer)))
            recall = sum(ok) / max(len(meta[self.trace_key]), 1)
            values.append(self.value(o, c, recall))
            stats["c"] += c
            stats["o"] += o
            stats["gated"] += float(o == 1.0 and c < self.tau)
            stats["none"] += float(not claims)
            stats["recall"] += recall
            stats["unparsed"] += float(predicted is None)
        n = max(len(completions), 1)
        names = {
            "c": "c_mean",
            "o": "outcome_rate",
            "gated": "gated_out_rate",
            "none": "no_trace_rate",
            "recall": "recall_mean",
            "unparsed": "unparsed_frac",
        }
        return RewardResult(values, {f"reward/{self.name}/{names[k]}": v / n for k, v in stats.items()})
