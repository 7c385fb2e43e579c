"""Physics-R1's optional dense reward (spec section 7(b); the authors' ``DENSE_REWARD=1``):

    r = w_ans * r_ans + w_fmt * r_fmt + w_dim * r_dim + w_sym * r_sym + w_cons * r_cons,  clipped to [-1, 1]

with the spec's weights w_ans 1.0, w_fmt 0.10, w_dim 0.15, w_sym 0.20, w_cons -0.25. The spec gives
the weights and that r_fmt is "there is a ``\\boxed{}``"; what the other terms measure is [inferred]
here, each a 0/1 indicator so that a weight is the most a term can move the reward:

* ``r_ans``: the binary AND verdict of :class:`~reasonrl.rewards.physics.PhysicsMatch`
  (``answer="and"``, default); ``answer="fraction"`` gives partial credit, the share of the gold's
  parts matched in order.
* ``r_fmt``: the completion has a balanced ``\\boxed{...}``.
* ``r_dim`` (dimensions): the gold states a unit in some part, and every predicted part states the
  same unit as its gold part (spaces ignored, ``**`` read as ``^``). A unitless gold has nothing to
  check: 0.
* ``r_sym`` (symbolic form): with as many parts as the gold, every predicted part has the gold
  part's form: a number where the gold is a number, otherwise the same set of symbols
  (``x^2+1`` and ``2x`` share ``{x}``).
* ``r_cons`` (inconsistency, penalised): the number of parts read differs from the gold's, or the
  completion boxes more than one different answer (when the last box holds the whole answer).

A completion without a box scores only its penalty terms (r_ans, r_fmt, r_dim, r_sym are 0 and
``r_cons`` is 0: nothing was stated to contradict).
"""

from __future__ import annotations

import re
from typing import Sequence

from .latex import latex_to_text, parse_quantity, split_unit
from .answers import all_boxed
from .physics_parts import Judged, gold_parts, predicted_parts, split_parts

__all__ = ["DENSE_WEIGHTS", "ANSWER_MODES", "dense_terms", "dense_value", "unit_of", "symbols_of", "dense_metrics"]

DENSE_WEIGHTS = {"ans": 1.0, "fmt": 0.10, "dim": 0.15, "sym": 0.20, "cons": -0.25}  # spec 7(b)
ANSWER_MODES = ("and", "fraction")
_SYMBOL = re.compile(r"(?<![A-Za-z])([A-Za-z])(?![A-Za-z])|\\([A-Za-z]+)")
_NOT_SYMBOLS = {"pi", "frac", "dfrac", "tfrac", "sqrt", "cdot", "times", "left", "right", "text", "mathrm"}


def unit_of(part: str) -> str:
    """The unit written after a part's number (``3\\,\\text{m/s}`` -> ``m/s``), ``''`` if none or not a number."""
    expr, unit = split_unit(latex_to_text(part).replace("^", "**"))
    return re.sub(r"\s+", "", unit).replace("**", "^") if expr else ""


def symbols_of(part: str) -> frozenset[str]:
    """Single-letter variables and Greek-letter commands of an expression (``\\omega t + x`` -> {omega, t, x})."""
    found = {a or b for a, b in _SYMBOL.findall(part)}
    return frozenset(found - _NOT_SYMBOLS)


def _same_form(pred: str, gold: str) -> bool:
    if parse_quantity(gold) is not None:
        return parse_quantity(pred) is not None
    return symbols_of(pred) == symbols_of(gold)  # "2x" reads as 2 with unit x: compare the symbols alone


def dense_terms(completion: str, gold: object, judged: Judged, answer: str = "and") -> dict[str, float]:
    """The five indicators of one row (module docstring); ``judged`` is PhysicsMatch's verdict of it."""
    if answer not in ANSWER_MODES:
        raise ValueError(f"physics_match: dense_answer must be one of {ANSWER_MODES}, got {answer!r}")
    boxes = all_boxed(completion, loose=True)
    if not judged.parsed:
        return {"ans": 0.0, "fmt": float(bool(boxes)), "dim": 0.0, "sym": 0.0, "cons": 0.0}
    ans = judged.score if answer == "and" else sum(judged.part_hits) / len(judged.part_hits)
    letter, gparts = gold_parts(gold)
    if letter is not None:  # MCQ: a letter has no unit or symbols; form = a letter was read
        return {"ans": ans, "fmt": float(bool(boxes)), "dim": 0.0, "sym": 1.0, "cons": 0.0}
    pparts = predicted_parts(completion, len(gparts)) or []
    same_count = len(pparts) == len(gparts)
    gold_units = [unit_of(g) for g in gparts]
    dim = same_count and any(gold_units) and all(unit_of(p) == u for p, u in zip(pparts, gold_units))
    sym = same_count and all(_same_form(p, g) for p, g in zip(pparts, gparts))
    whole_in_last = len(split_parts(boxes[-1])) == len(pparts)
    disagree = whole_in_last and len({re.sub(r"\s+", "", b) for b in boxes}) > 1
    return {"ans": ans, "fmt": 1.0, "dim": float(dim), "sym": float(sym), "cons": float(not same_count or disagree)}


def dense_value(terms: dict[str, float], weights: dict[str, float] = DENSE_WEIGHTS) -> float:
    """``sum_k w_k * term_k`` clipped to [-1, 1] (spec 7(b))."""
    return max(-1.0, min(1.0, sum(weights[k] * terms[k] for k in DENSE_WEIGHTS)))


def dense_metrics(name: str, terms: Sequence[dict[str, float]]) -> dict[str, float]:
    """Mean of each indicator over the applicable rows: ``reward/<name>/dense_<term>``."""
    n = max(len(terms), 1)
    return {f"reward/{name}/dense_{k}": sum(t[k] for t in terms) / n for k in DENSE_WEIGHTS}
