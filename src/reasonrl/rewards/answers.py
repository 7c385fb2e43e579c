"""Answer normalisation and extraction shared by the matching rewards.

* :func:`normalize_number` -- canonical decimal string of a plain number (``"007"`` -> ``"7"``,
  ``"1,234.50"`` -> ``"1234.5"``), or ``None`` when the text is not a number.
* :func:`normalize_text` -- whitespace-insensitive (optionally case-insensitive) text.
* :func:`parse_number` -- a float from a number, a simple fraction, ``\\frac{a}{b}`` and numbers
  wrapped in ``\\boxed{}`` or ``$...$``.
* Extractors pull a final answer out of a completion: :func:`extract_boxed`,
  :func:`extract_tag`, :func:`extract_last_number`, :func:`extract_final_number` (tag, box,
  answer statement or last number: what a small instruct model really writes);
  :func:`resolve_extractor` maps the names in :data:`EXTRACTORS` (usable from config files) to them.

Conventions: a comma is only ever a thousands separator (``"1,5"`` is not a number), and
exponents (``"1e3"``) are accepted but limited to ``|exponent| <= 1000`` so that a hostile
completion cannot make us build a gigantic digit string.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation
from typing import Callable

__all__ = [
    "normalize_number",
    "normalize_text",
    "parse_number",
    "extract_boxed",
    "extract_tag",
    "extract_last_number",
    "extract_final_number",
    "stated_answer",
    "EXTRACTORS",
    "resolve_extractor",
]

Extractor = Callable[[str], "str | None"]

# Digits with an optional point and exponent; validated before Decimal sees the text because
# Decimal also accepts "NaN", "Infinity" and "1_000", none of which is an answer we want to match.
_PLAIN_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
# Thousands groups must be exactly three digits so "1,23" or "12,3456" are not silently accepted.
_GROUPED_INT = re.compile(r"[+-]?\d{1,3}(?:,\d{3})+(?:\.\d*)?(?:[eE][+-]?\d+)?")
_MAX_EXPONENT = 1000
_FRAC = re.compile(r"([+-]?)\\[dt]?frac\{([^{}]*)\}\{([^{}]*)\}")
_SLASH = re.compile(r"([^/]+)/([^/]+)")
# The last number-like token of a text: grouped thousands first so "1,234" is not cut to "234".
_LAST_NUMBER = re.compile(r"[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|[+-]?\.\d+")
_MINUS_SIGNS = str.maketrans({"\u2212": "-", "\u2013": "-"})


def normalize_number(s: object) -> str | None:
    """Canonical decimal string of a plain number, or ``None`` if ``s`` is not one.

    Strips surrounding whitespace, a leading ``+``, thousands separators, leading zeros and
    trailing fractional zeros; ``-0`` becomes ``0``. Fractions and LaTeX are *not* numbers here
    (see :func:`parse_number`), so two equal canonical strings mean the same written number.
    """
    if s is None:
        return None
    text = str(s).strip().translate(_MINUS_SIGNS)
    if _GROUPED_INT.fullmatch(text):
        text = text.replace(",", "")
    elif not _PLAIN_NUMBER.fullmatch(text):
        return None
    try:
        value = Decimal(text)
    except InvalidOperation:
        return None
    if not value.is_finite() or abs(value.adjusted()) > _MAX_EXPONENT:
        return None
    digits = format(value, "f")
    if "." in digits:
        # Trailing fractional zeros carry no value ("2.50" == "2.5", "3.0" == "3").
        digits = digits.rstrip("0").rstrip(".")
    if digits in ("-0", ""):
        digits = "0"
    return digits


def normalize_text(s: object, lowercase: bool = False) -> str:
    """``s`` stripped, with every run of internal whitespace collapsed to one space."""
    text = " ".join(str(s).split())
    return text.lower() if lowercase else text


def matching_brace(text: str, open_at: int) -> int | None:
    """Index of the ``}`` that closes the ``{`` at ``open_at``, or ``None`` if unbalanced."""
    depth = 0
    for i in range(open_at, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return i
    return None


def _unwrap(text: str) -> str:
    """Peel math delimiters and a whole-string ``\\boxed{...}``, repeatedly (``$\\boxed{2}$``)."""
    pairs = (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))
    while True:
        text = text.strip()
        for left, right in pairs:
            if len(text) >= len(left) + len(right) and text.startswith(left) and text.endswith(right):
                text = text[len(left) : len(text) - len(right)]
                break
        else:
            if text.startswith("\\boxed{") and matching_brace(text, 6) == len(text) - 1:
                text = text[7:-1]
                continue
            return text


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def parse_number(s: object) -> float | None:
    """A float from ``s``, or ``None`` when it is not a (simple) number.

    Accepts what :func:`normalize_number` accepts, simple fractions ``"3/4"``, ``"-3/4"``,
    ``\\frac{3}{4}`` / ``\\dfrac`` / ``\\tfrac`` (optionally signed), all possibly wrapped in
    ``$...$``, ``\\(...\\)``, ``\\[...\\]`` or ``\\boxed{...}``. A zero denominator gives ``None``.
    """
    if s is None:
        return None
    text = _unwrap(str(s).translate(_MINUS_SIGNS))
    plain = normalize_number(text)
    if plain is not None:
        return _finite(float(plain))
    frac = _FRAC.fullmatch(text)
    if frac:
        sign, num, den = frac.groups()
        num_s, den_s = normalize_number(num), normalize_number(den)
        sign_f = -1.0 if sign == "-" else 1.0
    else:
        slash = _SLASH.fullmatch(text)
        if not slash:
            return None
        num_s, den_s = normalize_number(slash.group(1)), normalize_number(slash.group(2))
        sign_f = 1.0
    if num_s is None or den_s is None or float(den_s) == 0.0:
        return None
    return _finite(sign_f * float(num_s) / float(den_s))


_BOX_STRICT = re.compile(r"\\boxed\{")
_BOX_LOOSE = re.compile(r"\\boxed\s*\{|\\fbox\s*\{")  # also \boxed {x} and \fbox{x} (physics answers)


def all_boxed(text: str, *, loose: bool = False) -> list[str]:
    """Contents of every balanced ``\\boxed{...}`` in ``text``, stripped, in order (an unbalanced one,
    a truncated generation, is skipped). ``loose``: also ``\\boxed {..}`` and ``\\fbox{..}``."""
    out = []
    for m in (_BOX_LOOSE if loose else _BOX_STRICT).finditer(text):
        close = matching_brace(text, m.end() - 1)
        if close is not None:
            out.append(text[m.end() : close].strip())
    return out


def extract_boxed(text: str, *, loose: bool = False) -> str | None:
    """Content of the last balanced ``\\boxed{...}`` in ``text``, stripped; ``None`` if none (an
    unbalanced last box, a truncated generation, falls back to an earlier complete one)."""
    boxes = all_boxed(text, loose=loose)
    return boxes[-1] if boxes else None


def extract_tag(tag: str = "answer") -> Extractor:
    """An extractor returning the stripped content of the last ``<tag>...</tag>``."""
    pattern = re.compile(rf"<{re.escape(tag)}>(.*?)</{re.escape(tag)}>", re.DOTALL)

    def extract(text: str) -> str | None:
        found = pattern.findall(text)
        return found[-1].strip() if found else None

    extract.__name__ = f"extract_{tag}_tag"
    return extract


def extract_last_number(text: str) -> str | None:
    """The last number-like token in ``text`` (GSM8K style ``"... #### 42"``), or ``None``."""
    found = _LAST_NUMBER.findall(text.translate(_MINUS_SIGNS))
    return found[-1] if found else None


def extract_a_colon(text: str) -> str | None:
    """The token after the last ``A:`` (the built-in arithmetic task's answer line)."""
    found = re.findall(r"A:\s*(\S+)", text)
    return found[-1] if found else None


def extract_answer_line(text: str) -> str | None:
    """The rest of the last line that starts ``Answer:`` (DAPO-Math's "Answer: $Answer"), stripped."""
    found = re.findall(r"(?m)^\s*Answer:\s*(.+?)\s*$", text)
    return found[-1] if found else None


def extract_whole(text: str) -> str | None:
    """The whole completion, stripped (``None`` if empty)."""
    return text.strip() or None


# "The answer is 12.", "The final answer is: 12", "Answer: 12", "#### 12": a statement of the answer;
# the statement runs to the end of its line or sentence (a period not between digits)
_STATEMENT = re.compile(r"(?i)\banswer\b\s*(?:is\b\s*:?|[:=])|####")
_STATEMENT_END = re.compile(r"\n|\.(?!\d)")


def _last_number_of(text: str) -> str | None:
    found = extract_last_number(text)
    return normalize_number(found) if found is not None else None


def stated_answer(text: str) -> str | None:
    """The number of the FIRST answer statement (``The answer is 7 * 7 = 49.`` -> ``49``: the last
    number of its sentence), or None. The first, because a small model that has stated its answer
    rambles on and often states other numbers after it (issue 42's greedy outputs)."""
    for m in _STATEMENT.finditer(text):
        rest = text[m.end() :]
        end = _STATEMENT_END.search(rest)
        number = _last_number_of(rest[: end.start()] if end else rest)
        if number is not None:
            return number
    return None


def extract_final_number(text: str) -> str | None:
    """The final numeric answer of a free-form completion, normalised (:func:`normalize_number`), in
    this order: the last ``<answer>...</answer>`` (its last number; a tag without a number is None),
    the last ``\\boxed{}``, the first answer statement (:func:`stated_answer`), the last number of
    the text. Written for what a small instruct model writes when asked for the tag (issue 42): it
    mostly ignores the tag and writes ``The answer is 12.``, ``#### 12`` or a sentence ending in the
    number, and often runs on past it."""
    tagged = extract_tag("answer")(text)
    if tagged is not None:
        return _last_number_of(tagged)
    boxed = extract_boxed(text)
    if boxed is not None and _last_number_of(boxed) is not None:
        return _last_number_of(boxed)
    return stated_answer(text) or _last_number_of(text)


EXTRACTORS: dict[str, Extractor] = {
    "boxed": extract_boxed,
    "answer_tag": extract_tag("answer"),
    "last_number": extract_last_number,
    "a_colon": extract_a_colon,
    "final_number": extract_final_number,
    "answer_line": extract_answer_line,
    "none": extract_whole,
}


def resolve_extractor(extract: Extractor | str | None) -> Extractor | None:
    """A callable (returned as is), ``None``, or the name of one of :data:`EXTRACTORS`."""
    if extract is None or callable(extract):
        return extract
    if isinstance(extract, str) and extract in EXTRACTORS:
        return EXTRACTORS[extract]
    raise ValueError(f"unknown extractor {extract!r}; valid names: {sorted(EXTRACTORS)} or a callable")
