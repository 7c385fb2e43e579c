"""An LLM judge as a reward (spec section 6): the judge reads the question, the gold answer, the agent's
final answer and the evidence it retrieved, and says whether the answer is right.

``JudgeReward(backend=...)`` (``rewards.judge.backend=...`` in a config) with a backend of:

* ``path/to/judge.py:function``: a user's callable, called once per batch as
  ``fn(prompts=[...], questions=[...], golds=[...], answers=[...], evidence=[...])``; it returns one
  reply per row: a text (parsed as below), a bool, a number in [0, 1], or None (a failure);
* ``http://host:port/v1`` (or https): an OpenAI-compatible server, ``POST {backend}/chat/completions``
  with the prompt as one user message, ``temperature=0``, ``max_tokens``; ``concurrency`` requests at
  once (a thread pool), each cut at ``timeout`` seconds; the key, when the server needs one, is read from
  the environment variable named by ``api_key_env``;
* ``hf:DIR``: a local HF causal LM directory that generates a short verdict greedily
  (:mod:`reasonrl.models.judge_lm` registers this backend; importing :mod:`reasonrl.models` does).

The prompt is ``template`` filled with ``{question}``, ``{gold}``, ``{answer}`` and ``{evidence}``. The
parser is strict: the reply's first non-empty line must be the verdict (``yes``/``no``, optionally after
``verdict:``) in ``mode="verdict"``, or a number in [0, 1] (optionally after ``score:``) in
``mode="score"``; a trailing period and surrounding ``*`` are allowed, nothing else.

Failures are never scored as a verdict: a reply that does not parse, a timeout or a transport error
gives the row the value None (the batch adds 0 for it, and ``reward/judge/frac_none`` shows the share),
and is counted in ``judge/parse_failures``, ``judge/timeouts``, ``judge/errors``. A row without a final
answer scores 0 without a call (``judge/no_answer``). Verdicts (never failures) are cached per process
by the judge's identity (backend, model, mode, template) and (question, answer).
"""
from __future__ import annotations

import json
import os
import re
import socket
import threading
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ..errors import UserError
from .base import Reward, RewardResult
from .user import is_reward_path, load_function

TEMPLATE = ("You grade an answer to a question about a patient's health record.\n"
            "Question: {question}\nGold answer: {gold}\nAgent's final answer: {answer}\n"
            "Evidence the agent retrieved:\n{evidence}\n\n"
            "Is the agent's final answer correct (the same as the gold answer, up to formatting)? ")
ASK = {"verdict": "Reply with one word: yes or no.", "score": "Reply with one number between 0 and 1."}
FIELDS = ("question", "gold", "answer", "evidence")
_VERDICT = re.compile(r"(?:verdict\s*:\s*)?(yes|no)")
_SCORE = re.compile(r"(?:score\s*:\s*)?(\d+(?:\.\d+)?|\.\d+)")


class JudgeTimeout(Exception):
    """The judge did not answer within its timeout."""


class JudgeFailure(Exception):
    """The judge's transport failed or its reply was malformed (not a parse failure of the verdict)."""


def parse_verdict(reply: Any, mode: str = "verdict") -> float | None:
    """A reply as a score in [0, 1], or None when it is not exactly a verdict (module docs)."""
    if isinstance(reply, bool):
        return float(reply)
    if isinstance(reply, (int, float)):
        return float(reply) if 0.0 <= reply <= 1.0 else None
    if not isinstance(reply, str):
        return None
    lines = [ln.strip() for ln in reply.strip().splitlines() if ln.strip()]
    if not lines:
        return None
    head = lines[0].strip("*").strip().lower().removesuffix(".").strip("*").strip()
    if mode == "verdict":
        m = _VERDICT.fullmatch(head)
        return None if m is None else float(m.group(1) == "yes")
    m = _SCORE.fullmatch(head)
    if m is None:
        return None
    value = float(m.group(1))
    return value if 0.0 <= value <= 1.0 else None


# ---------------------------------------------------------------- backends: (prompts, rows) -> replies
BACKENDS: dict[str, Callable[["JudgeReward"], Callable[..., list[Any]]]] = {}
_BUILT: dict[tuple, Callable[..., list[Any]]] = {}
_CACHE: dict[tuple, float] = {}
_LOCK = threading.Lock()


def register_backend(scheme: str, factory: Callable[["JudgeReward"], Callable[..., list[Any]]]) -> None:
    """``backend="<scheme>:..."`` builds its judge with ``factory(reward)``: a callable ``(prompts, rows)``
    -> one reply per prompt, where a reply may be an exception instance (a failure, counted)."""
    BACKENDS[scheme] = factory


def _user_backend(reward: "JudgeReward") -> Callable[..., list[Any]]:
    fn = load_function(reward.backend)

    def judge(prompts: list[str], rows: list[dict[str, str]]) -> list[Any]:
        out = list(fn(prompts=prompts, questions=[r["question"] for r in rows], golds=[r["gold"] for r in rows],
                      answers=[r["answer"] for r in rows], evidence=[r["evidence"] for r in rows]))
        if len(out) != len(prompts):
            raise UserError(f"judge {reward.backend!r} returned {len(out)} replies for {len(prompts)} prompts")
        return out
    return judge


def chat_completion(base: str, prompt: str, *, model: str, max_tokens: int, timeout: float,
                    api_key: str | None = None) -> str:
    """One OpenAI-compatible chat completion's text; :class:`JudgeTimeout` or :class:`JudgeFailure` otherwise."""
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": prompt}],
                       "temperature": 0, "max_tokens": max_tokens}).encode()
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {api_key}"} if api_key else {})}
    request = urllib.request.Request(base.rstrip("/") + "/chat/completions", data=body, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            payload = json.loads(resp.read().decode("utf-8"))
        return str(payload["choices"][0]["message"]["content"])
    except (socket.timeout, TimeoutError) as err:
        raise JudgeTimeout(f"no reply within {timeout:g} s") from err
    except urllib.error.URLError as err:
        if isinstance(err.reason, (socket.timeout, TimeoutError)):
            raise JudgeTimeout(f"no reply within {timeout:g} s") from err
        raise JudgeFailure(f"{type(err).__name__}: {err}") from err
    except (ValueError, KeyError, IndexError, TypeError, OSError) as err:
        raise JudgeFailure(f"malformed reply ({type(err).__name__}: {err})") from err


def _http_backend(reward: "JudgeReward") -> Callable[..., list[Any]]:
    key = os.environ.get(reward.api_key_env) if reward.api_key_env else None

    def one(prompt: str) -> Any:
        try:
            return chat_completion(reward.backend, prompt, model=reward.model, max_tokens=reward.max_tokens,
                                   timeout=reward.timeout, api_key=key)
        except (JudgeTimeout, JudgeFailure) as err:
            return err

    def judge(prompts: list[str], rows: list[dict[str, str]]) -> list[Any]:
        with ThreadPoolExecutor(max_workers=reward.concurrency) as pool:
            return list(pool.map(one, prompts))
    return judge


def _backend(reward: "JudgeReward") -> Callable[..., list[Any]]:
    ident = reward.identity
    with _LOCK:
        if ident in _BUILT:
            return _BUILT[ident]
    if is_reward_path(reward.backend):
        judge = _user_backend(reward)
    elif reward.backend.startswith(("http://", "https://")):
        judge = _http_backend(reward)
    else:
        scheme = reward.backend.split(":", 1)[0]
        if scheme not in BACKENDS:
            raise UserError(f"judge backend {reward.backend!r} is not one of: path/to/judge.py:function, "
                            f"http(s)://host/v1, {', '.join(f'{s}:...' for s in sorted(BACKENDS)) or 'hf:DIR (import reasonrl.models)'}")
        judge = BACKENDS[scheme](reward)
    with _LOCK:
        _BUILT[ident] = judge
    return judge


def clear_cache() -> None:
    """Forget every cached verdict and built backend (tests; a judge file edited in a live process)."""
    with _LOCK:
        _CACHE.clear()
        _BUILT.clear()


@dataclass(frozen=True)
class JudgeReward(Reward):
    """The judge's score as the reward; see the module docs for backends, parsing, failures and caching."""

    backend: str = ""  # path/to/judge.py:function | http(s)://host/v1 | hf:DIR
    model: str = ""  # the served model's name (http)
    mode: str = "verdict"  # verdict: yes/no -> 1/0; score: a number in [0, 1]
    template: str = TEMPLATE  # {question} {gold} {answer} {evidence}; the mode's instruction is appended
    timeout: float = 30.0  # seconds per request (http)
    concurrency: int = 4  # requests at once (http)
    max_tokens: int = 16  # the verdict's length (http, hf)
    api_key_env: str = ""  # the environment variable holding the server's key (http); empty: none sent

    name = "judge"

    def __post_init__(self):
        if self.mode not in ASK:
            raise ValueError(f"judge mode must be one of {list(ASK)}, got {self.mode!r}")
        missing = [f for f in ("question", "answer") if "{" + f + "}" not in self.template]
        if missing:
            raise ValueError(f"judge template must hold {{question}} and {{answer}} (missing {missing})")
        if self.timeout <= 0 or self.concurrency < 1 or self.max_tokens < 1:
            raise ValueError("judge needs timeout > 0, concurrency >= 1, max_tokens >= 1")

    def problems(self) -> list[str]:
        if not self.backend:
            return ["config key 'rewards.judge.backend' is not set: give path/to/judge.py:function, "
                    "http(s)://host/v1 (an OpenAI-compatible server) or hf:DIR (docs/agents.md)"]
        return []

    @property
    def identity(self) -> tuple:
        return (self.backend, self.model, self.mode, self.template)

    def prompt(self, row: dict[str, str]) -> str:
        filled = self.template
        for f in FIELDS:  # not str.format: evidence and answers may hold braces
            filled = filled.replace("{" + f + "}", row[f])
        return filled + ASK[self.mode]

    def score(self, prompts: Sequence[Any], completions: Sequence[str], **columns: Any) -> RewardResult:
        if self.problems():
            raise UserError(self.problems()[0])
        rows = judge_rows(prompts, completions, columns)
        values: list[float | None] = [None] * len(rows)
        counts = {"no_answer": 0, "cached": 0, "parse_failures": 0, "timeouts": 0, "errors": 0}
        todo: dict[tuple, list[int]] = {}
        for i, row in enumerate(rows):
            key = (*self.identity, row["question"], row["answer"])
            if not row["answer"].strip():
                values[i], counts["no_answer"] = 0.0, counts["no_answer"] + 1
            elif key in _CACHE:
                values[i], counts["cached"] = _CACHE[key], counts["cached"] + 1
            else:
                todo.setdefault(key, []).append(i)
        if todo:
            self._ask(rows, todo, values, counts)
        n = max(len(rows), 1)
        return RewardResult(values, {f"judge/{k}": v / n for k, v in counts.items()})

    def _ask(self, rows, todo: dict[tuple, list[int]], values: list, counts: dict[str, int]) -> None:
        firsts = [idx[0] for idx in todo.values()]  # one call per distinct (question, answer)
        replies = _backend(self)([self.prompt(rows[i]) for i in firsts], [rows[i] for i in firsts])
        for (key, idx), reply in zip(todo.items(), replies):
            if isinstance(reply, JudgeTimeout):
                counts["timeouts"] += len(idx)
                continue
            if isinstance(reply, BaseException):
                counts["errors"] += len(idx)
                continue
            value = parse_verdict(reply, self.mode)
            if value is None:
                counts["parse_failures"] += len(idx)
                continue
            with _LOCK:
                _CACHE[key] = value
            for i in idx:
                values[i] = value


def judge_rows(prompts: Sequence[Any], completions: Sequence[str], columns: dict[str, Any]) -> list[dict[str, str]]:
    """Per row: the question (``meta["question"]``, else the prompt), the gold (``answer`` column), the
    agent's answer (the completion) and the evidence (an ``evidence`` column, else the episodes part's
    ``rollouts.extras["evidence"]``, else "")."""
    n = len(completions)
    metas = columns.get("meta") or [{}] * n
    golds = columns.get("answer") or [""] * n
    evidence = columns.get("evidence")
    if evidence is None:
        ro = columns.get("rollouts")
        evidence = getattr(ro, "extras", {}).get("evidence") if ro is not None else None
    if evidence is None or len(evidence) != n:
        evidence = [""] * n
    return [{"question": str((m or {}).get("question") or p), "gold": str(g), "answer": str(c),
             "evidence": str(e)} for p, c, m, g, e in zip(prompts, completions, metas, golds, evidence)]
