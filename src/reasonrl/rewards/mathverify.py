"""Symbolic answer checking with the ``math_verify`` library (sympy-based equivalence).

:class:`MathVerify` scores 1.0 when ``math_verify.verify(gold, answer)`` holds, else 0.0, so
``\\boxed{\\frac{1}{2}}`` matches a gold ``0.5`` and ``\\boxed{x^2+1}`` matches ``$1+x^2$``.

Timeouts (the one thing to know about this library): ``math_verify`` bounds each ``parse`` and
each comparison with ``signal.alarm``, which only works in the main thread of the main
interpreter. Elsewhere it raises ``ValueError`` instead of scoring. It also passes the seconds
straight to ``signal.alarm``, which rejects floats -- an error the library swallows, silently
returning "unparsed"/"not equal" for every row. So this reward:

* rounds ``timeout_seconds`` up to a whole number of seconds;
* uses the signal timeout when called from the main thread, and passes ``None`` (no timeout)
  from any other thread so that it scores instead of crashing; a pathological expression can then
  hang that thread, so callers who score off the main thread should bound it themselves (e.g. a
  process pool with a timeout). The metric ``reward/<name>/timeout_dropped`` is 1.0 in that case;
* ``timeout_seconds=None`` (or ``<= 0``) disables the timeout everywhere.

While it runs in the main thread it replaces any ``SIGALRM`` handler and alarm the caller had set
(``math_verify`` restores the handler, but cancels the pending alarm).

``math_verify`` and sympy are imported on first use, so importing :mod:`reasonrl.rewards` stays
cheap for users who never check math.
"""

from __future__ import annotations

import math
import threading
from functools import lru_cache
from typing import Any

from .match import ReferenceReward

__all__ = ["MathVerify"]

# Delimiters that tell math_verify's LaTeX extractor where the math is; a gold without any of
# them ("42", "x^2+1", "(1,2)") is wrapped in $...$ because plain-text parsing misses several.
_LATEX_MARKERS = ("$", "\\(", "\\[", "\\boxed")


@lru_cache(maxsize=1)
def _configs() -> tuple[list, list]:
    """(gold, answer) extraction configs; built lazily so math_verify loads only when used."""
    from math_verify import ExprExtractionConfig, LatexExtractionConfig

    gold = [LatexExtractionConfig(), ExprExtractionConfig()]
    # boxed_match_priority=0 makes a \boxed{...} win over "the answer is ..." anchors and over
    # bare expressions, since the prompt asks for the final answer in a box.
    answer = [LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()]
    return gold, answer


class MathVerify(ReferenceReward):
    """1.0 when the completion's answer is mathematically equivalent to the gold, else 0.0.

    The gold comes from ``column`` (``None`` -> row not applicable). A gold that ``math_verify``
    cannot parse at all raises ``ValueError``: it is a data error that would otherwise score
    every completion 0.0. A completion with nothing parseable scores 0.0 and is counted in
    ``reward/<name>/unparsed_frac``.
    """

    def __init__(self, column: str = "answer", name: str = "math_verify", timeout_seconds: float | None = 5):
        self.column, self.name = column, name
        # signal.alarm takes whole seconds only (see module docstring); round up, never down to 0.
        if timeout_seconds is None or timeout_seconds <= 0:
            self.timeout_seconds: int | None = None
        else:
            self.timeout_seconds = max(1, math.ceil(timeout_seconds))

    def timeout_here(self) -> int | None:
        """The timeout (whole seconds) that math_verify can honour in the calling thread (module docstring)."""
        if threading.current_thread() is threading.main_thread():
            return self.timeout_seconds
        return None

    def parse_gold(self, gold: Any, timeout: int | None) -> list:
        from math_verify import parse

        gold_cfg, _ = _configs()
        text = str(gold).strip()
        wrapped = text if any(m in text for m in _LATEX_MARKERS) else f"${text}$"
        parsed = parse(wrapped, extraction_config=gold_cfg, parsing_timeout=timeout)
        if not parsed and wrapped != text:
            parsed = parse(text, extraction_config=gold_cfg, parsing_timeout=timeout)
        if not parsed:
            raise ValueError(f"math_verify could not parse the gold answer {gold!r} in column {self.column!r}")
        return parsed

    def judge(self, completion: str, reference: Any) -> float | None:
        from math_verify import parse, verify

        _, answer_cfg = _configs()
        timeout = self.timeout_here()
        gold_parsed = self.parse_gold(reference, timeout)
        answer = parse(completion, extraction_config=answer_cfg, parsing_timeout=timeout)
        if not answer:
            return None
        return float(bool(verify(gold_parsed, answer, timeout_seconds=timeout)))

    def extra_metrics(self) -> dict[str, float]:
        return {
            f"reward/{self.name}/timeout_dropped": float(
                self.timeout_seconds is not None and self.timeout_here() is None
            )
        }
