"""The hostile corpus of issue 41 (batches): model-written programs and environment modules that patch
builtins, classes, ``sys.modules``, stdlib functions and random state, or attack the batch's result
channel, must not change ANOTHER job's result. Every job of a batch runs in its own forked copy of the
warmed-up harness (reasonrl.rewards.sandbox.jobs), so each starts from the same pristine state.

Each test runs a hostile job first and a victim second in ONE sandbox batch and compares the victim's
result with what it gives alone (worked out by hand in each test)."""

from __future__ import annotations

import json

import pytest

from reasonrl.tasks.azr_world import validate_programs
from reasonrl.tasks.codegen import MARK, trace_programs
from reasonrl.tasks.env_runtime import call_envs

READ_INT = "a=int(input())\nprint(a+1)\n"  # on stdin 5 it prints 6


def outputs(pairs):
    return [(r["output"], r["error"]) for r in trace_programs(pairs, cache=False)]


def test_a_program_patching_builtins_int_does_not_change_the_next_program():
    """Issue 41 item 1: the proposal passes AZR's validation (``builtins`` is not a banned name) and
    before the fix the next program of the batch printed 43 (int() -> 42, then +1)."""
    patch = "import builtins\nbuiltins.int = lambda *x: 42\nprint(1)\n"
    verdicts = validate_programs([(patch, ""), (READ_INT, "5")])
    assert [(v.ok, v.output) for v in verdicts] == [(True, "1"), (True, "6")]


@pytest.mark.parametrize(
    "patch, victim, alone",
    [
        # a sys.modules entry replaced by a fake module: the victim's `import math` finds the real one (sqrt(16) = 4.0)
        (
            "import sys, types\nm = types.ModuleType('math')\nm.sqrt = lambda x: 7\nsys.modules['math'] = m\n",
            "import math\nprint(math.sqrt(16))\n",
            "4.0\n",
        ),
        # a stdlib class attribute: Fraction(1, 2) prints 1/2
        (
            "import fractions\nfractions.Fraction.__str__ = lambda self: 'X'\n",
            "from fractions import Fraction\nprint(Fraction(1, 2))\n",
            "1/2\n",
        ),
        # a stdlib module function the harness itself uses to send results (json.dumps)
        ("import json\njson.dumps = lambda *a, **k: '\"X\"'\n", READ_INT, "6\n"),
        # the global random generator's functions: random.random is no longer the constant
        ("import random\nrandom.random = lambda: 0.5\n", "import random\nprint(random.random() == 0.5)\n", "False\n"),
    ],
)
def test_patches_of_modules_classes_and_functions_stay_in_their_program(patch, victim, alone):
    assert outputs([(patch, ""), (victim, "5")])[1] == (alone, None)


def test_a_seeded_global_random_state_does_not_leak_into_the_next_program():
    """After random.seed(1) the generator's state is seed 1's; a fresh program's state (seeded by the
    interpreter from the OS) is another one: printed False (equal only with probability ~2**-19937)."""
    victim = "import random\nr = random.Random()\nr.seed(1)\nprint(random.getstate() == r.getstate())\n"
    assert outputs([("import random\nrandom.seed(1)\n", ""), (victim, "")])[1] == ("False\n", None)


def test_a_program_that_exits_the_process_fails_alone():
    """os._exit ends the job's own process: before, it ended the whole batch's harness (no results at all)."""
    (out0, err0), (out1, err1) = outputs([("import os\nos._exit(0)\n", ""), (READ_INT, "5")])
    assert out0 == "" and "ended without a result" in err0
    assert (out1, err1) == ("6\n", None)


def test_a_program_cannot_forge_the_batch_results_on_stdout():
    """The program writes a forged result list for the whole batch on fd 1, then points fd 1 elsewhere so
    that the harness's own result line would be lost: the results travel on a channel it cannot reach."""
    forged = json.dumps(
        [{"output": "", "steps": [], "error": None}, {"output": "FORGED\n", "steps": [], "error": None}]
    )
    attack = f"import os\nos.write(1, ({MARK!r} + {forged!r} + '\\n').encode())\nos.dup2(2, 1)\n"
    assert outputs([(attack, ""), (READ_INT, "5")])[1] == ("6\n", None)


def test_a_process_left_behind_by_a_program_is_gone_before_the_next_program_runs():
    """The first program leaves a detached grandchild that writes a file in the batch's private /tmp
    after 0.3 s; the next program looks for it after 0.8 s. Before, the grandchild lived on."""
    leave = (
        "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
        "        time.sleep(0.3)\n        open('/tmp/left-behind', 'w').write('x')\n        os._exit(0)\n"
        "    os._exit(0)\nos.wait()\n"
    )
    look = "import os, time\ntime.sleep(0.8)\nprint(os.path.exists('/tmp/left-behind'))\n"
    assert outputs([(leave, ""), (look, "")])[1] == ("False\n", None)


def test_a_program_flooding_fd_1_does_not_split_the_batch():
    """What a program writes to fd 1 no longer lands before the batch's results: before, 100 kB there
    pushed the results past the 64 kB output cap and the batch was re-run in halves."""
    from reasonrl.rewards.sandbox import run_python

    calls = []

    def runner(code, **kw):
        calls.append(1)
        return run_python(code, **kw)

    flood = "import os\nos.write(1, b'x' * 100_000)\n"
    got = trace_programs([(flood, ""), (READ_INT, "5")], cache=False, runner=runner)
    assert [(r["output"], r["error"]) for r in got] == [("", None), ("6\n", None)] and len(calls) == 1


ENV_HEAD = "class E(Env):\n    name = 'e'\n    def reference(self, inst):\n        return 0\n"
CHOICES = ENV_HEAD + "    def sample(self, seed, difficulty):\n        return R(seed).choices(range(10), k=4)\n"


def test_an_environment_patching_random_choices_does_not_change_another_environments_instances():
    """Issue 41 item 1: EvoEnv modules share a sandbox process; before the fix [1, 8, 7, 2] became [1, 1, 1, 1]."""
    patch = ENV_HEAD + (
        "    def sample(self, seed, difficulty):\n        return 0\n"
        "random.Random.choices = lambda self, population, k=1, **kw: [population[1]] * k\n"
    )
    alone = call_envs([(CHOICES, [("sample", (3, 0))])])[0][0]
    after = call_envs([(patch, [("sample", (0, 0))]), (CHOICES, [("sample", (3, 0))])])[1][0]
    assert alone["ok"] and after == alone
    assert alone["value"] == __import__("random").Random(3).choices(range(10), k=4)  # the host's own draw


def test_an_environment_patching_random_seeding_does_not_change_another_environments_instances():
    """random.Random.seed patched to always seed 0: every later R(seed) would draw seed 0's numbers."""
    patch = ENV_HEAD + (
        "    def sample(self, seed, difficulty):\n        return 0\n"
        "_seed = random.Random.seed\n"
        "random.Random.seed = lambda self, a=None, version=2: _seed(self, 0)\n"
    )
    victim = ENV_HEAD + "    def sample(self, seed, difficulty):\n        return R(seed).randint(0, 10**9)\n"
    got = call_envs([(patch, [("sample", (0, 0))]), (victim, [("sample", (3, 0))])])[1][0]
    assert got == {"ok": True, "value": __import__("random").Random(3).randint(0, 10**9)}


def test_the_host_type_checks_each_jobs_own_result():
    """A job runs in the process that sends its result, so it can forge that result: the host keeps only
    well-typed fields (worked out by hand: each bad field below makes the whole result an error)."""
    from reasonrl.tasks import codegen, env_runtime

    good = {"output": "6\n", "steps": [[1, [["a", "5"]]]], "error": None, "transient": True}
    assert codegen._checked(good) == {"output": "6\n", "steps": [[1, [["a", "5"]]]], "error": None}
    for bad in (
        {**good, "error": 123},
        {**good, "output": ["6"]},
        {**good, "steps": [[1, [["a", 5]]]]},
        {**good, "steps": [["1", []]]},
        {**good, "steps": "L1"},
        [good],
        None,
    ):
        assert codegen._checked(bad)["error"] == "the program sent back a malformed result"
    assert env_runtime._checked("score", {"ok": True, "value": 1}) == {"ok": True, "value": 1}
    assert env_runtime._checked("score", {"ok": False, "error": "E"}) == {"ok": False, "error": "E"}
    render = {"instance": [1], "prompt": "p", "reference": "3"}
    assert env_runtime._checked("@render", {"ok": True, "value": render})["ok"]
    for method, bad in (
        ("score", {"ok": True, "value": 1.5}),
        ("score", {"ok": True, "value": True}),
        ("score", {"ok": True, "value": float("nan")}),
        ("score", {"ok": "yes", "value": 1}),
        ("@render", {"ok": True, "value": {**render, "prompt": 7}}),
        ("@render", {"ok": True, "value": {**render, "reference": 3}}),
        ("@render", {"ok": True, "value": {"prompt": "p"}}),
        ("sample", {"ok": False, "error": 3}),
    ):
        assert env_runtime._checked(method, bad) == {
            "ok": False,
            "error": f"the module sent back a malformed {method} result",
        }
