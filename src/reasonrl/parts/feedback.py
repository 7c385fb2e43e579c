"""Language feedback on an attempt, for teachers that read it (VPD, arXiv 2605.15113; spec section 4).

A feedback function is ``fn(task, item, attempt, correct) -> str``: the text a feedback-conditioned
teacher sees about a previous ``attempt`` at ``item`` (``correct``: the verifier's verdict on it).
It is pluggable: :data:`FEEDBACK` names them (a recipe field takes the name, so configs stay plain
text); :func:`register_feedback` adds one.

* ``critique`` (default): the first line of the task's own stepwise critique
  (:func:`reasonrl.tasks.guidance.critique`). For the built-in arithmetic task it is computed
  against the **gold** working ("step 1: 5+7+0 is 12, not 72"), as the paper's verifier messages and
  unit-test failures are made with privileged knowledge of the answer: the teacher is shown where
  and how the attempt went wrong, the student never is. Tasks without a ``critique`` method raise a
  UserError that says how to attach critiques.
* ``verdict``: only the verifier's outcome ("The final answer is correct." / "... is wrong."),
  the weakest feedback (still from the verifier, which knows the gold answer).
"""

from __future__ import annotations

from typing import Any, Callable

from ..tasks import guidance
from ..text import fill_slots

FeedbackFn = Callable[[Any, Any, str, bool], str]


def critique_feedback(task: Any, item: Any, attempt: str, correct: bool) -> str:
    """The explanation line of the task's critique of ``attempt`` (its tags dropped)."""
    text = guidance.critique(task, item, attempt).text
    return text.strip().splitlines()[0] if text.strip() else ("correct" if correct else "incorrect")


def verdict_feedback(task: Any, item: Any, attempt: str, correct: bool) -> str:
    """The verifier's outcome alone."""
    return "The final answer is correct." if correct else "The final answer is wrong."


FEEDBACK: dict[str, FeedbackFn] = {"critique": critique_feedback, "verdict": verdict_feedback}


def register_feedback(name: str, fn: FeedbackFn) -> FeedbackFn:
    """Make ``fn`` available by ``name`` (e.g. ``vpd.feedback=name``); returns it (a decorator too)."""
    if not callable(fn):
        raise ValueError(f"feedback {name!r} must be callable fn(task, item, attempt, correct) -> str")
    FEEDBACK[name] = fn
    return fn


def feedback_fn(spec: str | FeedbackFn) -> FeedbackFn:
    """A built-in feedback function by name, or ``spec`` itself when it is callable."""
    if callable(spec):
        return spec
    if spec not in FEEDBACK:
        raise ValueError(
            f"unknown feedback {spec!r}; valid: {', '.join(FEEDBACK)} (or a callable "
            "fn(task, item, attempt, correct) -> str)"
        )
    return FEEDBACK[spec]


def teacher_prompt(template: str, prompt: str, attempt: str, feedback: str) -> str:
    """``template`` with its three slots filled in one pass (braces inside the texts stay as they are)."""
    return fill_slots(template, prompt=prompt, attempt=attempt, feedback=feedback)
