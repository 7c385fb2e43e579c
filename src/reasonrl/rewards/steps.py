"""Step parsing and per-step rewards for semantic-ID (SID) recommendation (SAPO, arXiv 2605.17648).

A SAPO completion interleaves K reasoning steps; step k is one thinking block followed by one SID
token (the level-k code of the recommended item). The layout parsed here is one step per line::

    a:33531>a3
    b:0+3>b3
    c:2+3>c5

* A **step line** is a non-empty line (after stripping whitespace). The first K such lines are
  steps 1..K; later lines are outside every step.
* Its **thinking block** runs from the line's first non-space character up to and including the
  line's last ``>``; its **SID token** is the text after that ``>``, stripped, when it is a letter
  followed by digits (``a3``, ``c12``). Otherwise the step's ``sid`` is ``None`` (unparseable).
* The step's **span** ``(start, end)`` is the character range of the block plus the SID token in
  the completion (end exclusive, trailing whitespace excluded); newlines between steps and
  anything after step K are outside every span.
* A completion with fewer than K step lines has **missing** steps: ``span`` and ``sid`` ``None``.

Per-step rewards (``step_reward`` in the spec, default ``"position_match"``):

* ``"position_match"``: ``r_k = 1[s_k == s*_k]`` [paper: spares matched SID-token positions];
* ``"prefix_match"``: ``r_k = 1[s_1..s_k == s*_1..s*_k]`` [inferred alternative for coarse-to-fine
  codes]. A missing or unparseable step scores 0 in both modes.

No torch here: the advantage side lives in :mod:`reasonrl.advantages.steps`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Sequence

from .base import Reward, RewardResult

__all__ = [
    "Step",
    "STEP_MODES",
    "SID_TOKEN_RE",
    "split_sid",
    "parse_steps",
    "parsed_sid",
    "step_rewards",
    "SidExact",
    "SidLevels",
]

STEP_MODES = ("position_match", "prefix_match")
SID_TOKEN_RE = re.compile(r"[a-z][0-9]+")


@dataclass(frozen=True)
class Step:
    """Step ``level`` (0-based) of one completion: its character span and its SID token."""

    level: int
    start: int | None  # first character of the thinking block; None if the step is missing
    end: int | None  # one past the last character of the SID token (or of the line)
    sid: str | None  # the SID token text, None if missing or unparseable

    @property
    def span(self) -> tuple[int, int] | None:
        return None if self.start is None else (self.start, self.end)


def split_sid(sid: str) -> list[str]:
    """``"a3b1c4"`` -> ``["a3", "b1", "c4"]``; raises on anything that is not letter+digits tokens."""
    if not isinstance(sid, str) or not sid:
        raise ValueError(f"a SID must be a non-empty string like 'a3b1c4', got {sid!r}")
    tokens = SID_TOKEN_RE.findall(sid)
    if "".join(tokens) != sid:
        raise ValueError(f"malformed SID {sid!r}: expected letter+digits tokens like 'a3b1c4'")
    return tokens


def _lines(text: str) -> list[tuple[int, str]]:
    """(offset of the line's first character, line text) for every line of ``text``."""
    out, pos = [], 0
    for line in text.split("\n"):
        out.append((pos, line))
        pos += len(line) + 1
    return out


def parse_steps(completion: str, K: int) -> list[Step]:
    """The K steps of ``completion`` (always K entries; see the module docstring for the layout)."""
    if K < 1:
        raise ValueError(f"K (number of SID levels) must be >= 1, got {K}")
    steps: list[Step] = []
    for offset, line in _lines(completion):
        if len(steps) == K:
            break
        body = line.strip()
        if not body:
            continue
        start = offset + (len(line) - len(line.lstrip()))
        end = start + len(body)
        cut = body.rfind(">")
        token = body[cut + 1 :].strip() if cut >= 0 else ""
        sid = token if SID_TOKEN_RE.fullmatch(token) else None
        steps.append(Step(len(steps), start, end, sid))
    steps += [Step(k, None, None, None) for k in range(len(steps), K)]
    return steps


def parsed_sid(completion: str, K: int) -> str | None:
    """The full SID a completion emits (its K SID tokens joined), or None if any step lacks one."""
    sids = [s.sid for s in parse_steps(completion, K)]
    return None if any(s is None for s in sids) else "".join(sids)


def step_rewards(sids: Sequence[str | None], target: Sequence[str], mode: str = "position_match") -> list[float]:
    """Per-step rewards of one rollout's SID tokens against the target tokens (missing -> 0)."""
    if mode not in STEP_MODES:
        raise ValueError(f"unknown step reward mode {mode!r}; valid: {list(STEP_MODES)}")
    if len(sids) != len(target):
        raise ValueError(f"got {len(sids)} SID tokens for a target of {len(target)} levels ({list(target)})")
    hits = [float(s is not None and s == t) for s, t in zip(sids, target)]
    if mode == "position_match":
        return hits
    out, ok = [], 1.0
    for h in hits:  # prefix_match: one miss zeroes every later step
        ok *= h
        out.append(ok)
    return out


def _targets(columns: dict[str, Any], n: int) -> list[list[str]]:
    if "answer" not in columns:
        raise ValueError(f"needs the column 'answer' (the target SID), got columns {sorted(columns)}")
    answers = list(columns["answer"])
    if len(answers) != n:
        raise ValueError(f"column 'answer' has {len(answers)} values for {n} completions")
    return [split_sid(a) for a in answers]


class SidExact(Reward):
    """1.0 when the K SID tokens of the completion equal the target SID exactly, else 0.0.

    The column ``answer`` holds the target SID (``"a3b1c4"``); K is its number of tokens. Metric
    ``reward/sid_exact/unparsed_frac``: rows missing at least one SID token.
    """

    name = "sid_exact"

    def score(self, prompts: Sequence[str], completions: Sequence[str], **columns: Any) -> RewardResult:
        targets = _targets(columns, len(completions))
        got = [parsed_sid(c, len(t)) for c, t in zip(completions, targets)]
        values = [float(g is not None and g == "".join(t)) for g, t in zip(got, targets)]
        unparsed = sum(g is None for g in got) / max(len(got), 1)
        return RewardResult(values, {f"reward/{self.name}/unparsed_frac": unparsed})


class SidLevels(Reward):
    """Mean of the per-level position matches (a partial-credit SID reward), in [0, 1].

    ``mode`` picks the step reward averaged (``"position_match"`` default, or ``"prefix_match"``).
    Metrics ``reward/sid_levels/level_<k>`` (k = 1..K): the batch accuracy of level k, over the rows
    whose target has that level.
    """

    name = "sid_levels"

    def __init__(self, mode: str = "position_match"):
        if mode not in STEP_MODES:
            raise ValueError(f"unknown sid_levels mode {mode!r}; valid: {list(STEP_MODES)}")
        self.mode = mode

    def score(self, prompts: Sequence[str], completions: Sequence[str], **columns: Any) -> RewardResult:
        targets = _targets(columns, len(completions))
        per_row = [
            step_rewards([s.sid for s in parse_steps(c, len(t))], t, self.mode) for c, t in zip(completions, targets)
        ]
        values = [sum(r) / len(r) for r in per_row]
        metrics: dict[str, float] = {}
        for k in range(max((len(t) for t in targets), default=0)):
            level = [r[k] for r in per_row if len(r) > k]
            metrics[f"reward/{self.name}/level_{k + 1}"] = sum(level) / len(level)
        return RewardResult(values, metrics)
