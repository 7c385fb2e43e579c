"""The CodeAct harness: code blocks run in a persistent sandboxed interpreter with tools bound; an
exception, a timeout, a malformed block or hostile code is an observation, never a crash."""

import socket

import pytest

from reasonrl.envs import CodeActEnv, extract_code
from reasonrl.envs.codeact import NO_CODE
from reasonrl.rewards.sandbox import isolation


def fence(code: str) -> str:
    return f"Let me look.\n```python\n{code}\n```\n"


@pytest.fixture
def env():
    records = {"P1": [{"code": "X", "v": 1}, {"code": "Y", "v": 2}, {"code": "X", "v": 3}]}
    tools = {"search": lambda patient, code=None: [r for r in records[patient] if code in (None, r["code"])]}
    e = CodeActEnv(
        tools, template="{question}\nTools: {tools}", tool_docs="search(patient, code=None)", turn_timeout=1.0
    )
    yield e
    e.close()


def test_extract_code_blocks_tags_and_malformed():
    assert extract_code("a\n```python\nx = 1\n```\nb <code>y = 2</code>") == ("x = 1\ny = 2", None)
    assert extract_code("```\nz\n```") == ("z", None)
    assert extract_code("no code here") == (None, None)
    assert extract_code("```python\nx = 1\n")[0] is None and "never closed" in extract_code("```python\nx = 1\n")[1]
    assert extract_code("<code>x = 1") == (None, "a code block was opened and never closed (``` or </code> missing)")
    assert extract_code("```python\n\n```")[1] == "the code block is empty"


def test_scripted_policy_answers_in_three_turns_with_state_kept(env):
    assert (
        env.reset("How many X observations has P1?")
        == "How many X observations has P1?\nTools: search(patient, code=None)"
    )
    obs, done, answer = env.step(fence("rows = search('P1', code='X')\nlen(rows)"))
    assert (obs, done, answer) == ("Out: 2", False, None)
    obs, done, _ = env.step(fence("print([r['v'] for r in rows])"))  # `rows` survived the turn
    assert (obs, done) == ("[1, 3]", False)
    obs, done, answer = env.step(fence("final_answer(len(rows))"))
    assert (done, answer) == (True, "2")


def test_exception_is_an_error_observation(env):
    env.reset("q")
    obs, done, answer = env.step(fence("x = 1\n1 / 0"))
    assert not done and answer is None
    assert obs.startswith("Error:\nTraceback") and obs.endswith("ZeroDivisionError: division by zero")
    assert env.step(fence("print(x)"))[0] == "1"  # state before the exception is kept


def test_infinite_loop_hits_the_timeout_and_the_next_turn_starts_fresh(env):
    env.reset("q")
    env.step(fence("x = 5"))
    obs, done, _ = env.step(fence("while True:\n    try:\n        pass\n    except BaseException:\n        pass"))
    assert not done and "TimeoutError: the code ran longer than 1 s" in obs and "restarted" in obs
    assert env.cells[-1].timed_out
    obs, _, _ = env.step(fence("print(x)"))  # a fresh interpreter: the old variables are gone
    assert "NameError" in obs
    # cells: x = 5, the loop (timed out: an error), print(x) (NameError)
    assert env.metrics() == {
        "codeact/cells": 3.0,
        "codeact/cell_errors": 2.0,
        "codeact/timeouts": 1.0,
        "codeact/malformed": 0.0,
        "codeact/sandbox_errors": 0.0,
    }


def test_malformed_block_and_no_code_are_error_observations(env):
    env.reset("q")
    assert env.step("```python\nprint(1)\n") == (
        "Error: a code block was opened and never closed (``` or </code> missing)",
        False,
        None,
    )
    obs, done, _ = env.step(fence("def f(:"))
    assert not done and "SyntaxError" in obs
    assert env.step("I think the answer is 4.") == (NO_CODE, False, None)
    assert env.step("done <answer>4</answer>") == ("", True, "4")
    # 4 turns: unclosed (malformed), a SyntaxError cell, no code (malformed), an answer tag (no cell)
    assert env.metrics() == {
        "codeact/cells": 1.0,
        "codeact/cell_errors": 1.0,
        "codeact/timeouts": 0.0,
        "codeact/malformed": 2.0,
        "codeact/sandbox_errors": 0.0,
    }


def test_tool_errors_are_observations(env):
    env.reset("q")
    obs, done, _ = env.step(fence("search('P9')"))
    assert not done and obs.endswith("ToolError: KeyError: 'P9'")
    obs, _, _ = env.step(fence("search(object())"))  # not JSON: refused inside the sandbox
    assert "TypeError" in obs


def test_hostile_code_is_contained(env, tmp_path):
    if isolation().level not in ("namespaces", "userns"):
        pytest.skip("network and filesystem containment need a namespace level of the sandbox")
    target = tmp_path / "pwned"
    env.reset("q")
    obs, _, _ = env.step(fence(f"import os\nos.system('touch {target}')\nprint('ran')"))
    assert obs == "ran" and not target.exists()  # a read-only file system outside its own tmp
    obs, _, _ = env.step(fence(f"open('{target}', 'w').write('x')"))
    assert "Error" in obs and ("Read-only" in obs or "Permission" in obs or "No such file" in obs)
    assert not target.exists()
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        server.setblocking(False)
        port = server.getsockname()[1]
        obs, _, _ = env.step(fence(f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=0.5)"))
        assert "Error" in obs and ("refused" in obs.lower() or "unreachable" in obs.lower() or "timed out" in obs)
        with pytest.raises(BlockingIOError):
            server.accept()  # nothing reached the host
    obs, _, _ = env.step(fence("import os\nprint(sorted(k for k in os.environ))"))
    assert obs == "['HOME', 'LANG', 'PATH', 'TMPDIR']"  # nothing of the caller's environment
