"""The black-box worker and critic of prompt-policy RL (spec envs-selfplay-eval.md 5 (c)), and the budget.

* :class:`Worker`: ``run(prompt, instance) -> (success in [0, 1], trace)``. A worker may add
  ``run_many(pairs)`` to take a batch at once (a local model generates them together). Built in: the
  frozen shipped model or any local HF model (:class:`ModelWorker`), or a user's callable
  (:class:`CallableWorker`: an HTTP client to a hosted LLM, a simulator).
* :class:`Critic`: ``critique(prompt, failed_traces) -> str``, what went wrong and what to change.
  Built in: :class:`FailureCritic` (no model: it quotes the first failure).
* :class:`WorkerCalls`: every worker call counted, and refused past a budget (0: none).
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Protocol, Sequence, runtime_checkable

from ..errors import UserError
from ..rollout import HFEngine, SamplingParams
from ..tasks import Item
from ..tasks.protocols import budget

__all__ = [
    "CallableWorker",
    "Critic",
    "FailureCritic",
    "ModelWorker",
    "Worker",
    "WorkerCalls",
    "load_worker",
    "worker_input",
]


@runtime_checkable
class Worker(Protocol):
    def run(self, prompt: str, instance: Item) -> tuple[float, str]: ...


@runtime_checkable
class Critic(Protocol):
    def critique(self, prompt: str, failed_traces: Sequence[str]) -> str: ...


def worker_input(prompt: str, instance: Item, template: str = "{prompt}\n{instance}") -> str:
    """What the worker reads: the instance alone when the prompt is empty, else ``template`` filled."""
    return (
        instance.prompt
        if not prompt.strip()
        else template.replace("{prompt}", prompt).replace("{instance}", instance.prompt)
    )


class WorkerCalls:
    """Counts worker calls (one per (prompt, instance) pair) and refuses a batch that would pass ``budget``."""

    def __init__(self, budget: int = 0):
        self.budget, self.calls = budget, 0

    def run(self, worker: Worker, pairs: Sequence[tuple[str, Item]]) -> list[tuple[float, str]]:
        if self.budget and self.calls + len(pairs) > self.budget:
            raise UserError(
                f"the worker budget of {self.budget} calls is spent ({self.calls} made, {len(pairs)} more "
                "asked): raise prompt_policy.max_worker_calls or train fewer steps"
            )
        many = getattr(worker, "run_many", None)
        out = list(many(list(pairs))) if many is not None else [worker.run(p, it) for p, it in pairs]
        if len(out) != len(pairs):
            raise UserError(f"the worker returned {len(out)} results for {len(pairs)} calls")
        self.calls += len(pairs)
        return [(float(s), str(t)) for s, t in out]


class CallableWorker:
    """A user's function ``fn(prompt, instance)`` returning (success, trace), or a bare success (bool/float)."""

    def __init__(self, fn: Callable[[str, Item], Any]):
        self.fn = fn

    def run(self, prompt: str, instance: Item) -> tuple[float, str]:
        out = self.fn(prompt, instance)
        success, trace = out if isinstance(out, tuple) else (out, "")
        if not 0.0 <= float(success) <= 1.0:
            raise UserError(
                f"worker {getattr(self.fn, '__name__', self.fn)!r} returned success {success!r}; it must be in [0, 1]"
            )
        return float(success), str(trace)


class ModelWorker:
    """A frozen local causal LM (the shipped base, an HF directory or hub id) answering the task's instances
    greedily with the prompt in front; success is the task's verifier; the trace names its answer."""

    def __init__(
        self,
        model,
        tokenizer,
        task: Any,
        template: str = "{prompt}\n{instance}",
        max_new_tokens: int | None = None,
        max_rows: int = 256,
    ):
        self.engine = HFEngine(model.eval().requires_grad_(False), tokenizer, max_rows=max_rows)
        self.task, self.template = task, template
        self.sampling = SamplingParams(temperature=0, max_new_tokens=max_new_tokens or budget(task))

    def run(self, prompt: str, instance: Item) -> tuple[float, str]:
        return self.run_many([(prompt, instance)])[0]

    def run_many(self, pairs: Sequence[tuple[str, Item]]) -> list[tuple[float, str]]:
        import torch

        with torch.no_grad():
            ro = self.engine.generate([worker_input(p, it, self.template) for p, it in pairs], 1, self.sampling)
        out = []
        for (_, it), text in zip(pairs, ro.texts):
            ok = float(self.task.verify(text, it.answer, it.meta))
            out.append((ok, f"{it.key} gave {self.task.extract_answer(text)} (want {it.answer})"))
        return out


def load_worker(spec: str, task: Any, template: str = "{prompt}\n{instance}") -> Worker:
    """``base`` (the shipped model), a model directory or hub id, or ``module:attr`` (a Worker, or a function
    for :class:`CallableWorker`)."""
    if ":" in spec and not spec.startswith(("tiny:", "/", ".")):
        mod, _, attr = spec.partition(":")
        try:
            obj = getattr(importlib.import_module(mod), attr)
        except (ImportError, AttributeError) as err:
            raise UserError(f"prompt_policy.worker={spec!r}: cannot import {attr!r} from {mod!r} ({err})") from err
        obj = obj() if isinstance(obj, type) else obj
        return obj if isinstance(obj, Worker) else CallableWorker(obj)
    from ..models import load_model

    model, tok = load_model(spec)
    return ModelWorker(model, tok, task, template)


class FailureCritic:
    """A critic without a model: how many instances failed and the first failure's trace."""

    def __init__(self, chars: int = 40):
        self.chars = chars

    def critique(self, prompt: str, failed_traces: Sequence[str]) -> str:
        if not failed_traces:
            return "all solved"
        return f"{len(failed_traces)} failed, e.g. {failed_traces[0][: self.chars]}"
