"""The judge's OpenAI-compatible HTTP transport (``rewards.judge.backend=http(s)://host/v1``, issue 41).

A request is ``POST {base}/chat/completions`` with the prompt as one user message, ``temperature=0`` and
``max_tokens``. Its deadline (the judge's ``timeout``, seconds) covers the whole request: connecting,
sending, reading, every retry and every wait between them. Each socket operation is given what is left of
it and the body is read in pieces with the deadline checked between them (a per-operation timeout alone
let a server that trickles bytes hold a row far past it).

Transient failures are retried with exponential backoff: a timeout of one attempt, a refused or reset
connection, HTTP 408, 429 and 5xx, and a body that is not the expected JSON (a proxy's error page).
Retry ``k`` (1-based) waits ``backoff * 2**(k - 1)`` seconds first; at most ``retries`` retries, and none
that would start past the deadline. Any other HTTP status (400, 401, 404: the request itself is wrong)
fails at once. A request that still fails raises :class:`JudgeTimeout` (its deadline passed) or
:class:`JudgeFailure`; the judge reward leaves such a row out of training (:mod:`reasonrl.rewards.judge`).
No HTTP proxy is used (``http.client`` directly): a judge server is reached as given.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

RETRY_STATUS = frozenset({408, 429})  # and every 5xx


class JudgeTimeout(Exception):
    """The judge did not answer within the request's deadline (``retries``: the retries it took)."""

    retries = 0


class JudgeFailure(Exception):
    """The judge's transport failed or its reply was malformed (not a parse failure of the verdict)."""

    retries = 0


class Transient(Exception):
    """One attempt failed in a way another attempt may not (``timeout``: the attempt ran out of time)."""

    def __init__(self, why: str, timeout: bool = False):
        super().__init__(why)
        self.timeout = timeout


def _left(end: float, clock: Callable[[], float] = time.monotonic) -> float:
    """Seconds left before ``end``; a TimeoutError when none are."""
    left = end - clock()
    if left <= 0:
        raise TimeoutError("the request's deadline passed")
    return left


def post_json(url: str, payload: dict, headers: dict[str, str], end: float) -> dict:
    """One attempt: ``payload`` POSTed to ``url`` as JSON, the JSON reply, all before ``end`` (monotonic
    seconds). :class:`Transient` or :class:`JudgeFailure` otherwise."""
    parts = urllib.parse.urlsplit(url)
    conn_cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        conn = conn_cls(parts.hostname, parts.port, timeout=_left(end))
        try:
            conn.request("POST", path, body=json.dumps(payload).encode(), headers=headers)
            sock = conn.sock  # kept: a response that closes the connection drops conn.sock, not the socket
            sock.settimeout(_left(end))
            resp = conn.getresponse()
            chunks = []
            while True:
                sock.settimeout(_left(end))
                chunk = resp.read1(65536)
                if not chunk:
                    break
                chunks.append(chunk)
        finally:
            conn.close()
    except (socket.timeout, TimeoutError) as err:  # socket.timeout is TimeoutError; both named for clarity
        raise Transient(f"no reply within the deadline ({err})", timeout=True) from err
    except (ConnectionError, http.client.HTTPException, OSError) as err:  # refused, reset, a broken status line
        raise Transient(f"{type(err).__name__}: {err}") from err
    body = b"".join(chunks)
    if resp.status != 200:
        why = f"HTTP {resp.status} {resp.reason}: {body[:200]!r}"
        if resp.status in RETRY_STATUS or resp.status >= 500:
            raise Transient(why)
        raise JudgeFailure(why)
    try:
        return json.loads(body.decode("utf-8"))
    except ValueError as err:  # not JSON, not UTF-8
        raise Transient(f"malformed reply ({type(err).__name__}: {err}): {body[:200]!r}") from err


def with_retries(
    attempt: Callable[[float], str],
    deadline: float,
    retries: int,
    backoff: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[str, int]:
    """``attempt(end)`` until it returns, retrying :class:`Transient` failures (module docs): (its text,
    the retries it took). :class:`JudgeTimeout` when the deadline passed, :class:`JudgeFailure` else."""
    end, done = clock() + deadline, 0
    while True:
        try:
            return attempt(end), done
        except Transient as err:
            last = err
        wait = backoff * 2**done
        if done == retries or clock() + wait >= end:  # out of retries, or the next would start past the deadline
            break
        sleep(wait)
        done += 1
    failure = (
        JudgeTimeout(f"no verdict within {deadline:g} s ({last})")
        if last.timeout or clock() >= end
        else JudgeFailure(f"{last} (after {done} retries)")
    )
    failure.retries = done
    raise failure


def chat_completion(
    base: str,
    prompt: str,
    *,
    model: str,
    max_tokens: int,
    timeout: float,
    retries: int = 0,
    backoff: float = 0.5,
    api_key: str | None = None,
) -> tuple[str, int]:
    """One OpenAI-compatible chat completion's text and the retries it took, within ``timeout`` seconds in
    all; :class:`JudgeTimeout` or :class:`JudgeFailure` otherwise."""
    payload = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "temperature": 0,
        "max_tokens": max_tokens,
    }
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {api_key}"} if api_key else {})}
    url = base.rstrip("/") + "/chat/completions"

    def attempt(end: float) -> str:
        reply = post_json(url, payload, headers, end)
        try:
            return str(reply["choices"][0]["message"]["content"])
        except (KeyError, IndexError, TypeError) as err:
            raise Transient(f"malformed reply ({type(err).__name__}: {err}): {str(reply)[:200]}") from err

    return with_retries(attempt, timeout, retries, backoff)


class HttpJudge:
    """The ``http(s)://`` backend: ``concurrency`` requests at once; ``retries`` holds the last call's
    total of retries (the judge reward reports it as ``judge/retries``)."""

    def __init__(
        self,
        base: str,
        *,
        model: str,
        max_tokens: int,
        timeout: float,
        retries: int,
        backoff: float,
        concurrency: int,
        api_key: str | None,
    ):
        self.base, self.model, self.max_tokens, self.api_key = base, model, max_tokens, api_key
        self.timeout, self.max_retries, self.backoff, self.concurrency = timeout, retries, backoff, concurrency
        self.retries = 0
        self._lock = threading.Lock()

    def one(self, prompt: str) -> str | Exception:
        try:
            text, retried = chat_completion(
                self.base,
                prompt,
                model=self.model,
                max_tokens=self.max_tokens,
                timeout=self.timeout,
                retries=self.max_retries,
                backoff=self.backoff,
                api_key=self.api_key,
            )
        except (JudgeTimeout, JudgeFailure) as err:
            retried, text = err.retries, err
        with self._lock:
            self.retries += retried
        return text

    def __call__(self, prompts: list[str], rows: list[dict[str, str]]) -> list[str | Exception]:
        self.retries = 0
        with ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="reasonrl-judge") as pool:
            return list(pool.map(self.one, prompts))
