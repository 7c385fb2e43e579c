"""The pieces of Physics-R1's answer judging that the binary reward (:mod:`.physics`) and the dense one
(:mod:`.physics_dense`) share: splitting multipart answers, reading the gold and the prediction,
matching one part, and the per-row verdict. Boxed answers are read by the one extractor,
:func:`reasonrl.rewards.answers.all_boxed` (``loose``: ``\\boxed {..}`` and ``\\fbox{..}`` too)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..errors import UserError
from .answers import all_boxed, extract_boxed
from .latex import latex_to_text, numbers_close, parse_quantity

__all__ = ["ANSWER_IS", "Judged", "gold_parts", "mcq_letter", "parts_match", "predicted_parts", "split_parts"]

_LETTER = re.compile(r"^\s*(?:\\text\{\s*)?\(?\s*([A-E])\s*\)?\s*\}?\s*[.)]?(?:\s|$)")
_MCQ_GOLD = re.compile(r"^\s*\(?([A-E])\)?\.?\s*$")
ANSWER_IS = re.compile(r"answer\s*(?:is|:)\s*:?\s*\(?\s*([A-E])\b", re.IGNORECASE)
_PAREN_LABEL = re.compile(r"\(([a-h])\)")
_DOT_LABEL = re.compile(r"(?:^|(?<=\s))([a-h])\.\s")


def mcq_letter(answer: str) -> str | None:
    """The choice letter an answer starts with (``(B)``, ``B``, ``B.``, ``\\text{B}``), or ``None``."""
    m = _LETTER.match(answer)
    return m.group(1) if m else None


def _top_level_split(text: str, sep: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += (ch in "{([") - (ch in "})]")
        if ch == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    return parts + [text[start:]]


def split_parts(answer: str) -> list[str]:
    """The parts of a (possibly multipart) answer: ``(a) 3 (b) 4``, ``a. 3 b. 4`` or ``3; 4`` -> ``['3', '4']``."""
    for label in (_PAREN_LABEL, _DOT_LABEL):
        found = list(label.finditer(answer))
        if len(found) >= 2 and [m.group(1) for m in found] == [chr(ord("a") + i) for i in range(len(found))]:
            ends = [m.start() for m in found[1:]] + [len(answer)]
            return [answer[m.end() : end].strip(" ,;").strip() for m, end in zip(found, ends)]
    return [p.strip() for p in _top_level_split(answer, ";")]


def _plain(text: str) -> str:
    return re.sub(r"\s+", "", latex_to_text(text)).lower()


def parts_match(pred: str, gold: str, rtol: float = 1e-2, atol: float = 1e-6, symbolic: bool = False) -> bool:
    """One part: numbers within tolerance, else equal plain texts, else (``symbolic``) math-verify."""
    g, p = parse_quantity(gold), parse_quantity(pred)
    if g is not None:
        return p is not None and numbers_close(p, g, rtol, atol)
    if _plain(pred) == _plain(gold):
        return True
    if symbolic:
        from math_verify import parse, verify  # optional: imported only when asked for

        gold_p, pred_p = parse(f"${gold}$"), parse(f"${pred}$")
        return bool(gold_p and pred_p and verify(gold_p, pred_p))
    return False


def gold_parts(gold: Any, where: str = "a row") -> tuple[str | None, list[str]]:
    """(MCQ letter or None, parts) of a gold answer; a malformed gold raises naming ``where`` (the row)."""
    text = str(gold).strip()
    if "\\boxed" in text or "\\fbox" in text:
        inner = extract_boxed(text, loose=True)
        if inner is None:
            raise UserError(f"physics_match: gold answer of {where} has an unbalanced \\boxed{{: {text[:120]!r}")
        text = inner
    if text.count("{") != text.count("}"):
        raise UserError(f"physics_match: gold answer of {where} has unbalanced braces: {text[:120]!r}")
    m = _MCQ_GOLD.match(text)
    if m:
        return m.group(1), [m.group(1)]
    parts = split_parts(text)
    if not text or any(not p for p in parts):
        raise UserError(f"physics_match: gold answer of {where} is empty or has an empty part: {str(gold)[:120]!r}")
    return None, parts


def predicted_parts(completion: str, n_gold: int) -> list[str] | None:
    """The prediction's parts (rule 3), or ``None`` when the completion has no box."""
    boxes = all_boxed(completion, loose=True)
    if not boxes:
        return None
    parts = split_parts(boxes[-1])
    if n_gold > 1 and len(parts) == 1 and len(boxes) >= n_gold:
        parts = boxes[-n_gold:]
    return parts


@dataclass
class Judged:
    """One row's verdict: score, whether an answer was read, and the per-part results."""

    score: float
    parsed: bool
    mcq: bool
    part_hits: list[bool]
    n_pred: int
