"""What ``bench_vs_trl.py`` needs beside the two trainers: a chat-format arithmetic task both can run,
phase clocks that time the same phases in both frameworks from the outside (neither is edited), and
a sampler of the process's resident memory.

Phases (seconds per step, wall clock and CPU): ``generate`` (drawing prompts and sampling the
completions), ``reward`` (the reward calls; for reasonrl also the advantages), ``forward`` (the training
forward that gives the log-probs the loss needs, with gradients), ``backward`` (``loss.backward()``) and
``rest`` (the step less the four: optimiser, data handling, anything else).
"""

from __future__ import annotations

import ctypes
import functools
import json
import random
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

SYSTEM = "You are a helpful math assistant. Solve the problem and end with the final answer as a number."


def write_chat_arithmetic(folder: Path, n_train: int = 2000, n_test: int = 500, seed: int = 0) -> tuple[Path, Path]:
    """Two JSONL files of chat prompts (a system turn and ``What is a + b?``, a and b in [10, 99]) with
    their answers; train and test disjoint by problem. What the benchmark trains on until the chat task
    of issue 42 (item 2) lands; its settings are recorded in the JSON."""
    rng, seen, rows = random.Random(seed), set(), []
    while len(rows) < n_train + n_test:
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        if (a, b) in seen:
            continue
        seen.add((a, b))
        rows.append(
            {
                "prompt": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"What is {a} + {b}?"}],
                "answer": str(a + b),
            }
        )
    folder.mkdir(parents=True, exist_ok=True)
    train, test = folder / "chat_arithmetic_train.jsonl", folder / "chat_arithmetic_test.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in rows[:n_train]))
    test.write_text("".join(json.dumps(r) + "\n" for r in rows[n_train:]))
    return train, test


class Phases:
    """Wall-clock and CPU seconds spent in each phase since the last :meth:`take`, from wrappers
    installed by :meth:`wrap` (``phase`` and ``phase_cpu``). CPU seconds are this process's
    (``time.process_time``): on a machine shared with other jobs they count the work done, where the
    wall clock also counts the waiting for a core. A phase entered inside another (a reward call made
    while generating) is counted in the outer one only."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self._depth = 0

    def take(self) -> dict[str, float]:
        out, self.seconds = self.seconds, {}
        return out

    def timed(self, phase: str, fn: Callable) -> Callable:
        @functools.wraps(fn)  # the same name (TRL logs a reward function by its __name__)
        def wrapper(*args, **kwargs):
            t0, c0 = time.perf_counter(), time.process_time()
            self._depth += 1
            try:
                return fn(*args, **kwargs)
            finally:
                self._depth -= 1
                if self._depth == 0:
                    for key, value in ((phase, time.perf_counter() - t0), (f"{phase}_cpu", time.process_time() - c0)):
                        self.seconds[key] = self.seconds.get(key, 0.0) + value

        return wrapper

    @contextmanager
    def wrap(self, targets: list[tuple[Any, str, str]]) -> Iterator["Phases"]:
        """Replace ``getattr(owner, name)`` by a timed version for the block, for each (owner, name, phase);
        ``torch.Tensor.backward`` is always timed as ``backward``."""
        targets = targets + [(torch.Tensor, "backward", "backward")]
        saved = [(owner, name, name in vars(owner), vars(owner).get(name)) for owner, name, _ in targets]
        for owner, name, phase in targets:
            setattr(owner, name, self.timed(phase, getattr(owner, name)))
        try:
            yield self
        finally:
            for owner, name, own, fn in reversed(saved):
                if own:
                    setattr(owner, name, fn)
                else:  # an instance that used its class's method: back to that
                    delattr(owner, name)


PHASES = ("generate", "reward", "forward", "backward")


def step_phases(wall: float, cpu: float, phases: dict[str, float]) -> dict[str, float]:
    """One step's split, wall clock and CPU: the four timed phases and the rest of the step."""
    out = {
        "s": wall,
        "cpu": cpu,
        **{k: phases.get(k, 0.0) for k in PHASES},
        **{f"{k}_cpu": phases.get(f"{k}_cpu", 0.0) for k in PHASES},
    }
    out["rest"] = wall - sum(out[k] for k in PHASES)
    out["rest_cpu"] = cpu - sum(out[f"{k}_cpu"] for k in PHASES)
    return out


def rss_bytes() -> int:
    """The process's resident set size now (``/proc/self/statm``, Linux)."""
    return int(Path("/proc/self/statm").read_text().split()[1]) * 4096


def release_memory() -> None:
    """Return freed heap pages to the OS (glibc ``malloc_trim``) so one run's peak does not stay the next's floor."""
    import gc

    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)


class PeakRSS:
    """The highest resident set size seen while the block runs (sampled every ``every`` seconds) and at its start."""

    def __init__(self, every: float = 0.02):
        self.every, self.start, self.peak = every, 0, 0
        self._stop = threading.Event()

    def __enter__(self) -> "PeakRSS":
        release_memory()
        self.start = self.peak = rss_bytes()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def _watch(self) -> None:
        while not self._stop.wait(self.every):
            self.peak = max(self.peak, rss_bytes())

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_bytes())
