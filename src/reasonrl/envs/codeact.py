"""The CodeAct harness (spec section 6): each action's code runs in a persistent sandboxed interpreter.

The policy writes reasoning and code (fenced ```` ```python ```` blocks or ``<code>...</code>``; every
block of a turn runs, in order). The code runs in one :class:`~reasonrl.rewards.sandbox.session.SandboxSession`
per episode, so variables survive from turn to turn, with the environment's tools bound as functions
(they run in the caller's process; the sandboxed code reaches them through the session's protocol).
What the code printed, its trailing expression's value, or its error is the observation: an exception,
a timeout, a malformed block or a turn without code never crash the episode. ``final_answer(x)`` in
the code, or ``<answer>x</answer>`` in the text, ends the episode with ``x`` as the answer.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Mapping

from ..rewards.sandbox.limits import SandboxError
from ..rewards.sandbox.policy import required_level
from ..rewards.sandbox.session import CellResult, SandboxSession

_BLOCKS = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```|<code>(.*?)</code>", re.S)
_OPENERS = re.compile(r"```(?:python|py)[ \t]*\n|<code>")
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S)
NO_CODE = (
    "Error: no code block found. Write Python in a ```python ... ``` block (or <code>...</code>); "
    "call final_answer(x) to answer."
)


def extract_code(text: str) -> tuple[str | None, str | None]:
    """(the code of every complete block, joined in order; or None) and (what is malformed; or None): a
    block opened and never closed, or only empty blocks."""
    blocks = [(m.group(1) if m.group(1) is not None else m.group(2)) for m in _BLOCKS.finditer(text)]
    rest = _BLOCKS.sub("", text)
    if _OPENERS.search(rest):
        return None, "a code block was opened and never closed (``` or </code> missing)"
    if not blocks:
        return None, None
    code = "\n".join(b.strip("\n") for b in blocks)
    return (code, None) if code.strip() else (None, "the code block is empty")


def render_cell(res: CellResult) -> str:
    """The observation of one cell: its output, its trailing value, its error (the model's to read)."""
    parts = [res.stdout.rstrip("\n")] if res.stdout.strip() else []
    if res.value is not None:
        parts.append(f"Out: {res.value}")
    if res.error is not None:
        parts.append(f"Error:\n{res.error.rstrip()}")
    return "\n".join(parts) if parts else "(no output)"


class CodeActEnv:
    """One episode's harness. ``tools``: name -> callable bound in the interpreter (JSON values in and
    out); ``template``: the first message, from ``{question}`` (the item's prompt) and ``{tools}``
    (``tool_docs``); ``turn_timeout``: seconds per cell; ``max_chars``: output kept per cell (the episode
    caps observations again, in tokens); other keywords: sandbox limits (``memory_mb``, ``level``, ...)."""

    def __init__(
        self,
        tools: Mapping[str, Callable[..., Any]] | None = None,
        *,
        template: str = "{question}",
        tool_docs: str = "",
        turn_timeout: float = 2.0,
        max_chars: int = 4000,
        lifetime: float = 300.0,
        **sandbox: Any,
    ):
        self.tools, self.template, self.tool_docs = dict(tools or {}), template, tool_docs
        self.options = dict(turn_timeout=turn_timeout, max_chars=max_chars, lifetime=lifetime, **sandbox)
        self._session: SandboxSession | None = None
        self.cells: list[CellResult] = []  # every cell's result this episode (for judges and tests)
        self.malformed = 0  # turns without runnable code (none, unclosed, empty)
        self.sandbox_errors = 0  # turns whose sandbox could not start (issue 41: an observation, not a crash)

    def reset(self, item: Any) -> str:
        self.close()
        self.cells, self.malformed, self.sandbox_errors = [], 0, 0
        question = getattr(item, "prompt", item)
        return self.template.format(question=question, tools=self.tool_docs)

    def step(self, action_text: str) -> tuple[str, bool, str | None]:
        said = _ANSWER.search(action_text)
        code, problem = extract_code(action_text)
        if code is None and said is not None:
            return "", True, said.group(1).strip()
        if problem is not None or code is None:
            self.malformed += 1
            return (f"Error: {problem}" if problem is not None else NO_CODE), False, None
        try:
            if self._session is None:  # at the run's minimum level (sandbox.require) unless given
                self._session = SandboxSession(self.tools, **{"require": required_level(), **self.options})
            res = self._session.run(code)
        except SandboxError as exc:  # the sandbox itself (no free uid, a failed start): this turn's observation
            self.close()
            self.sandbox_errors += 1
            return f"Error: the sandbox could not start ({exc}); the next code block starts it again", False, None
        self.cells.append(res)
        if res.final:
            return render_cell(res), True, res.answer
        return render_cell(res), False, None

    def evidence(self, last: int = 3, max_chars: int = 2000) -> str:
        """The last ``last`` cells' observations (what the agent retrieved), at most ``max_chars`` (the
        end kept): what a judge reads beside the answer (:mod:`reasonrl.rewards.judge`)."""
        text = "\n---\n".join(render_cell(c) for c in self.cells[-last:])
        return text[-max_chars:]

    def metrics(self) -> dict[str, float]:
        """This episode's counts: cells run, cells that ended in an error (an exception, a refused tool call,
        a timeout), timeouts, turns without runnable code, and turns whose sandbox could not start
        (averaged over episodes as ``env/*``)."""
        return {
            "codeact/cells": float(len(self.cells)),
            "codeact/cell_errors": float(sum(c.error is not None for c in self.cells)),
            "codeact/timeouts": float(sum(c.timed_out for c in self.cells)),
            "codeact/malformed": float(self.malformed),
            "codeact/sandbox_errors": float(self.sandbox_errors),
        }

    def close(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None
