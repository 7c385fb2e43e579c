"""``sandbox.require`` (issue 41 item 2): the weakest sandbox level a run accepts for model-written code,
checked before anything loads, and passed to every sandbox call that runs such code.

This machine gives ``namespaces``; a weaker machine is faked by replacing the probe's answer."""

from __future__ import annotations

import pytest

from reasonrl.loop import run as run_module
from reasonrl.config import run_checks
from reasonrl.commands.common import checked_run
from reasonrl.config.train import TrainConfig
from reasonrl.envs import CodeActEnv
from reasonrl.errors import UserError
from reasonrl.recipes import get_recipe
from reasonrl.rewards.sandbox import FEATURES, Isolation, SandboxUnavailable, core, required_level, requiring
from reasonrl.rewards.sandbox import session as session_module
from reasonrl.rewards.sandbox.levels import MISSING
from reasonrl.config.sections import SandboxOpts
from reasonrl.tasks import BUILTIN
from reasonrl.tasks.codegen import trace_programs
from reasonrl.tasks.env_runtime import call_envs

WEAK = Isolation(
    "rlimits",
    FEATURES["rlimits"],
    MISSING["rlimits"],
    {"namespaces": "needs root", "uid": "needs root to switch to the sandbox uid"},
)


@pytest.fixture
def weak_host(monkeypatch):
    """The probe reports rlimits as the strongest level (a host without namespaces, not root)."""
    monkeypatch.setattr(run_checks, "isolation", lambda level="auto": WEAK)
    monkeypatch.setattr(core, "isolation", lambda level="auto", refresh=False: WEAK)


def test_every_task_that_runs_model_code_declares_it_and_requires_userns_by_default():
    assert {name for name, cls in BUILTIN.items() if getattr(cls, "untrusted_code", False)} == {
        "azr",
        "code",
        "evoenv",
        "fhir",
    }
    assert TrainConfig().sandbox.require == "userns" == required_level()


@pytest.mark.parametrize("recipe, task", [("azr", None), ("evoenv", None), ("grpo", "code"), ("codeact", None)])
def test_a_weak_host_refuses_a_model_code_run_before_anything_loads(weak_host, recipe, task):
    with pytest.raises(UserError) as err:
        checked_run([], recipe, None, task, 1, None, False)
    line = str(err.value)
    assert "\n" not in line and line.startswith("config key 'sandbox.require' = 'userns': task ")
    assert "runs model-written code" in line and "the strongest sandbox level on this machine is 'rlimits'" in line
    assert "namespaces: needs root" in line  # why the stronger levels are not there
    assert "opt in with sandbox.require=rlimits (trusted code only" in line


def test_the_opt_in_and_a_task_without_model_code_pass_on_a_weak_host(weak_host):
    cfg, _ = checked_run(["sandbox.require=rlimits"], "azr", None, None, 1, None, False)
    assert cfg.sandbox.require == "rlimits"
    checked_run([], "grpo", None, None, 1, None, False)  # arithmetic runs no code: the key does not matter


def test_an_unknown_level_names_the_key_and_the_levels():
    with pytest.raises(
        UserError,
        match=r"config key 'sandbox.require' = 'strong' is out of range: must be one of "
        r"namespaces, rlimits, uid, userns",
    ):
        checked_run(["sandbox.require=strong"], "azr", None, None, 1, None, False)


def test_this_host_meets_the_default():
    checked_run([], "azr", None, None, 1, None, False)  # namespaces >= userns


def test_train_run_holds_its_level_while_it_runs(monkeypatch):
    seen = []
    monkeypatch.setattr(run_module, "_train", lambda *args: seen.append(required_level()) or {})
    cfg = TrainConfig(recipe="azr", task="azr", steps=1, sandbox=SandboxOpts(require="namespaces"))
    run_module.train_run(cfg, get_recipe("azr"))
    assert seen == ["namespaces"] and required_level() == "userns"  # restored after the run


@pytest.fixture
def requires(monkeypatch):
    """The ``require`` of every level resolution of the sandbox (program runs and sessions)."""
    asked = []

    def spy(level="auto", require=None):
        asked.append(require)
        return real(level, require)

    real = core.resolve_level
    monkeypatch.setattr(core, "resolve_level", spy)
    monkeypatch.setattr(session_module, "resolve_level", spy)
    return asked


def test_the_runs_level_reaches_every_model_code_path(requires):
    env = CodeActEnv({}, turn_timeout=2.0)
    try:
        with requiring("namespaces"):
            assert trace_programs([("print(1)\n", "")], cache=False)[0]["output"] == "1\n"
            assert call_envs(
                [("class E(Env):\n    def sample(self, s, d):\n        return s\n", [("sample", (4, 0))])]
            ) == [[{"ok": True, "value": 4}]]
            assert env.step("```python\nprint(2)\n```")[0] == "2"
    finally:
        env.close()
    assert requires == ["namespaces"] * 3


def test_a_model_code_call_never_falls_back_below_the_runs_level(weak_host):
    with pytest.raises(SandboxUnavailable, match="require='userns' but the strongest level here is"):
        trace_programs([("print(1)\n", "")], cache=False)
    env = CodeActEnv({}, turn_timeout=2.0)
    with pytest.raises(SandboxUnavailable):  # a configuration error: not an observation
        env.step("```python\nprint(2)\n```")
    with requiring("rlimits"):  # the opt-in
        assert trace_programs([("print(3)\n", "")], cache=False)[0]["output"] == "3\n"
