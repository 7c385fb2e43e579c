"""Running model-written environments (EvoEnv, spec envs-selfplay-eval.md section 2) in the sandbox only.

An environment is one Python module defining one subclass of :data:`PRELUDE`'s ``Env``::

    class E(Env):
        name = "sum%7"                            # what the task is (the default prompt shows it)
        def sample(self, seed, difficulty): ...   # a JSON-serialisable instance (seeded: ``R(seed)``)
        def prompt(self, instance): ...           # the question; default: ``name`` and the instance, ``=?``
        def reference(self, instance): ...        # the oracle answer (None: verify-only, then score checks)
        def score(self, instance, answer): ...    # in [0, 1]; default: answer == str(reference)

The pseudo-method ``@render`` (args ``seed, difficulty``) returns ``{"instance", "prompt", "reference"}``
in one call (the reference as a string, or None), so drawing an instance is one round trip.

The module is never imported by the trainer: :func:`call_envs` sends (module code, method calls) jobs to
the sandbox (:func:`reasonrl.rewards.sandbox.run_python`), where a trusted runner executes each module in
a fresh namespace after the prelude and makes each call under a wall-clock alarm; every result must be
JSON. One sandbox process runs a batch, each module in its own fork of the warmed-up runner
(:mod:`reasonrl.rewards.sandbox.jobs`), so that no module can change another's instances or scores by
patching ``random``, classes or builtins (issue 41); a module that ignores its alarms is killed after
its calls' limits together. When the sandbox itself kills a batch (memory, time, output), the batch is
bisected so the failure is pinned on its module. Results come back as ``{"ok": bool, "value" |
"error"}`` per call (type-checked here: a module decides its own results), or one ``{"ok": False,
"error"}`` per call when the module does not load.
"""

from __future__ import annotations

import functools
import json
from typing import Any, Sequence

from ..rewards.sandbox.pool import batch_program

__all__ = ["MARK", "PRELUDE", "call_envs"]

MARK = "@@REASONRL-ENV@@"
# what every environment module may use: a seeded generator and an exact-match default score
PRELUDE = """
import random

class Env:
    name = "env"
    description = ""

    def sample(self, seed, difficulty):
        raise NotImplementedError("sample")

    def prompt(self, instance):
        return "%s %s=?" % (self.name, show(instance))

    def reference(self, instance):
        return None

    def score(self, instance, answer):
        ref = self.reference(instance)
        return float(ref is not None and str(answer).strip() == str(ref).strip())

def R(seed):
    return random.Random(seed)

def show(x):
    if isinstance(x, dict):
        return " ".join("%s=%s" % (k, show(v)) for k, v in x.items())
    if isinstance(x, (list, tuple)):
        flat = not any(isinstance(v, (list, tuple, dict)) for v in x)
        return (" " if flat else ",").join(show(v) for v in x)
    return str(x)
"""

RUNNER_BODY = r'''
import json, random, signal, sys
PRELUDE, MARK = %r, %r

class CallTimeout(BaseException):
    pass

def _alarm(*_):
    raise CallTimeout("the call ran past its time limit")

signal.signal(signal.SIGALRM, _alarm)

PRELUDE_CODE = compile(PRELUDE, "<prelude>", "exec")

def load(compiled):
    ns = {"__name__": "env_module"}
    exec(PRELUDE_CODE, ns)
    base = ns["Env"]
    exec(compiled, ns)
    found = [v for k, v in ns.items() if isinstance(v, type) and issubclass(v, base) and v is not base]
    if len(found) != 1:
        raise ValueError("the module defines %%d Env subclasses, not 1" %% len(found))
    return found[0]()

def render(env, seed, difficulty):
    inst = env.sample(seed, difficulty)
    json.dumps(inst)
    prompt, ref = env.prompt(inst), env.reference(inst)
    if not isinstance(prompt, str):
        raise TypeError("prompt() returned %%s, not str" %% type(prompt).__name__)
    return {"instance": inst, "prompt": prompt, "reference": None if ref is None else str(ref)}

def call(env, method, args, limit):
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        value = render(env, *args) if method == "@render" else getattr(env, method)(*args)
        if method == "score":  # a score is a number in [0, 1], or the call failed
            value = float(value)
            if not 0.0 <= value <= 1.0:
                raise ValueError("score %%r is outside [0, 1]" %% value)
        json.dumps(value)
        return {"ok": True, "value": value}
    except BaseException as err:  # the module's own failure, reported per call (the runner goes on)
        return {"ok": False, "error": "%%s: %%s" %% (type(err).__name__, err)}
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)

def prepare(job):
    """Before the fork (the module's text is only compiled, never run)."""
    try:
        return job, compile(job["code"], "<env>", "exec")
    except (SyntaxError, ValueError) as err:
        return Done(failed(job, "load: %%s: %%s" %% (type(err).__name__, err)))

def run_job(prepared):
    job, compiled = prepared
    try:
        signal.setitimer(signal.ITIMER_REAL, job["limit"])
        env = load(compiled)
        signal.setitimer(signal.ITIMER_REAL, 0)
    except BaseException as err:  # a module that does not load fails every call it was given
        signal.setitimer(signal.ITIMER_REAL, 0)
        return failed(job, "load: %%s: %%s" %% (type(err).__name__, err))
    results = []
    for m, a in job["calls"]:
        if job["stop_after_timeout"] and results and results[-1].get("error", "").startswith("CallTimeout"):
            results.append({"ok": False, "error": "CallTimeout: not run: an earlier call ran past its time limit"})
        else:
            results.append(call(env, m, a, job["limit"]))
    return results

def failed(job, why):
    return [{"ok": False, "error": why}] * len(job["calls"])

# each module in its own fork; one that ignores its alarms is killed after its calls' limits together
send(MARK, each_fresh(json.loads(sys.stdin.read()), run_job, failed,
                      lambda job: job["limit"] * (len(job["calls"]) + 1) + 1.0, prepare))
''' % (PRELUDE, MARK)
RUNNER = batch_program(RUNNER_BODY)  # one fresh fork of the warmed-up runner per module (issue 41)


def _runner(require: str | None):
    """run_python at the run's minimum level (``sandbox.require``, issue 41) or ``require``."""
    from ..rewards.sandbox import required_level, run_python  # the sandbox is the only place an environment runs

    return functools.partial(run_python, require=require or required_level())


def _value_ok(method: str, value: Any) -> bool:
    if method == "score":
        return type(value) in (int, float) and 0.0 <= value <= 1.0  # NaN fails both comparisons
    if method == "@render":
        return (
            isinstance(value, dict)
            and "instance" in value
            and isinstance(value.get("prompt"), str)
            and (value.get("reference") is None or isinstance(value["reference"], str))
        )
    return True


def _checked(method: str, result: Any) -> dict:
    """One call's result as the trainer may use it: each module runs in its own fork and so decides its
    own results (issue 41), which are therefore type-checked like any untrusted input."""
    if isinstance(result, dict) and result.get("ok") is False and isinstance(result.get("error"), str):
        return {"ok": False, "error": result["error"]}
    if (
        isinstance(result, dict)
        and result.get("ok") is True
        and "value" in result
        and _value_ok(method, result["value"])
    ):
        return {"ok": True, "value": result["value"]}
    return {"ok": False, "error": f"the module sent back a malformed {method} result"}


def _job_results(job: dict, results: Any) -> list[dict]:
    if not isinstance(results, list) or len(results) != len(job["calls"]):
        return [{"ok": False, "error": "the module sent back a malformed list of results"}] * len(job["calls"])
    return [_checked(m, r) for (m, _), r in zip(job["calls"], results)]


def _run_batch(jobs: list[dict], timeout: float, memory_mb: int, require: str | None) -> list[list[dict]]:
    res = _runner(require)(RUNNER, stdin=json.dumps(jobs), timeout=timeout, memory_mb=memory_mb)
    if res.status == "ok" and not getattr(res, "stdout_truncated", False) and MARK in res.stdout:
        out = json.loads(res.stdout[res.stdout.rfind(MARK) + len(MARK) :])
        if isinstance(out, list) and len(out) == len(jobs):
            return [_job_results(job, r) for job, r in zip(jobs, out)]
    if len(jobs) > 1:  # bisect: the module that brought the sandbox down fails alone
        half = len(jobs) // 2
        return _run_batch(jobs[:half], timeout, memory_mb, require) + _run_batch(
            jobs[half:], timeout, memory_mb, require
        )
    why = f"sandbox: {res.status} (returncode {res.returncode}) {res.stderr[-200:]}".strip()
    return [[{"ok": False, "error": why}] * len(jobs[0]["calls"])]


def call_envs(
    jobs: Sequence[tuple[str, Sequence[tuple[str, Sequence[Any]]]]],
    *,
    limit: float = 1.0,
    timeout: float = 20.0,
    memory_mb: int = 256,
    batch: int = 32,
    stop_after_timeout: bool = False,
    require: str | None = None,
) -> list[list[dict]]:
    """Run ``(module code, [(method, args), ...])`` jobs in the sandbox, ``batch`` modules per process, at
    least at level ``require`` (None: the run's ``sandbox.require``; :mod:`reasonrl.rewards.sandbox.policy`);
    each call has ``limit`` seconds. Returns, per job, one result dict per call. ``stop_after_timeout``:
    once a module's call times out, its later calls fail at once without running (a validation that
    rejects the module on its first failure need not wait ``limit`` seconds for each of them)."""
    payload = [
        {
            "code": code,
            "calls": [[m, list(a)] for m, a in calls],
            "limit": limit,
            "stop_after_timeout": stop_after_timeout,
        }
        for code, calls in jobs
    ]
    out: list[list[dict]] = []
    for start in range(0, len(payload), batch):
        out += _run_batch(payload[start : start + batch], timeout, memory_mb, require)
    return out
