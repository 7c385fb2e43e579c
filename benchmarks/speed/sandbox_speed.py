"""Speed of the sandbox (``reasonrl.rewards.sandbox``): per-call overhead, how late the limits land,
and the pool's speed-up. These timings depend on the machine and its load, so tests/test_sandbox.py
only checks behaviour and this script reports the numbers (never asserts them).

    PYTHONPATH=src python benchmarks/speed/sandbox_speed.py [--calls 25] [--repeats 3]

Measured, all at the strongest isolation level available (``isolation()``) unless named:

- one call of ``pass``, interleaved with a bare ``python -I -S -c pass`` and a call at the
  ``rlimits`` level, so that drift in the machine's load hits all three alike;
- a ``while True: pass`` with ``timeout=0.5``: how long past the timeout the program is killed
  (``seconds - 0.5``) and the whole call returns (``wall_seconds - 0.5``);
- the same loop with ``cpu_seconds=1`` (and a far wall timeout): when SIGXCPU lands, in wall
  time and in the program's CPU time;
- a program whose detached grandchild sleeps 1 s: the call must return without waiting for it;
- the pool: 4 programs sleeping 0.5 s, and 40 ``pass`` programs, with 4 workers against 1;
- batches (issue 41: every job of a batch runs in its own fork of the warmed-up harness): the line
  tracer (``trace_programs``) on 64 grammar programs in one call against 1 program, and the
  environment runner (``call_envs``) on 32 starting environments x 4 renders against 1 module; the
  per-job cost is (time of the big batch - time of the single job) / (jobs - 1), with the medians;
  and EvoEnv's admission checks (``check_envs``: L2 twice and L3) of 8 starting environments.
  Run it with ``PYTHONPATH`` pointing at an older checkout to compare (the same public API).

``--sections`` picks some of ``per_call,limits,pool,batch`` (default: all).

Prints a table (milliseconds: median, 10th and 90th percentile) and writes every sample as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import signal
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

from reasonrl.rewards.sandbox import SandboxWarning, isolation, run_many, run_python

LOOP = "while True:\n    pass"
DETACHED = (
    "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
    "        time.sleep(1.0)\n        os._exit(0)\n    os._exit(0)\n"
)


def bare_interpreter() -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-I", "-S", "-c", "pass"], check=True)
    return time.perf_counter() - t0


def per_call(calls: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {
        "bare python -I -S -c pass": [],
        "run_python('pass')": [],
        "run_python('pass', level='rlimits')": [],
    }
    for _ in range(calls):
        out["bare python -I -S -c pass"].append(bare_interpreter())
        out["run_python('pass')"].append(run_python("pass").wall_seconds)
        out["run_python('pass', level='rlimits')"].append(run_python("pass", level="rlimits").wall_seconds)
    return out


def limits(repeats: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {
        "timeout=0.5: kill after the timeout": [],
        "timeout=0.5: call returns after the timeout": [],
        "cpu_seconds=1: SIGXCPU after (wall)": [],
        "cpu_seconds=1: CPU time used": [],
        "call with a detached 1 s grandchild": [],
    }
    for _ in range(repeats):
        res = run_python(LOOP, timeout=0.5)
        assert res.status == "timeout", res  # a wrong status would make the timing meaningless
        out["timeout=0.5: kill after the timeout"].append(res.seconds - 0.5)
        out["timeout=0.5: call returns after the timeout"].append(res.wall_seconds - 0.5)
        cpu = run_python(LOOP, timeout=60, cpu_seconds=1)
        assert (cpu.status, cpu.signal) == ("timeout", int(signal.SIGXCPU)), cpu
        out["cpu_seconds=1: SIGXCPU after (wall)"].append(cpu.seconds)  # longer than 1 s on a loaded machine
        out["cpu_seconds=1: CPU time used"].append(cpu.cpu_seconds)
        out["call with a detached 1 s grandchild"].append(run_python(DETACHED, timeout=3).wall_seconds)
    return out


def timed_pool(codes: list[str], workers: int) -> float:
    t0 = time.perf_counter()
    results = run_many(codes, workers=workers, timeout=5)
    assert all(r.ok for r in results), [r.status for r in results]
    return time.perf_counter() - t0


def pool(repeats: int) -> dict[str, list[float]]:
    sleepers, short = ["import time\ntime.sleep(0.5)"] * 4, ["pass"] * 40
    out: dict[str, list[float]] = {}
    for name, codes in (("4 x sleep(0.5)", sleepers), ("40 x pass", short)):
        for workers in (1, 4):
            out[f"run_many {name}, workers={workers}"] = [timed_pool(codes, workers) for _ in range(repeats)]
    return out


def batch_jobs() -> tuple[list[tuple[str, str]], list[tuple[str, list]]]:
    """64 programs of the code task's grammar (AZR's world) and 32 environment modules x 4 renders."""
    from reasonrl.tasks.code import CodeConfig
    from reasonrl.tasks.codegen import sample_program
    from reasonrl.tasks.evoenv import starting_envs

    rng = random.Random(0)
    programs = [sample_program(rng, CodeConfig(max_statements=3)) for _ in range(64)]
    envs = [code for _, code in starting_envs(True)]
    modules = [(envs[i % len(envs)], [("@render", (s, 1)) for s in range(1, 5)]) for i in range(32)]
    return programs, modules


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


BATCHES = (
    ("trace_programs", "1 program", "64 programs", 64),
    ("call_envs", "1 module x 4 renders", "32 modules x 4 renders", 32),
)


def batches(repeats: int) -> dict[str, list[float]]:
    """Wall seconds of each call, and the CPU seconds of its sandboxed program with every process it
    forked (``SandboxResult.cpu_seconds``: wait4 counts reaped descendants), which a loaded machine
    inflates far less than the wall time."""
    import reasonrl.rewards.sandbox as sandbox
    from reasonrl.tasks.codegen import trace_programs
    from reasonrl.tasks.env_check import check_envs
    from reasonrl.tasks.env_runtime import call_envs

    programs, modules = batch_jobs()
    cpu: list[float] = []
    real = sandbox.run_python

    def counted(*args, **kwargs):  # the callers import run_python from the package when they run
        res = real(*args, **kwargs)
        cpu.append(res.cpu_seconds or 0.0)
        return res

    calls = {"trace_programs": lambda jobs: trace_programs(jobs, cache=False), "call_envs": call_envs}
    out: dict[str, list[float]] = {}
    sandbox.run_python = counted
    try:
        for _ in range(repeats):
            cpu.clear()  # EvoEnv's admission of a step's 8 generated modules: L2 (twice) and L3, 3 batches
            reports = []
            out.setdefault("check_envs: 8 modules (L2 twice + L3)", []).append(
                timed(lambda: reports.extend(check_envs([code for code, _ in modules[:8]])))  # noqa: B023 - called at once
            )
            out.setdefault("check_envs: 8 modules (L2 twice + L3) (sandbox CPU)", []).append(sum(cpu))
            assert all(r.ok for r in reports), [r.reason for r in reports if not r.ok]
            for fn, one, many, n in BATCHES:
                jobs = programs if fn == "trace_programs" else modules
                for label, part in ((one, jobs[:1]), (many, jobs[:n])):
                    cpu.clear()
                    results = []
                    out.setdefault(f"{fn}: {label}", []).append(timed(lambda: results.extend(calls[fn](part))))  # noqa: B023 - called at once
                    out.setdefault(f"{fn}: {label} (sandbox CPU)", []).append(sum(cpu))
                    ok = (
                        [r["error"] is None for r in results]
                        if fn == "trace_programs"
                        else [r["ok"] for job in results for r in job]
                    )
                    assert all(ok) and len(cpu) == 1, f"{fn}: a job failed or the batch was split"
    finally:
        sandbox.run_python = real
    return out


def per_job(rows: dict[str, dict]) -> dict[str, float]:
    """Milliseconds per job of a batch, wall and sandbox CPU: (big batch - single job) / (jobs - 1), medians."""
    out = {}
    for fn, one, many, n in BATCHES:
        for kind in ("", " (sandbox CPU)"):
            big, small = rows[f"{fn}: {many}{kind}"]["median_ms"], rows[f"{fn}: {one}{kind}"]["median_ms"]
            out[f"{fn} ms/job{kind or ' (wall)'}"] = (big - small) / (n - 1)
    return out


def summary(samples: list[float]) -> dict[str, float]:
    p10, p90 = (
        (min(samples), max(samples))
        if len(samples) < 2
        else statistics.quantiles(samples, n=10, method="inclusive")[::8]
    )
    return {"median_ms": statistics.median(samples) * 1e3, "p10_ms": p10 * 1e3, "p90_ms": p90 * 1e3, "n": len(samples)}


def speed_ups(rows: dict[str, dict]) -> dict[str, float]:
    """Median time with 1 worker over median time with 4, per pool workload."""
    return {
        name: rows[f"run_many {name}, workers=1"]["median_ms"] / rows[f"run_many {name}, workers=4"]["median_ms"]
        for name in ("4 x sleep(0.5)", "40 x pass")
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=25, help="interleaved calls for the per-call overhead")
    ap.add_argument("--repeats", type=int, default=3, help="repeats of the limit and pool measurements")
    ap.add_argument("--batch-repeats", type=int, default=5, help="repeats of the batch measurements")
    ap.add_argument("--sections", default="per_call,limits,pool,batch", help="comma-separated subset to measure")
    ap.add_argument("--json", default="benchmarks/results/sandbox_speed.json")
    args = ap.parse_args()
    sections = set(args.sections.split(","))
    info = isolation()
    load_before = os.getloadavg()
    samples: dict[str, list[float]] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SandboxWarning)  # the rlimits level is forced on purpose
        for name, measure, reps in (
            ("per_call", per_call, args.calls),
            ("limits", limits, args.repeats),
            ("pool", pool, args.repeats),
            ("batch", batches, args.batch_repeats),
        ):
            if name in sections:
                samples.update(measure(reps))
    rows = {name: summary(values) for name, values in samples.items()}
    print(f"sandbox isolation: {info.level}; {os.cpu_count()} CPUs; load average {load_before[0]:.1f} at the start")
    print(f"{'measurement':48s} {'median ms':>10s} {'p10 ms':>8s} {'p90 ms':>8s} {'n':>4s}")
    for name, row in rows.items():
        print(f"{name:48s} {row['median_ms']:10.0f} {row['p10_ms']:8.0f} {row['p90_ms']:8.0f} {row['n']:4d}")
    report = {
        "command": " ".join([f"PYTHONPATH={os.environ.get('PYTHONPATH', '')}", "python", *sys.argv]),
        "machine": {
            "cpus": os.cpu_count(),
            "load_average_start": load_before,
            "load_average_end": os.getloadavg(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "isolation": info.level,
        },
        "summary": rows,
        "samples_s": samples,
    }
    if "per_call" in sections:
        report["overhead_ms"] = rows["run_python('pass')"]["median_ms"] - rows["bare python -I -S -c pass"]["median_ms"]
        print(f"per-call overhead over a bare interpreter (medians): {report['overhead_ms']:.0f} ms")
    if "pool" in sections:
        report["pool_speed_up"] = speed_ups(rows)
        print(
            "pool speed-up, 4 workers over 1: " + ", ".join(f"{k} {v:.1f}x" for k, v in report["pool_speed_up"].items())
        )
    if "batch" in sections:
        report["per_job_ms"] = per_job(rows)
        print("per job of a batch (medians): " + ", ".join(f"{k} {v:.2f}" for k, v in report["per_job_ms"].items()))
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
