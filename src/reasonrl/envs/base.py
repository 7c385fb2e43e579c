"""The environment protocol users implement to bring their own environment (docs/agents.md).

One environment object per episode (a task's ``environment(item)`` makes it). ``reset(item)`` returns
the episode's first user message (a string or chat messages: the question, the tool documentation);
``step(action_text)`` gets the text of the policy's turn and returns ``(observation, done, answer)``:
``done`` ends the episode, ``answer`` (a string, or None) is what the task's verifier scores. ``close()``
(optional) frees what the episode held (a sandbox); ``evidence()`` (optional)
is what a judge reads beside the answer (the episodes part collects it before ``close``); ``metrics()``
(optional) is a dict of the episode's counts, logged averaged over episodes as ``env/<key>``. A failure
of the environment itself is a bug and is raised; a bad action is the environment's to turn into an
observation.
"""

from __future__ import annotations

from typing import Any, Protocol, Sequence, runtime_checkable

from ..errors import UserError


@runtime_checkable
class Environment(Protocol):
    def reset(self, item: Any) -> Any: ...

    def step(self, action_text: str) -> tuple[str, bool, str | None]: ...


class ScriptedEnv:
    """Replies from a script: ``replies[k]`` answers the k-th action; an action containing ``answer_tag``
    ends the episode with the text after it as the answer. Records the actions it got (``actions``)."""

    def __init__(self, prompt: Any, replies: Sequence[str], answer_tag: str = "ANSWER:"):
        self.prompt, self.replies, self.tag = prompt, list(replies), answer_tag
        self.actions: list[str] = []

    def reset(self, item: Any) -> Any:
        self.actions = []
        return self.prompt

    def step(self, action_text: str) -> tuple[str, bool, str | None]:
        self.actions.append(action_text)
        if self.tag in action_text:
            return "", True, action_text.split(self.tag, 1)[1].strip()
        k = len(self.actions) - 1
        if k >= len(self.replies):
            raise UserError(f"ScriptedEnv: action {k + 1} has no scripted reply ({len(self.replies)} given)")
        return self.replies[k], False, None
