"""Mismatched wrong drafts (weak-to-strong elicitation, arXiv 2605.17314; spec distill-and-data.md section 9).

A weak model's draft solution goes into the training prompt; in the headline mode it is *wrong* and
was written for a *different* problem (a seeded derangement), and the learner is trained with
Dr. GRPO to write its own correct solution. At evaluation the draft slot holds the literal ``N/A``.
This module is the dataset transform, pure functions only (no model, no torch):

- :func:`draft_tier` / :func:`choose_draft`: per problem, one draft by tiers (spec 9 (b) 2);
- :func:`derangement`: a seeded shuffle with its fixed points repaired by swaps (9 (b) 3);
- :func:`draft_prompt`: the exact template, cutting only the draft when the prompt is too long (9 (b) 4-5);
- :func:`build_draft_dataset`: the four modes over a list of problems.

A draft is a :class:`Draft`: its text, ``correct`` (strict: the verifier says 1) and ``quasi`` (the
right answer is there but not in the required format, e.g. no ``\\boxed``; the spec's
"quasi-correct"). Users' drafts come from JSONL files (:mod:`.draft_files`).
"""

from __future__ import annotations

import random
import string
from dataclasses import dataclass
from typing import Callable, Sequence

from ..seeds import stable_seed

MODES = ("no_draft", "matched_wrong", "mismatched_wrong", "mismatched_correct")
NO_DRAFT = "N/A"  # what the draft slot holds in the no-draft mode and at evaluation (spec 9 (b) 4)
# the spec's exact text (9 (b) 4), no chat template; {problem} and {draft} are the only fields
TEMPLATE = (
    "Problem: {problem}\n\nThinking: {draft}\n\nThe thinking section may contain errors. Solve the math "
    "problem step by step. Write your own correct solution. Put your final answer within \\boxed{{}}."
    "\n\nCorrect Solution:"
)
MAX_PROMPT_TOKENS = 3072  # spec 9 (b) 5: the prompt cap; only the draft is cut to meet it


@dataclass(frozen=True)
class Draft:
    text: str
    correct: bool  # strict: the verifier gives 1
    quasi: bool = False  # the right answer without the required format (spec: "quasi-correct")

    def __post_init__(self):
        if self.correct and not self.quasi:  # strict-correct implies quasi-correct
            object.__setattr__(self, "quasi", True)


def draft_tier(draft: Draft, kind: str) -> int:
    """The tier of ``draft`` for a ``kind`` ("wrong" or "correct") pick; lower is preferred.

    wrong-type: 1 = not even quasi-correct (definitely wrong), 2 = the right answer without the
    format, 3 = the rest (strict-correct). correct-type: 1 = strict-correct, 2 = quasi only, 3 = wrong.
    """
    if kind == "wrong":
        return 1 if not draft.quasi else (2 if not draft.correct else 3)
    if kind == "correct":
        return 1 if draft.correct else (2 if draft.quasi else 3)
    raise ValueError(f"draft kind must be 'wrong' or 'correct', got {kind!r}")


def choose_draft(drafts: Sequence[Draft], kind: str, rng: random.Random) -> tuple[Draft, int]:
    """One of ``drafts`` (uniformly, by ``rng``) from its best non-empty tier, and that tier.

    Spec 9 (b) 2: the lowest tier with a draft wins; tier 3 is "else random", i.e. any draft."""
    if not drafts:
        raise ValueError("a problem needs at least one draft to choose from")
    best = min(draft_tier(d, kind) for d in drafts)
    pool = list(drafts) if best == 3 else [d for d in drafts if draft_tier(d, kind) == best]
    return rng.choice(pool), best


def derangement(n: int, seed: int = 0) -> list[int]:
    """A permutation ``perm`` of range(n) with ``perm[i] != i`` for every i: row i gets the draft of
    row ``perm[i]``. Seeded shuffle (Python's ``random.Random(seed)``), then each fixed point i,
    in order, is swapped with position (i + 1) mod n (spec 9 (b) 3: "repair fixed points by swaps").

    The swap never makes a new fixed point: with perm[i] = i, perm[j] != i, so after the swap
    perm[i] = old perm[j] != i and perm[j] = i != j."""
    if n == 1:
        raise ValueError("a derangement needs at least 2 problems (one problem can only get its own draft)")
    perm = list(range(n))
    random.Random(seed).shuffle(perm)
    for i in range(n):
        if perm[i] == i:
            j = (i + 1) % n
            perm[i], perm[j] = perm[j], perm[i]
    return perm


def draft_prompt(problem: str, draft: str | None = None, template: str = TEMPLATE) -> str:
    """The prompt with ``draft`` in its slot; no draft (None or empty) is the literal ``N/A``."""
    return template.format(problem=problem, draft=draft if draft else NO_DRAFT)


def template_problem(template: str) -> str | None:
    """What is wrong with a user's template (None: it has exactly the fields {problem} and {draft})."""
    try:
        fields = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    except ValueError as err:
        return f"is not a format string ({err})"
    missing, extra = sorted({"problem", "draft"} - fields), sorted(fields - {"problem", "draft"})
    if missing:
        return f"needs the field(s) {missing}"
    return f"has field(s) {extra} beyond {{problem}} and {{draft}}" if extra else None


def fit_draft(
    problem: str,
    draft: str,
    max_tokens: int | None,
    encode: Callable[[str], Sequence[int]] = list,
    decode: Callable[[Sequence[int]], str] = "".join,
    template: str = TEMPLATE,
) -> str:
    """``draft`` cut (from its end) so that the whole prompt is at most ``max_tokens`` tokens; the
    problem and the rest of the template are never cut (spec 9 (b) 5). ``encode`` / ``decode`` are a
    tokenizer's (default: characters). A problem that alone exceeds the cap leaves an empty draft
    (rendered ``N/A``). ``max_tokens`` None: no cap."""
    if max_tokens is None or len(encode(draft_prompt(problem, draft, template))) <= max_tokens:
        return draft
    ids = list(encode(draft))
    room = max_tokens - (len(encode(draft_prompt(problem, "", template))) - len(encode(NO_DRAFT)))
    keep = max(0, min(len(ids), room))
    # tokens need not add up across the slot's boundaries: shrink until the whole prompt fits
    while keep > 0 and len(encode(draft_prompt(problem, decode(ids[:keep]), template))) > max_tokens:
        keep -= 1
    return decode(ids[:keep]) if keep > 0 else ""


@dataclass(frozen=True)
class DraftRow:
    """One problem of the draft dataset: its prompt, and where its draft came from (None: no draft)."""

    index: int  # the problem's row
    prompt: str
    source: int | None  # the row whose draft it shows (== index in matched mode)
    tier: int | None  # the tier of the chosen draft (None: no draft)
    draft: Draft | None


def build_draft_dataset(
    problems: Sequence[str],
    drafts: Sequence[Sequence[Draft]],
    mode: str,
    *,
    seed: int = 0,
    max_tokens: int | None = MAX_PROMPT_TOKENS,
    encode: Callable[[str], Sequence[int]] = list,
    decode: Callable[[Sequence[int]], str] = "".join,
    template: str = TEMPLATE,
    keys: Sequence[str] | None = None,
) -> list[DraftRow]:
    """Spec 9 (c): one :class:`DraftRow` per problem. ``drafts[i]`` are problem i's drafts.

    ``no_draft``: ``N/A``; ``matched_wrong``: problem i's own wrong-type draft; ``mismatched_wrong``
    and ``mismatched_correct``: the wrong- / correct-type draft of problem ``perm[i]`` of
    :func:`derangement` (``seed``). The choice within a tier is seeded by ``seed`` and the source
    problem's key (``keys[i]``, default its index), so it does not depend on the problem order."""
    if mode not in MODES:
        raise ValueError(f"unknown draft mode {mode!r}; valid: {list(MODES)}")
    if len(drafts) != len(problems):
        raise ValueError(f"{len(problems)} problems but {len(drafts)} draft lists")
    keys = list(keys) if keys is not None else [str(i) for i in range(len(problems))]
    if mode == "no_draft":
        return [DraftRow(i, draft_prompt(p, None, template), None, None, None) for i, p in enumerate(problems)]
    kind = "correct" if mode == "mismatched_correct" else "wrong"
    sources = list(range(len(problems))) if mode == "matched_wrong" else derangement(len(problems), seed)
    rows = []
    for i, (problem, j) in enumerate(zip(problems, sources)):
        draft, tier = choose_draft(drafts[j], kind, random.Random(stable_seed(seed, "draft", kind, keys[j])))
        text = fit_draft(problem, draft.text, max_tokens, encode, decode, template)
        rows.append(DraftRow(i, draft_prompt(problem, text, template), j, tier, draft))
    return rows


__all__ = [
    "MAX_PROMPT_TOKENS",
    "MODES",
    "NO_DRAFT",
    "TEMPLATE",
    "Draft",
    "DraftRow",
    "build_draft_dataset",
    "choose_draft",
    "derangement",
    "draft_prompt",
    "draft_tier",
    "fit_draft",
    "template_problem",
]
