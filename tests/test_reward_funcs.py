"""Several weighted reward functions (issue 46 item 2): TRL's ``reward_funcs`` / ``reward_weights`` on the command
line (``--reward path.py:fn``, repeatable) and in ``reasonrl eval``; each logs ``reward/<name>/mean`` and ``/std``."""

import json

import pytest
from typer.testing import CliRunner

from reasonrl import cli
from reasonrl.cli import app
from reasonrl.commands.evaluate import reward_summary
from reasonrl.errors import UserError
from reasonrl.loop.run import with_rewards
from reasonrl.recipes import get_recipe
from reasonrl.rewards import FunctionReward, score_rewards

FUNCS = """
def one(completions, **kwargs):
    return [1.0 for _ in completions]

def half(prompts, completions, answer, **kwargs):
    return [0.5 for _ in completions]

def echo_answer(prompts, completions, answer, **kwargs):
    return [1.0 if a in c else 0.0 for c, a in zip(completions, answer)]

def only_prompt(prompts):
    return [0.0 for _ in prompts]
"""


@pytest.fixture
def funcs(tmp_path):
    path = tmp_path / "rewards.py"
    path.write_text(FUNCS)
    return path


def test_the_verifier_comes_first_then_each_function_with_its_weight(funcs):
    dapo = get_recipe("dapo")  # its own extra reward (overlong, weight 0.5) stays, before the user's
    r = with_rewards(
        dapo,
        [f"{funcs}:one", f"{funcs}:one", lambda prompts, completions, **kw: [0.0] * len(prompts)],
        [2.0, 0.5, 0.25, 1.0],
    )
    assert r.task_reward_weight == 2.0 * dapo.task_reward_weight
    assert [(fn.name, w) for fn, w in r.extra_rewards[1:]] == [("one", 0.5), ("one_2", 0.25), ("<lambda>", 1.0)]
    assert r.extra_rewards[0] == dapo.extra_rewards[0]
    assert with_rewards(dapo, [], None) is dapo
    with pytest.raises(UserError, match="reward_weights has 2 numbers for 3 rewards"):
        with_rewards(dapo, [f"{funcs}:one", f"{funcs}:one"], [1.0, 1.0])


def test_a_function_gets_trls_arguments_and_the_rows_own_columns(funcs):
    fn = FunctionReward(f"{funcs}:echo_answer")
    # no kept row: the answer column; 2 of 3 completions hold their answer
    res = score_rewards(fn, ["p"] * 3, ["is 7", "is 8", "9"], {"answer": ["7", "9", "9"]}, task="t")
    assert res.values == [1.0, 0.0, 1.0]
    # mean 2/3; std (Bessel): deviations 1/3, -2/3, 1/3 -> squares 1/9 + 4/9 + 1/9 = 6/9, / 2 = 1/3 -> 0.57735
    assert res.metrics["reward/echo_answer/mean"] == pytest.approx(2 / 3)
    assert res.metrics["reward/echo_answer/std"] == pytest.approx(0.5773502692)
    seen = {}

    def spy(prompts, completions, **kwargs):
        seen.update(prompts=prompts, completions=completions, **kwargs)
        return [None, 1.0]

    meta = [
        {"_trl_row": {"prompt": [{"role": "user", "content": "q"}], "columns": {"answer": "1", "level": 3}}},
        {"_trl_row": {"prompt": [{"role": "user", "content": "r"}], "columns": {"answer": "2", "level": 5}}},
    ]
    res = score_rewards(FunctionReward(spy), ["q", "r"], ["a", "b"], {"answer": ["1", "2"], "meta": meta}, task="t")
    assert seen["level"] == [3, 5] and seen["completions"] == [
        [{"role": "assistant", "content": "a"}],
        [{"role": "assistant", "content": "b"}],
    ]
    assert res.metrics["reward/spy/frac_none"] == 0.5 and "reward/spy/std" not in res.metrics  # one value: no std


def test_a_function_that_cannot_take_trls_arguments_is_one_line(funcs):
    with pytest.raises(UserError, match=r"reward '.*only_prompt' cannot be called as fn\(prompts=..., completions="):
        FunctionReward(f"{funcs}:only_prompt")


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--reward", "{f}:nope"], "defines no function 'nope'"),
        (["--reward", "{d}/missing.py:one"], "does not exist"),
        (["--reward", "{f}:one", "reward_weights=[1]"], "'reward_weights' = [1] must be 2 finite numbers"),
    ],
)
def test_bad_reward_options_are_refused_before_loading(argv, needle, funcs, tmp_path, monkeypatch, capfd):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        cli.main(["train", *[a.format(f=funcs, d=tmp_path) for a in argv]])
    err = capfd.readouterr().err
    assert exit_.value.code == 2 and needle in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.slow  # a training run: the default tier keeps its 5 minutes
def test_two_weighted_functions_train_from_the_command_line_with_their_own_metrics(funcs, tiny_dir, tmp_path):
    out = tmp_path / "run"
    done = CliRunner().invoke(
        app,
        [
            "train",
            "--steps",
            "1",
            "--out",
            str(out),
            "--model",
            str(tiny_dir),
            "--reward",
            f"{funcs}:one",
            "--reward",
            f"{funcs}:half",
            "reward_weights=[0,0.5,0.25]",
            "prompts_per_step=2",
            "group_size=2",
            "eval_every=0",
            "final_eval_problems=0",
            "save_every=0",
        ],
    )
    assert done.exit_code == 0, done.output
    m = json.loads((out / "metrics.jsonl").read_text().splitlines()[0])
    assert (m["reward/one/mean"], m["reward/one/std"], m["reward/half/mean"], m["reward/half/std"]) == (1.0, 0, 0.5, 0)
    assert "reward/correct/mean" in m  # the verifier is one of the rewards (weight 0 here)
    assert m["reward/mean"] == pytest.approx(0.5 * 1.0 + 0.25 * 0.5)  # 0 x verifier + 0.5 x 1 + 0.25 x 0.5 = 0.625
    assert m["reward/std"] == 0.0


def test_eval_reports_each_functions_mean_and_std(funcs):
    records = [
        {"prompt": "p", "completion": c, "answer": a, "mode": "greedy"}
        for c, a in (("7", "7"), ("8", "7"), ("x9", "9"), ("0", "1"))
    ]
    fns = [FunctionReward(f"{funcs}:echo_answer"), FunctionReward(f"{funcs}:echo_answer")]
    out = reward_summary(fns, records)
    # echo_answer: 1, 0, 1, 0 -> mean 0.5, std sqrt(1/3); the second of one name is echo_answer_2
    assert out == {
        "reward/echo_answer/mean": 0.5,
        "reward/echo_answer/std": pytest.approx(0.5773502692),
        "reward/echo_answer_2/mean": 0.5,
        "reward/echo_answer_2/std": pytest.approx(0.5773502692),
    }
