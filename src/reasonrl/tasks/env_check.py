"""EvoEnv's staged validation of a written environment, stages L1-L3, and its novelty filter (spec
envs-selfplay-eval.md section 2 (b); the stage contents and thresholds are [inferred]: options here).

* **L1 static** (no execution): the module parses (``parse``); it is at most ``max_chars`` long (``size``);
  it uses no banned module or name (``banned``: AZR's list plus ``os``/``sys``/``socket``/``open``/``eval``/
  ``exec``/``__import__``, less ``random``, whose seeded ``R(seed)`` an environment is built on); it defines
  one ``Env`` subclass with ``sample`` and a ``reference`` or ``score`` (``interface``).
* **L2 execution** (sandbox): ``sample``/``prompt``/``reference`` on ``seeds`` x ``difficulties`` within the
  time and memory limits, JSON values (``run``); a second, separate sandbox process gives the same
  instances, prompts and references (``determinism``: catches ``random.random()`` and set order under
  hash randomisation); at least ``min_distinct`` of the instances differ (``diversity``).
* **L3 self-consistency and anti-hacking** (sandbox): every instance has a reference (a verify-only
  environment returns its planted solution) that ``score`` gives 1 (``consistency``); no degenerate answer
  scores above ``degenerate_max`` on average (``degenerate``): empty, ``0``, a copy of the prompt,
  another instance's reference; the answer is not read off the prompt (``leak``): no fixed token
  position of the prompt (first six, last) is the answer in ``leak_max`` of the instances, and the
  reference (3+ characters) is not inside the prompt that often.

Short answers make "about 0" on degenerate answers impossible (a count of 1-3 matches another instance's
count a third of the time): ``degenerate_max`` = 0.5 rejects an environment a constant answer passes half
the time, and ``leak_max`` = 0.8 one whose prompt spells its answer at a fixed place (a coincidence in a
small answer space stays below it; 16 instances by default). Calibration (L5) then rejects what is
still too easy for the solver.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ..eval.audit_models import EmbedFn, embed_texts
from ..eval.audit_sim import jaccard, shingles
from .azr_world import BANNED, banned_names
from .env_runtime import call_envs

__all__ = ["ENV_BANNED", "EnvCheck", "EnvReport", "check_envs", "novel", "static_problem"]

ENV_BANNED = tuple(b for b in BANNED if b != "random")
_TOKENS = re.compile(r"[^\s,=?:;]+")
LEVEL = {
    "parse": 1,
    "size": 1,
    "banned": 1,
    "interface": 1,
    "run": 2,
    "determinism": 2,
    "diversity": 2,
    "consistency": 3,
    "degenerate": 3,
    "leak": 3,
    "novelty": 4,
    "review": 4,
    "calibration": 0,
    "": 0,
}


@dataclass(frozen=True)
class EnvCheck:
    """The thresholds of L1-L3 (all [inferred])."""

    seeds: int = 8  # S instances per difficulty
    difficulties: int = 2  # D levels, 1..D
    max_chars: int = 4000
    min_distinct: float = 0.5  # of the S x D instances
    degenerate_max: float = 0.5
    leak_max: float = 0.8
    call_limit: float = 1.0  # seconds per call, in the sandbox


@dataclass(frozen=True)
class EnvReport:
    """One environment's verdict: ``ok``, or the first ``stage`` that failed and why; ``samples`` are the
    rendered instances (``instance``, ``prompt``, ``reference``) the later stages (review, calibration) use."""

    ok: bool
    stage: str = ""
    reason: str = ""
    samples: tuple[dict, ...] = field(default=(), repr=False)

    @property
    def level(self) -> int:
        """The level of the stage that rejected it (L1-L3 here; novelty and the L4 review, checked by the
        part, count as 4), or 0 when it reached calibration (L5, which rewards by p_hat)."""
        return LEVEL[self.stage]


def static_problem(code: str, max_chars: int) -> tuple[str, str] | None:
    """L1: (stage, reason) of the first static problem, or None."""
    if len(code) > max_chars:
        return "size", f"{len(code)} characters > {max_chars}"
    try:
        tree = ast.parse(code)
    except SyntaxError as err:
        return "parse", f"line {err.lineno}: {err.msg}"
    bad = banned_names(code, ENV_BANNED)
    if bad:
        return "banned", ", ".join(bad)
    classes = [
        n
        for n in tree.body
        if isinstance(n, ast.ClassDef) and any(isinstance(b, ast.Name) and b.id == "Env" for b in n.bases)
    ]
    if len(classes) != 1:
        return "interface", f"{len(classes)} Env subclasses, not 1"
    methods = {n.name for n in classes[0].body if isinstance(n, ast.FunctionDef)}
    if "sample" not in methods or not methods & {"reference", "score"}:
        return "interface", "an Env needs sample() and reference() or score()"
    return None


def _renders(codes: Sequence[str], c: EnvCheck) -> list[list[dict]]:
    calls = [("@render", (s, d)) for d in range(1, c.difficulties + 1) for s in range(1, c.seeds + 1)]
    # L2 rejects a module on its first failed call: after a timeout its other instances need not run
    return call_envs([(code, calls) for code in codes], limit=c.call_limit, stop_after_timeout=True)


def _execution(first: list[dict], second: list[dict], c: EnvCheck) -> tuple[str, str] | None:
    """L2 on one environment's two runs."""
    bad = next((r for r in first + second if not r["ok"]), None)
    if bad is not None:
        return "run", bad["error"][:200]
    a, b = (
        [json.dumps(r["value"], sort_keys=True) for r in first],
        [json.dumps(r["value"], sort_keys=True) for r in second],
    )
    if a != b:
        k = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
        return "determinism", f"instance {k} differs between two runs"
    distinct = len({json.dumps(r["value"]["instance"], sort_keys=True) for r in first}) / len(first)
    if distinct < c.min_distinct:
        return "diversity", f"{distinct:.2f} of the instances differ (< {c.min_distinct})"
    return None


def _probes(samples: list[dict]) -> tuple[list[tuple[str, int, str]], int]:
    """(family, instance, answer) of every L3 probe, and the number of token positions probed."""
    n, probes = len(samples), []
    width = min(6, min(len(_TOKENS.findall(s["prompt"])) for s in samples))
    for i, s in enumerate(samples):
        toks = _TOKENS.findall(s["prompt"])
        probes += [
            ("reference", i, s["reference"]),
            ("empty", i, ""),
            ("0", i, "0"),
            ("prompt", i, s["prompt"]),
            ("other reference", i, samples[(i + 1) % n]["reference"]),
        ]
        probes += [(f"token {k}", i, toks[k]) for k in range(width)] + ([("token -1", i, toks[-1])] if toks else [])
    return probes, width


def _consistency(
    samples: list[dict], scores: list[dict], probes: list[tuple[str, int, str]], c: EnvCheck
) -> tuple[str, str] | None:
    """L3 on one environment's instances and the scores of its probes."""
    if any(s["reference"] is None for s in samples):
        return "consistency", "reference() returned None (a verify-only environment returns its planted solution)"
    bad = next((r for r in scores if not r["ok"]), None)
    if bad is not None:
        return "consistency", "score: " + bad["error"][:200]
    by: dict[str, list[float]] = {}
    for (family, _, _), r in zip(probes, scores):
        by.setdefault(family, []).append(r["value"])
    if min(by["reference"]) < 1.0:
        return "consistency", f"score(reference) = {min(by['reference'])} on some instance, not 1"
    for family in ("empty", "0", "prompt", "other reference"):
        mean = sum(by[family]) / len(by[family])
        if mean > c.degenerate_max:
            return "degenerate", f"answer {family!r} scores {mean:.2f} on average (> {c.degenerate_max})"
    for family, vals in by.items():
        if family.startswith("token") and sum(vals) / len(vals) >= c.leak_max:
            return "leak", f"the prompt's {family} is the answer in {sum(vals) / len(vals):.0%} of the instances"
    inside = sum(len(s["reference"]) >= 3 and s["reference"] in s["prompt"] for s in samples) / len(samples)
    if inside >= c.leak_max:
        return "leak", f"the reference is inside the prompt in {inside:.0%} of the instances"
    return None


def check_envs(codes: Sequence[str], c: EnvCheck = EnvCheck()) -> list[EnvReport]:
    """L1-L3 of every module (the sandbox runs at most three batches for all of them), in order."""
    reports: list[EnvReport | None] = [None] * len(codes)
    for i, code in enumerate(codes):
        problem = static_problem(code, c.max_chars)
        if problem:
            reports[i] = EnvReport(False, *problem)
    live = [i for i, r in enumerate(reports) if r is None]
    first, second = _renders([codes[i] for i in live], c), _renders([codes[i] for i in live], c)
    samples: dict[int, list[dict]] = {}
    for i, a, b in zip(live, first, second):
        problem = _execution(a, b, c)
        if problem:
            reports[i] = EnvReport(False, *problem)
        else:
            samples[i] = [r["value"] for r in a]
    order = [i for i in samples if all(s["reference"] is not None for s in samples[i])]
    probes = {i: _probes(samples[i])[0] for i in order}
    scored = (
        call_envs(
            [(codes[i], [("score", (samples[i][k]["instance"], ans)) for _, k, ans in probes[i]]) for i in order],
            limit=c.call_limit,
        )
        if order
        else []
    )
    results = dict(zip(order, scored))
    for i in samples:
        problem = _consistency(samples[i], results.get(i, []), probes.get(i, []), c)
        reports[i] = EnvReport(False, *problem) if problem else EnvReport(True, samples=tuple(samples[i]))
    return [r for r in reports if r is not None]


def novel(
    codes: Sequence[str],
    pool: Sequence[str],
    tau: float = 0.5,
    k: int = 5,
    embed: EmbedFn | None = None,
    cos_tau: float = 0.9,
) -> list[tuple[bool, float]]:
    """(novel, max similarity) of each candidate: word ``k``-gram Jaccard of its normalised code against
    every pool module and every earlier novel candidate of the batch (batch dedup keeps the first of a
    near-duplicate pair); novel when the maximum is below ``tau`` and, with an ``embed`` function
    (texts -> (n, d) rows, e.g. the audit's MiniLM), the maximum cosine is below ``cos_tau``. The
    similarity reported is the Jaccard one, or the cosine when that is what rejects."""
    kept = [shingles(p, k) for p in pool]
    vecs = _unit(embed, list(pool) + list(codes)) if embed is not None else None  # (P + N, d)
    kept_rows = list(range(len(pool)))
    out = []
    for i, code in enumerate(codes):
        mine = shingles(code, k)
        top = max((jaccard(mine, other) for other in kept), default=0.0)
        cos = float(max(vecs[kept_rows] @ vecs[len(pool) + i])) if vecs is not None and kept_rows else 0.0
        fresh = top < tau and cos < cos_tau
        out.append((fresh, top if top >= tau or cos < cos_tau else cos))
        if fresh:
            kept.append(mine)
            kept_rows.append(len(pool) + i)
    return out


def _unit(embed: EmbedFn, texts: list[str]) -> np.ndarray:
    """Unit rows of the embeddings of ``texts`` (checked: one finite row per text)."""
    rows = embed_texts(embed, texts, "environment")  # (n, d)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return rows / np.where(norms > 0, norms, 1.0)
