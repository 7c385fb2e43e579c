"""Mutation score of the core modules (issue 45 item 1): do the tests notice when the code is changed?

The tool is **mutmut** (3.x, BSD): it mutates a copy of ``src`` (``mutants/``, the checkout is never
touched), runs each mutant by forking an already-imported test process (``process_isolation=forkserver``,
the mode mutmut documents for torch) instead of starting pytest anew, and picks the tests per mutant from
the functions each test actually called in a stats run (test selection by coverage). cosmic-ray mutates
the file in place and runs the whole test command per mutant, a fresh ``import torch`` (~4 s here) each
time: too slow for a bounded run on 2 shared cores.

One run per listed module, one after another, each in its own scratch folder (``--work``, default
``/tmp/reasonrl-mutation/<module>``) holding a copy of ``src/``, ``tests/`` and ``pyproject.toml`` of
``--root`` and a ``setup.cfg`` with the ``[mutmut]`` section (mutmut 3.8's keys: ``source_paths``,
``only_mutate``, ``pytest_add_cli_args_test_selection``, ``process_isolation``). Only the module's own
test files run (``TESTS``), with the default tier's ``-m 'not slow'``; each run gets ``--max-children``
workers (default 1) and is stopped after ``--minutes`` (default 10): the mutants left unchecked are
reported as ``unchecked``, not counted.

Counting: ``killed`` = a test failed (or the mutant timed out: mutmut's timeout is 15x the tests' clean
time, so a mutant that hangs the code is caught); ``survived`` = every selected test passed, plus the
mutants of functions no selected test calls ("no tests"); mutants named in ``SIGNATURE`` (a changed default
argument, caught by a test that reads the signature, which mutmut's trampoline keeps as the original's) count
as killed; mutants named in ``EQUIVALENT`` (a mutant that cannot change behaviour, each with one line why) are
left out of both and listed.
``score = killed / (killed + survived)``.

    nice -n 10 env PYTHONPATH=src python benchmarks/mutation.py                 # every module
    nice -n 10 env PYTHONPATH=src python benchmarks/mutation.py eval/metrics.py # one
    python benchmarks/mutation.py --root /tmp/before --label before ...         # an older checkout

Writes (merging into) ``benchmarks/results/mutation.json``: ``{"modules": {module: {"score", "killed",
"survived", "equivalent": [...], "survivors": [...], "unchecked", "seconds"}}}``; ``--label before``
stores the run under ``"before"`` instead.

On 2 cores shared with six other jobs at ``nice -n 10`` a mutant costs 1-3 s (a fork, the selected tests),
so a 6-10 minute bound checks 100-230 mutants: most listed files finish, a large one (``eval/paired.py``,
425 mutants) is cut and reports the rest as ``unchecked``. A whole package (``advantages/``: 1,338
mutants) does not fit one bound: its files are listed one by one.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "mutation.json"

# the unit-test files of the advantage estimators and shapers, and of the losses (no e2e run, no model fixture)
_ADV_LOSS_TESTS = (
    "test_advantages.py", "test_scored_advantages.py", "test_shapers.py", "test_cipo.py", "test_sapo.py",
    "test_gae.py", "test_drafts.py", "test_selfteach_math.py", "test_teacher_losses.py", "test_losses.py",
    "test_losses_more.py", "test_anchors_corr.py", "test_divergence.py", "test_mismatch.py", "test_fest.py",
    "test_vpd_math.py", "test_ssopd_runaway.py", "test_balance_math.py", "test_balance_residual.py",
    "test_stride.py",
    # written for the survivors of the first run (issue 45)
    "test_buckets.py", "test_estimators_edges.py", "test_scored_edges.py", "test_steps_edges.py",
    "test_anchors_edges.py", "test_anchors_sage_edges.py", "test_selfteach_edges.py", "test_corr_edges.py",
    "test_teacher_loss_edges.py", "test_loss_devices.py", "test_shapers_edges.py", "test_subgroups_edges.py",
    "test_value_loss_edges.py", "test_mismatch_edges.py", "test_aggregate_edges.py", "test_vpd_edges.py",
    "test_policy_loss_edges.py", "test_distill_losses_edges.py", "test_advantages_last_edges.py",
)  # fmt: skip

# module (under src/reasonrl/; a folder ends in "/": every file in it, one run) -> the test files that exercise it
TESTS: dict[str, tuple[str, ...]] = {
    "advantages/gae.py": ("test_gae.py",),  # the GAE
    "advantages/estimators.py": ("test_advantages.py",),
    "losses/balance.py": (
        "test_balance_math.py",
        "test_balance_residual.py",
        "test_loss_devices.py",
    ),  # trajectory balance
    "losses/policy.py": ("test_losses.py", "test_losses_more.py"),
    "losses/kl.py": ("test_losses.py",),
    "losses/value.py": ("test_gae.py",),
    "losses/aggregate.py": ("test_losses.py", "test_losses_more.py"),
    "eval/metrics.py": ("test_eval_metrics.py",),
    "eval/paired.py": ("test_paired.py", "test_paired_edges.py", "test_compare_passk.py"),
    "rewards/answers.py": (
        "test_rewards.py",
        "test_answer_extractors.py",
        "test_reward_options.py",
        "test_physics.py",
        "test_word_math.py",
    ),
    "advantages/": _ADV_LOSS_TESTS,  # every estimator and shaper file
    "losses/": _ADV_LOSS_TESTS,  # every loss file
    "rewards/match.py": ("test_rewards.py",),  # the math reward (numeric, exact_match)
    "population/operators.py": ("test_population.py",),  # the LoRA population operators
    # the sandbox's limits and result parsing (classify): the pure tests only (the others start sandboxes, and
    # the uid-level ones a fresh `python3 -I` on the checkout, which cannot import mutmut's trampolines)
    "rewards/sandbox/limits.py": (
        "test_sandbox_limits.py",
        "test_sandbox.py::test_classify_by_hand",
        "test_sandbox.py::test_limits_validation_and_cpu_default",
    ),
}

# "<mutmut mutant name>": "why it cannot change behaviour" (one line each), and "<mutant>": the test that catches a
# changed default argument in the source (mutmut calls the mutant through a trampoline with the original's
# signature, so a test of the documented default sees the original there): data, in mutation_equivalents.json
_LISTS = json.loads((ROOT / "benchmarks" / "mutation_equivalents.json").read_text())
EQUIVALENT: dict[str, str] = _LISTS["equivalent"]
SIGNATURE: dict[str, str] = _LISTS["signature"]

KILLED = {1, 3, 36, 24, -24, 152, 255}  # a failing test, pytest's internal error, or a timeout
SURVIVED = {0, 5, 33}  # every test passed, or no selected test reaches the function


def prepare(root: Path, module: str, work: Path) -> None:
    """A scratch folder with a copy of ``root``'s src, tests and pyproject and the run's setup.cfg."""
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    for name in ("src", "tests"):
        shutil.copytree(root / name, work / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(root / "pyproject.toml", work / "pyproject.toml")
    tests = [t.split("::")[0] for t in TESTS[module] if not t.startswith("-")]  # "file.py::test" picks one test
    missing = [t for t in tests if not (root / "tests" / t).is_file()]
    if missing:
        raise SystemExit(f"mutation: {module}: no test file {', '.join(missing)} under {root / 'tests'}")
    target = f"src/reasonrl/{module}" + ("*" if module.endswith("/") else "")
    files = [t if t.startswith("-") else f"tests/{t}" for t in TESTS[module]]  # "-..." entries: pytest options
    selection = "\n    ".join(["-m", "not slow", "-p", "no:cacheprovider"] + files)
    (work / "setup.cfg").write_text(
        "[mutmut]\nsource_paths = src\n"
        f"only_mutate =\n    {target}\n"
        f"pytest_add_cli_args_test_selection =\n    {selection}\n"
        "process_isolation = fork\nuse_git_change_detection = false\n"
    )


def collect(work: Path, module: str) -> dict:
    """Counts from mutmut's ``.meta`` files of the module."""
    base = work / "mutants" / "src" / "reasonrl"
    metas = sorted(base.glob(module + "**/*.py.meta" if module.endswith("/") else module + ".meta"))
    killed, survivors, unchecked, equivalent = 0, [], 0, []
    files: dict[str, list[int]] = {}  # file -> [killed, survived] (a folder's run)
    for meta in metas:
        row = files.setdefault(str(meta.relative_to(base)).removesuffix(".meta"), [0, 0])
        for name, code in json.loads(meta.read_text())["exit_code_by_key"].items():
            if name in SIGNATURE and code in SURVIVED:
                killed += 1
                row[0] += 1
            elif name in EQUIVALENT:
                equivalent.append({"mutant": name, "why": EQUIVALENT[name]})
            elif code is None:
                unchecked += 1
            elif code in KILLED:
                killed += 1
                row[0] += 1
            elif code in SURVIVED:
                survivors.append(name)
                row[1] += 1
            else:
                raise SystemExit(f"mutation: {name}: mutmut exit code {code} (suspicious/segfault): look at it")
    n = killed + len(survivors)
    by_file = {f: {"score": round(k / (k + v), 4), "killed": k, "survived": v} for f, (k, v) in files.items() if k + v}
    return {
        **({"files": by_file} if module.endswith("/") else {}),
        "score": round(killed / n, 4) if n else None,
        "killed": killed,
        "survived": len(survivors),
        "equivalent": equivalent,
        "survivors": survivors,
        "unchecked": unchecked,
    }


def run_module(root: Path, module: str, work: Path, minutes: float, children: int) -> dict:
    prepare(root, module, work)
    mutmut = Path(sys.executable).with_name("mutmut")
    t0 = time.monotonic()
    env = {k: v for k, v in __import__("os").environ.items() if k != "PYTHONPATH"}  # mutmut puts mutants/src first
    env["OMP_NUM_THREADS"] = "1"
    try:
        proc = subprocess.run(
            [str(mutmut), "run", "--max-children", str(children)],
            check=False,
            cwd=work,
            env=env,
            timeout=minutes * 60,
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            print(proc.stdout[-3000:], proc.stderr[-3000:], file=sys.stderr)
    except subprocess.TimeoutExpired:
        print(f"mutation: {module}: stopped after {minutes} min", file=sys.stderr)
    row = collect(work, module)
    row["seconds"] = round(time.monotonic() - t0, 1)
    return row


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("modules", nargs="*", help=f"default: all of {', '.join(TESTS)}")
    ap.add_argument("--root", type=Path, default=ROOT, help="the checkout whose src and tests are measured")
    ap.add_argument("--work", type=Path, default=Path("/tmp/reasonrl-mutation"))
    ap.add_argument("--minutes", type=float, default=10.0, help="stop each module's run after this long")
    ap.add_argument("--max-children", type=int, default=1)
    ap.add_argument("--label", default="modules", help="the key of mutation.json the rows go under")
    ap.add_argument("--json", type=Path, default=OUT)
    ap.add_argument("--recount", action="store_true", help="no run: count the last run's results again (EQUIVALENT)")
    a = ap.parse_args(argv)
    unknown = [m for m in a.modules if m not in TESTS]
    if unknown:
        raise SystemExit(f"mutation: unknown module {unknown[0]!r}; listed: {', '.join(TESTS)}")
    for module in a.modules or list(TESTS):
        work = a.work / module.strip("/").replace("/", "_")
        data = json.loads(a.json.read_text()) if a.json.is_file() else {}
        if a.recount:
            row = {**collect(work, module), "seconds": data.get(a.label, {}).get(module, {}).get("seconds")}
        else:
            row = run_module(a.root.resolve(), module, work, a.minutes, a.max_children)
            data = json.loads(a.json.read_text()) if a.json.is_file() else {}
        data.setdefault(a.label, {})[module] = row
        a.json.write_text(json.dumps(data, indent=1) + "\n")
        print(module, {k: v for k, v in row.items() if k != "survivors"}, flush=True)


if __name__ == "__main__":
    main()
