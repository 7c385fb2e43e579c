"""Paired significance tests of two models on the same evaluation items (Physics-R1 reporting).

Two models A and B are scored on the *same* items; ``x[i]`` / ``y[i]`` say whether A / B got item
``i`` right. Only the discordant items carry evidence about which is better:

* ``b`` = items A got right and B got wrong, ``c`` = items B got right and A got wrong
  (:func:`discordant`);
* :func:`sign_test` -- under H0 (equal accuracy) ``b ~ Binomial(b + c, 1/2)``; exact tail;
* :func:`mcnemar_exact` -- McNemar's test in its exact form: the two-sided sign test on ``(b, c)``,
  ``min(1, 2 * smaller tail)`` (no chi-square approximation: the paper's 0.0213 is the exact
  value, the continuity-corrected chi-square would give 0.024);
* :func:`paired_bootstrap_ci` -- percentile CI of ``mean(x) - mean(y)`` from resampling items
  (pairs kept together) with replacement.

Reproduces the Physics-R1 paper's numbers (spec envs-selfplay-eval.md section 7): 59 items,
b = 13, c = 3 -> one-sided sign p = 697/65536 = 0.0106, exact McNemar 1394/65536 = 0.0213,
bootstrap (B = 10,000, seed 0) [0.0508, 0.2881] as a fraction, i.e. [5.08, 28.81] points.

Pure functions; numpy only (no torch, no model). Seed reporting (mean ± sample std, ddof=1) stays
:func:`reasonrl.eval.metrics.mean_std` (not imported here: the two are siblings of one layer).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, NamedTuple, Sequence

import numpy as np

from ..errors import UserError

__all__ = [
    "discordant",
    "sign_test",
    "mcnemar_exact",
    "paired_bootstrap_ci",
    "paired_bootstrap_values_ci",
    "BootstrapCI",
    "paired_tests",
    "paired_by_key",
    "pair_by_key",
    "load_item_results",
]

ALTERNATIVES = ("greater", "less", "two-sided")


def _as_flags(values: Sequence[Any], name: str) -> np.ndarray:
    """0/1 (or bool) correctness flags as a bool array; anything else is rejected by position."""
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a flat sequence of per-item 0/1 flags, got shape {arr.shape}")
    values = arr.tolist()
    bad = [i for i, v in enumerate(values) if v not in (0, 1)]  # True == 1, False == 0
    if bad:
        raise ValueError(f"{name} must hold 0/1 correctness flags; item {bad[0]} is {values[bad[0]]!r}")
    return arr.astype(bool)


def _paired_flags(x: Sequence[Any], y: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
    xa, ya = _as_flags(x, "x"), _as_flags(y, "y")
    if xa.shape != ya.shape:
        raise ValueError(f"paired tests need the same items for both models: {xa.size} flags in x, {ya.size} in y")
    if xa.size == 0:
        raise ValueError("paired tests need at least one item, got none")
    return xa, ya


def discordant(x: Sequence[Any], y: Sequence[Any]) -> tuple[int, int]:
    """``(b, c)``: items only ``x`` got right, items only ``y`` got right."""
    xa, ya = _paired_flags(x, y)
    return int(np.sum(xa & ~ya)), int(np.sum(~xa & ya))


def _upper_tail(k: int, n: int) -> float:
    """P(X >= k) for X ~ Binomial(n, 1/2), exact: sum_{i>=k} C(n, i) / 2^n in integers, one rounding."""
    if k <= 0:
        return 1.0
    term, total = 1, 0  # term = C(n, i), walked down from i = n
    for i in range(n, k - 1, -1):
        total += term
        term = term * i // (n - i + 1)  # C(n, i-1) = C(n, i) * i / (n - i + 1)
    return total / (1 << n)  # int / int: correctly rounded even for huge n


def sign_test(b: int, c: int, alternative: str = "greater") -> float:
    """Exact sign test on the discordant counts: ``b`` successes in ``n = b + c`` fair-coin trials.

    ``"greater"``: P(X >= b), evidence that the ``b`` side (x) is better; ``"less"``: P(X <= b);
    ``"two-sided"``: ``min(1, 2 * min(P(X >= b), P(X <= b)))`` (the binomial is symmetric at 1/2,
    so this equals scipy.stats.binomtest's sum of the outcomes no likelier than b). With no
    discordant pairs (b = c = 0) there is no evidence either way and the p-value is 1.0.

    Raises:
        ValueError: on a negative count or an unknown ``alternative``.
    """
    if b < 0 or c < 0 or int(b) != b or int(c) != c:
        raise ValueError(f"sign_test needs non-negative integer counts, got b={b!r}, c={c!r}")
    if alternative not in ALTERNATIVES:
        raise ValueError(f"sign_test: alternative={alternative!r}; use one of {', '.join(ALTERNATIVES)}")
    b, n = int(b), int(b) + int(c)
    if n == 0:
        return 1.0
    greater = _upper_tail(b, n)
    less = _upper_tail(n - b, n)  # P(X <= b) = P(n - X >= n - b), and n - X has the same law
    if alternative == "greater":
        return greater
    if alternative == "less":
        return less
    return min(1.0, 2.0 * min(greater, less))


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value: ``min(1, 2 * P(X <= min(b, c)))``, X ~ Binomial(b + c, 1/2)."""
    return sign_test(b, c, "two-sided")


class BootstrapCI(NamedTuple):
    diff: float  # mean(x) - mean(y) on the items as given, in the units of the inputs
    low: float
    high: float


def paired_bootstrap_ci(
    x: Sequence[Any], y: Sequence[Any], B: int = 10_000, seed: int = 0, level: float = 0.95
) -> BootstrapCI:
    """Percentile bootstrap CI of ``mean(x) - mean(y)`` over per-item 0/1 correctness.

    Each of ``B`` resamples draws ``n`` item indices with replacement from
    ``numpy.random.default_rng(seed).integers(0, n, (B, n))`` (drawn in row blocks to bound memory;
    the stream, and so the result, is the same as one draw) and keeps x[i] and y[i] together; the
    bounds are ``numpy.percentile`` (linear interpolation) at (1 - level)/2 and (1 + level)/2.
    Returned in the units of the inputs (fractions of items): multiply by 100 for points.

    Raises:
        ValueError: on unpaired or non-0/1 inputs, ``B < 1`` or ``level`` outside (0, 1).
    """
    xa, ya = _paired_flags(x, y)
    return _bootstrap(xa.astype(np.float64) - ya.astype(np.float64), B, seed, level)  # (n,) differences in {-1, 0, 1}


def paired_bootstrap_values_ci(
    x: Sequence[float], y: Sequence[float], B: int = 10_000, seed: int = 0, level: float = 0.95
) -> BootstrapCI:
    """:func:`paired_bootstrap_ci` of ``mean(x) - mean(y)`` over per-item values in [0, 1] (a problem's
    pass@k estimated from its n samples), resampled the same way (same seed, same indices)."""
    xa, ya = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if xa.ndim != 1 or xa.shape != ya.shape or not xa.size:
        raise ValueError(f"paired values need two flat sequences of the same items, got shapes {xa.shape}, {ya.shape}")
    if not (np.all((xa >= 0) & (xa <= 1)) and np.all((ya >= 0) & (ya <= 1))):
        raise ValueError("paired values must lie in [0, 1] (per-item pass@k or accuracy)")
    return _bootstrap(xa - ya, B, seed, level)


def _bootstrap(d: np.ndarray, B: int, seed: int, level: float) -> BootstrapCI:
    """The percentile bootstrap CI of the mean of per-item differences ``d`` (n,)."""
    if B < 1:
        raise ValueError(f"paired_bootstrap_ci needs B >= 1 resamples, got {B}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"paired_bootstrap_ci needs 0 < level < 1, got {level}")
    n, rng = d.size, np.random.default_rng(seed)
    rows = max(1, (1 << 22) // n)  # about 32 MiB of int64 indices per block
    means = np.empty(B, dtype=np.float64)  # (B,) resampled differences of accuracy
    for start in range(0, B, rows):
        m = min(rows, B - start)
        idx = rng.integers(0, n, (m, n))  # (m, n) item indices
        means[start : start + m] = d[idx].mean(axis=1)
    alpha = (1.0 - level) / 2.0
    low, high = np.percentile(means, [100.0 * alpha, 100.0 * (1.0 - alpha)])
    return BootstrapCI(float(d.mean()), float(low), float(high))


def paired_tests(x: Sequence[Any], y: Sequence[Any], B: int = 10_000, seed: int = 0) -> dict[str, Any]:
    """Everything the reports show for x against y: accuracies, b, c, both sign-test p-values,
    McNemar, and the bootstrap 95% CI of the difference (fractions, as :func:`paired_bootstrap_ci`)."""
    xa, ya = _paired_flags(x, y)
    b, c = discordant(xa, ya)
    ci = paired_bootstrap_ci(xa, ya, B=B, seed=seed)
    return {
        "n_items": int(xa.size),
        "acc_x": float(xa.mean()),
        "acc_y": float(ya.mean()),
        "b": b,
        "c": c,
        "sign_p_greater": sign_test(b, c, "greater"),
        "mcnemar_p": mcnemar_exact(b, c),
        "diff": ci.diff,
        "ci_low": ci.low,
        "ci_high": ci.high,
        "bootstrap_B": B,
        "bootstrap_seed": seed,
    }


def paired_by_key(
    mine: Mapping[str, bool], other: Mapping[str, bool], B: int = 10_000, seed: int = 0
) -> dict[str, Any]:
    """:func:`paired_tests` of two ``{problem key: correct}`` maps over the same keys (x = ``mine``).

    Raises:
        UserError: if the key sets differ, naming (up to 5 of) the keys each side lacks.
    """
    x, y = pair_by_key(mine, other)
    return paired_tests(x, y, B=B, seed=seed)


def pair_by_key(mine: Mapping[str, bool], other: Mapping[str, bool]) -> tuple[list[bool], list[bool]]:
    """The two maps' flags as aligned lists (keys sorted), after checking that the keys are the same.

    Raises:
        UserError: if the key sets differ, naming (up to 5 of) the keys each side lacks.
    """
    only_mine, only_other = sorted(set(mine) - set(other)), sorted(set(other) - set(mine))
    if only_mine or only_other:
        raise UserError(
            f"paired tests need the same problems on both sides: {len(only_other)} missing from this "
            f"evaluation {only_other[:5]}, {len(only_mine)} missing from the other {only_mine[:5]}; "
            "evaluate both with the same task, number of problems and eval seed"
        )
    keys = sorted(mine)
    return [bool(mine[k]) for k in keys], [bool(other[k]) for k in keys]


def load_item_results(path: str | Path) -> dict[str, bool]:
    """``{problem key: correct}`` of the greedy records in a JSONL file (``reasonrl eval --samples``
    or a run folder's ``after_items.jsonl``); records of another ``mode`` (sampled) are skipped.

    Raises:
        UserError: on a missing file, a line that is not JSON, a greedy record without ``key`` / ``correct``, a key seen
            twice, or no greedy record at all.
    """
    path = Path(path)
    if not path.is_file():
        raise UserError(f"no per-item results file at {path}; write one with `reasonrl eval --samples FILE`")
    out: dict[str, bool] = {}
    for line_no, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as err:
            raise UserError(
                f"{path}:{line_no}: not a JSON record ({err.msg}); give a file `reasonrl eval --samples` wrote"
            ) from err
        if rec.get("mode", "greedy") != "greedy":
            continue
        if "key" not in rec or "correct" not in rec:
            raise UserError(
                f"{path}:{line_no}: a record without 'key' and 'correct'; re-run `reasonrl eval "
                "--samples` with this version (records now carry the problem key)"
            )
        if rec["key"] in out:
            raise UserError(f"{path}:{line_no}: problem key {rec['key']!r} appears twice among the greedy records")
        out[rec["key"]] = bool(rec["correct"])
    if not out:
        raise UserError(f"{path} holds no greedy per-item records")
    return out
