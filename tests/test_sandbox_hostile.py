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


@pytest.mark.parametrize("patch, victim, alone", [
    # a sys.modules entry replaced by a fake module: the victim's `import math` finds the real one (sqrt(16) = 4.0)
    ("import sys, types\nm = types.ModuleType('math')\nm.sqrt = lambda x: 7\nsys.modules['math'] = m\n",
     "import math\nprint(math.sqrt(16))\n", "4.0\n"),
    # a stdlib class attribute: Fraction(1, 2) prints 1/2
    ("import fractions\nfractions.Fraction.__str__ = lambda self: 'X'\n",
     "from fractions import Fraction\nprint(Fraction(1, 2))\n", "1/2\n"),
    # a stdlib module function the harness itself uses to send results (json.dumps)
    ("import json\njson.dumps = lambda *a, **k: '\"X\"'\n", READ_INT, "6\n"),
    # the global random generator's functions: random.random is no longer the constant
    ("import random\nrandom.random = lambda: 0.5\n", "import random\nprint(random.random() == 0.5)\n", "False\n"),
])
def test_patches_of_modules_classes_and_functions_stay_in_their_program(patch, victim, alone):
    assert outputs([(patch, ""), (victim, "5")])[1] == (alone, None)


def test_a_seeded_global_random_state_does_not_leak_into_the_next_program():
    """After random.seed(1) the generator's state is seed 1's; a fresh program's state (seeded by the
    interpreter from the OS) is another one: printed False (equal only with probability ~2**-19937)."""
    victim = ("import random\nr = random.Random()\nr.seed(1)\n"
              "print(random.getstate() == r.getstate())\n")
    assert outputs([("import random\nrandom.seed(1)\n", ""), (victim, "")])[1] == ("False\n", None)


def test_a_program_that_exits_the_process_fails_alone():
    """os._exit ends the job's own process: before, it ended the whole batch's harness (no results at all)."""
    (out0, err0), (out1, err1) = outputs([("import os\nos._exit(0)\n", ""), (READ_INT, "5")])
    assert out0 == "" and "ended without a result" in err0
    assert (out1, err1) == ("6\n", None)


def test_a_program_cannot_forge_the_batch_results_on_stdout():
    """The program writes a forged result list for the whole batch on fd 1, then points fd 1 elsewhere so
    that the harness's own result line would be lost: the results travel on a channel it cannot reach."""
    forged = json.dumps([{"output": "", "steps": [], "error": None},
                         {"output": "FORGED\n", "steps": [], "error": None}])
    attack = f"import os\nos.write(1, ({MARK!r} + {forged!r} + '\\n').encode())\nos.dup2(2, 1)\n"
    assert outputs([(attack, ""), (READ_INT, "5")])[1] == ("6\n", None)


ENV_HEAD = "class E(Env):\n    name = 'e'\n    def reference(self, inst):\n        return 0\n"
CHOICES = ENV_HEAD + "    def sample(self, seed, difficulty):\n        return R(seed).choices(range(10), k=4)\n"


def test_an_environment_patching_random_choices_does_not_change_another_environments_instances():
    """Issue 41 item 1: EvoEnv modules share a sandbox process; before the fix [1, 8, 7, 2] became [1, 1, 1, 1]."""
    patch = ENV_HEAD + ("    def sample(self, seed, difficulty):\n        return 0\n"
                        "random.Random.choices = lambda self, population, k=1, **kw: [population[1]] * k\n")
    alone = call_envs([(CHOICES, [("sample", (3, 0))])])[0][0]
    after = call_envs([(patch, [("sample", (0, 0))]), (CHOICES, [("sample", (3, 0))])])[1][0]
    assert alone["ok"] and after == alone
    assert alone["value"] == __import__("random").Random(3).choices(range(10), k=4)  # the host's own draw


def test_an_environment_patching_random_seeding_does_not_change_another_environments_instances():
    """random.Random.seed patched to always seed 0: every later R(seed) would draw seed 0's numbers."""
    patch = ENV_HEAD + ("    def sample(self, seed, difficulty):\n        return 0\n"
                        "_seed = random.Random.seed\n"
                        "random.Random.seed = lambda self, a=None, version=2: _seed(self, 0)\n")
    victim = ENV_HEAD + "    def sample(self, seed, difficulty):\n        return R(seed).randint(0, 10**9)\n"
    got = call_envs([(patch, [("sample", (0, 0))]), (victim, [("sample", (3, 0))])])[1][0]
    assert got == {"ok": True, "value": __import__("random").Random(3).randint(0, 10**9)}
