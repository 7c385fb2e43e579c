"""Built-in task ``evoenv``: solving, writing and reviewing environments (EvoEnv, spec
envs-selfplay-eval.md section 2).

The ``evoenv`` recipe draws its solver problems from its pool (:mod:`reasonrl.parts.evoenv`); this task
grades them (the environment's own ``score``, in the sandbox), gives ``reasonrl pretrain --task evoenv``
demonstrations of the three prompts, and gives evaluation held-out instances of the starting
environments (the ten seeds and the grammar catalogue; instance seeds from 10**6 up, training below).

Prompts [inferred: compact markers for a character model]:

* solve ``#S`` the environment's prompt -> ``A:<answer>`` (the last line; graded by ``score``);
* generate ``#G`` K reference environments, each followed by ``--`` -> a new environment module;
* review ``#R`` a module, two of its prompts with their ``A:`` references, ``ok?`` -> ``yes`` or ``no``
  (L4: does the reference compute what the name says).

Option ``roles`` (``all`` | ``solve``): which prompts the training stream holds (``solve``: GRPO on the
fixed starting environments, the paper's hand-written-environment baseline).
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

from .base import Item, check_split, make_config
from .env_grammar import CATALOGUE, mismatched, sample_env
from .env_pool import env_id
from .env_runtime import call_envs
from .env_seeds import SEED_ENVS

__all__ = [
    "EvoEnvConfig",
    "EvoEnvTask",
    "generate_prompt",
    "parse_answer",
    "parse_review",
    "review_prompt",
    "solve_item",
    "starting_envs",
    "TEST_SEED",
]

ROLES = ("all", "solve")
TEST_SEED = 10**6  # instance seeds at or above it are held out
_ANSWER = re.compile(r"^A:(.*)$")


@dataclass(frozen=True)
class EvoEnvConfig:
    refs: int = 1  # K reference environments in a generator prompt
    ref_chars: int = 200  # only environments this short are shown as references (the tiny model's context)
    difficulty: int = 1  # the instance difficulty of the starting environments
    catalogue: bool = True  # the grammar catalogue joins the ten seeds in the starting pool
    roles: str = "all"
    max_prompt_chars: int = 300

    def __post_init__(self):
        if self.roles not in ROLES or min(self.refs, self.ref_chars, self.difficulty, self.max_prompt_chars) < 1:
            raise ValueError(
                f"evoenv: roles in {ROLES}; refs, ref_chars, difficulty, max_prompt_chars >= 1; got {self}"
            )


def starting_envs(catalogue: bool = True) -> list[tuple[str, str]]:
    """(name, code) of the starting environments: the ten seeds, then the grammar catalogue."""
    out = list(SEED_ENVS.items())
    return out + [(code.split('"')[1], code) for code in CATALOGUE] if catalogue else out


# ------------------------------------------------------------------------------------ prompts
def generate_prompt(refs: Sequence[str]) -> str:
    return "#G\n" + "".join(code.rstrip("\n") + "\n--\n" for code in refs)


def review_prompt(code: str, samples: Sequence[dict]) -> str:
    shown = "".join(f"{s['prompt']}\nA:{s['reference']}\n" for s in samples)
    return "#R\n" + code.rstrip("\n") + "\n--\n" + shown + "ok?\n"


def solve_item(env: dict, rendered: dict, seed: int) -> Item:
    """A solver problem: a rendered instance of the pool entry ``env`` (``id``, ``code``, ``seed``)."""
    prompt = "#S\n" + rendered["prompt"] + "\n"
    meta = {
        "role": "solve",
        "env": env["id"],
        "code": env["code"],
        "instance": rendered["instance"],
        "seed_env": bool(env.get("seed")),
    }
    return Item(
        key=f"evoenv:{env['id']}:{seed}",
        prompt=prompt,
        answer=rendered["reference"],
        meta=meta,
        demo=f"A:{rendered['reference']}",
    )


def parse_answer(text: str) -> str | None:
    """The answer on the completion's last non-empty line ``A:<answer>``, or None."""
    lines = [ln.strip() for ln in text.strip().split("\n") if ln.strip()]
    found = _ANSWER.match(lines[-1]) if lines else None
    return found.group(1).strip() if found else None


def parse_review(text: str) -> bool | None:
    """The reviewer's verdict: True for ``yes``, False for ``no`` (first word), None otherwise."""
    words = text.strip().lower().split()
    return {"yes": True, "no": False}.get(words[0].strip(".,!") if words else "")


# ------------------------------------------------------------------------------------ the task
class EvoEnvTask:
    name = "evoenv"
    untrusted_code = True  # the model's environment modules run in the sandbox (sandbox.require, issue 41)

    def __init__(self, **options: Any):
        self.config = make_config(EvoEnvConfig, "evoenv", options)
        self.envs = [
            {"id": env_id(code), "code": code, "name": name, "seed": True}
            for name, code in starting_envs(self.config.catalogue)
        ]
        self._scores: dict[tuple[str, str, str], float] = {}

    @property
    def max_new_tokens(self) -> int:
        return 200  # a short environment module

    def render(self, picks: Sequence[tuple[dict, int]], difficulty: int | None = None) -> list[dict | None]:
        """Rendered instances of (environment, seed) picks, one sandbox call; None where one failed."""
        d = difficulty or self.config.difficulty
        by_code: dict[str, list[int]] = {}
        for k, (env, _) in enumerate(picks):
            by_code.setdefault(env["code"], []).append(k)
        jobs = [(code, [("@render", (picks[k][1], d)) for k in ks]) for code, ks in by_code.items()]
        out: list[dict | None] = [None] * len(picks)
        for ks, results in zip(by_code.values(), call_envs(jobs)):
            for k, r in zip(ks, results):
                out[k] = r["value"] if r["ok"] and r["value"]["reference"] is not None else None
        return out

    def iter_items(self, split: str, seed: int) -> Iterator[Item]:
        """Solver items of the starting environments (test: seeds >= 10**6); in training with
        ``roles=all`` also generator and reviewer demonstrations, in turn."""
        check_split(split)
        rng, test = random.Random(f"evoenv:{seed}:{split}"), split == "test"
        while True:
            picks = [(rng.choice(self.envs), rng.randrange(TEST_SEED) + (TEST_SEED if test else 0)) for _ in range(32)]
            solved = [solve_item(env, r, s) for (env, s), r in zip(picks, self.render(picks)) if r is not None]
            extra = self._writing(rng) if not test and self.config.roles == "all" else []
            for k, item in enumerate(solved):
                yield item
                if k < len(extra):
                    yield extra[k]

    def _writing(self, rng: random.Random) -> list[Item]:
        """Generator and reviewer demonstrations on grammar environments (the reviewer's "no": one whose
        reference computes another expression than its name)."""
        envs = [sample_env(rng) for _ in range(16)]
        short = [e["code"] for e in self.envs if len(e["code"]) <= self.config.ref_chars]
        items = []
        for k, code in enumerate(envs):
            if k % 2 == 0:
                refs = rng.sample(short, min(self.config.refs, len(short)))
                items.append(
                    Item(
                        key=f"evoenv:generate:{rng.random()}",
                        prompt=generate_prompt(refs),
                        answer="",
                        meta={"role": "generate"},
                        demo=code.rstrip("\n"),
                    )
                )
            else:
                good = rng.random() < 0.5
                shown = code if good else mismatched(code, rng)
                picks = [({"code": shown}, rng.randrange(TEST_SEED)) for _ in range(2)]
                samples = [r for r in self.render(picks) if r is not None]
                prompt = review_prompt(shown, samples)
                items.append(
                    Item(
                        key=f"evoenv:review:{rng.random()}",
                        prompt=prompt,
                        answer="",
                        meta={"role": "review"},
                        demo="yes" if good else "no",
                    )
                )
        return [it for it in items if len(it.prompt) <= self.config.max_prompt_chars]

    # ---------------------------------------------------------------- grading
    def prepare(self, completions: Sequence[str], metas: Sequence[dict]) -> None:
        """Score every parsed answer of the batch in one sandbox call (kept for :meth:`verify`)."""
        if len(self._scores) > 50_000:
            self._scores.clear()
        want = {}
        for c, m in zip(completions, metas):
            ans = parse_answer(c) if m.get("role") == "solve" else None
            if ans is not None:
                key = (m["code"], json.dumps(m["instance"], sort_keys=True), ans)
                if key not in self._scores:
                    want[key] = m["instance"]
        by_code: dict[str, list[tuple[str, str, str]]] = {}
        for key in want:
            by_code.setdefault(key[0], []).append(key)
        jobs = [(code, [("score", (want[k], k[2])) for k in keys]) for code, keys in by_code.items()]
        for keys, results in zip(by_code.values(), call_envs(jobs) if jobs else []):
            for k, r in zip(keys, results):
                self._scores[k] = r["value"] if r["ok"] else 0.0  # a score that fails scores nothing

    def verify(self, completion: str, answer: str, meta: dict[str, Any]) -> float:
        """The environment's ``score`` of the answer on the last line ``A:<answer>`` (0 without one)."""
        if meta.get("role") != "solve":
            raise ValueError("evoenv: only solver prompts are verified here; the evoenv part rewards the others")
        ans = parse_answer(completion)
        if ans is None:
            return 0.0
        key = (meta["code"], json.dumps(meta["instance"], sort_keys=True), ans)
        if key not in self._scores:
            self.prepare([completion], [meta])
        return self._scores[key]

    def extract_answer(self, completion: str) -> str | None:
        return parse_answer(completion)

    def diagnostics(self, completions: list[str], metas: list[dict[str, Any]], scores: list[float]) -> dict[str, float]:
        """Held-out accuracy on the ten seeds and on the grammar catalogue."""
        seeds = set(SEED_ENVS.values())
        out = {}
        for label, pick in (("seed_acc", True), ("catalogue_acc", False)):
            mine = [s for s, m in zip(scores, metas) if (m["code"] in seeds) == pick]
            if mine:
                out[label] = sum(s >= 1.0 for s in mine) / len(mine)
        return out
