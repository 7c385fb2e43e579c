"""Scripted stand-ins for an LLM judge on the FHIR task, for `codeact_judge` where no judge model exists.

A backend of the form ``path/to/judge.py:function`` (``rewards.judge.backend=...``, docs/agents.md): each
function is called once per batch with the rows' prompts, questions, golds, answers (the episode text) and
evidence, and returns one reply per row as a judge model would, a text the judge reward parses strictly.

* ``judge``: an exact judge. It reads the episode's last number as the agent's final answer and says yes when
  it is within 0.05 of the gold (a gold of ``none`` wants the word "none" and no number), the rule of the
  task's own verifier, so training on its verdicts tests the judge path (prompting, parsing, caching, the
  task weight 0), not the judge's quality.
* ``noisy_judge``: the same verdicts with a fixed 20% of them reversed, chosen by a hash of (question,
  answer) so that the same pair always gets the same verdict, as a judge at temperature 0 does: an
  imperfect judge whose errors are not noise that averages out over samples.

These are benchmark fixtures, not a judge anyone should train a real model with; their verdicts are what a
perfect (or 80%-agreeing) judge would say, and a real LLM judge's failures (unparseable replies, timeouts,
verdicts swayed by the evidence) are not modelled.
"""

from __future__ import annotations

import hashlib

from reasonrl.tasks.fhir import NUMBER  # the task's answer pattern: the judge reads answers as the verifier does

FLIP_RATE = 0.2


def correct(answer: str, gold: str) -> bool:
    """The verifier's rule: the text's last number within 0.05 of the gold, or "none" for a gold of none."""
    found = NUMBER.findall(answer)
    if gold.strip().lower() == "none":
        return not found and "none" in answer.lower()
    return bool(found) and abs(float(found[-1]) - float(gold)) <= 0.05 + 1e-9


def flipped(question: str, answer: str, rate: float = FLIP_RATE) -> bool:
    """Whether this (question, answer) pair is one the noisy judge gets wrong: sha256 mapped to [0, 1)."""
    digest = hashlib.sha256(f"{question}\x00{answer}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < rate


def judge(prompts, questions, golds, answers, evidence):
    return [f"verdict: {'yes' if correct(a, g) else 'no'}" for a, g in zip(answers, golds)]


def noisy_judge(prompts, questions, golds, answers, evidence):
    return [
        f"verdict: {'yes' if correct(a, g) != flipped(q, a) else 'no'}" for q, a, g in zip(questions, answers, golds)
    ]
