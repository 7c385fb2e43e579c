"""From the command line, on the chat model built in the tests (issue 28, item 4): a conversational
JSONL with a user's reward function trains 3 steps (grpo here; dapo and cipo in the slow tier) and
evaluates, templated as ``apply_chat_template`` does; a prompt cap the context cannot hold stops the
run before it trains, in one line."""

import json

import pytest
from typer.testing import CliRunner

from reasonrl.cli import app, main

RUN = [
    "prompts_per_step=2",
    "group_size=4",
    "sampling.max_new_tokens=12",
    "eval_every=0",
    "final_eval_problems=4",
    "final_eval_k=0",
    "save_every=0",
]  # the run's before/after evals greedy only: `reasonrl eval` samples below
REWARD = '''
def close(prompts, completions, answer, **kwargs):
    """1 for the answer; else a length share, so that a random model's groups still differ."""
    texts = [c[0]["content"] for c in completions]  # conversational prompts: completions are messages
    return [1.0 if a in t else min(len(t), 24) / 48 for t, a in zip(texts, answer)]
'''


@pytest.fixture(scope="module")
def chat_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("chat_data")

    def rows(lo, hi):
        return "".join(
            json.dumps(
                {
                    "prompt": [
                        {"role": "system", "content": "Answer with a number."},
                        {"role": "user", "content": f"What is {a} plus {a % 7}?"},
                    ],
                    "answer": str(a + a % 7),
                }
            )
            + "\n"
            for a in range(lo, hi)
        )

    (root / "train.jsonl").write_text(rows(0, 24))
    (root / "test.jsonl").write_text(rows(100, 104))
    (root / "rewards.py").write_text(REWARD)
    return root


def train(tmp_path, model_dir, data, recipe, *extra):
    out = tmp_path / recipe
    result = CliRunner().invoke(
        app,
        [
            "train",
            "--recipe",
            recipe,
            "--model",
            str(model_dir),
            "--task",
            str(data / "train.jsonl"),
            "--task-opt",
            f"test_path={data / 'test.jsonl'}",
            "--task-opt",
            f"reward={data / 'rewards.py'}:close",
            "--steps",
            "3",
            "--out",
            str(out),
            *RUN,
            *extra,
        ],
    )
    assert result.exit_code == 0, f"{result.output}\n{result.exception!r}"
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return out, metrics, json.loads((out / "summary.json").read_text())


def test_grpo_trains_and_evaluates_a_conversational_file_on_a_chat_model(tmp_path, chat_model_dir, chat_data):
    out, metrics, summary = train(tmp_path, chat_model_dir, chat_data, "grpo")
    assert [m["step"] for m in metrics] == [1, 2, 3] and all(m["reward/mean"] > 0 for m in metrics)
    assert summary["prompts"]["format"] == "chat" and summary["prompts"]["max_prompt_tokens"] == 256 - 12
    assert summary["after"]["n_problems"] == 4
    # the trained model keeps its template and both end ids
    saved = json.loads((out / "final" / "generation_config.json").read_text())
    assert saved["eos_token_id"] == [2, 0] and (out / "final" / "chat_template.jinja").exists()
    report, samples = tmp_path / "e.json", tmp_path / "s.jsonl"
    result = CliRunner().invoke(
        app,
        [
            "eval",
            "--model",
            str(out / "final"),
            "--task",
            str(chat_data / "train.jsonl"),
            "--task-opt",
            f"test_path={chat_data / 'test.jsonl'}",
            "--task-opt",
            f"reward={chat_data / 'rewards.py'}:close",
            "--problems",
            "4",
            "--samples-per-problem",
            "2",
            "--max-new-tokens",
            "12",
            "--json",
            str(report),
            "--samples",
            str(samples),
            "--prompt",
            "format=chat",
        ],
    )
    assert result.exit_code == 0, f"{result.output}\n{result.exception!r}"
    got = json.loads(report.read_text())
    assert got["n_problems"] == 4 and got["settings"]["prompts"]["why"] == "prompt.format=chat"
    records = [json.loads(line) for line in samples.read_text().splitlines()]
    assert len(records) == 4 * 3 and records[0]["prompt"][0] == {"role": "system", "content": "Answer with a number."}


@pytest.mark.slow
@pytest.mark.parametrize(
    "recipe,extra,metric",
    [
        ("dapo", ["group_filter.metric=reward"], "dynamic/groups_kept"),  # every answer is wrong: filter on the reward
        # all-wrong groups are corrected (in templated turns), one of the 2 per step (rho 0.5, kept there: rho_min)
        ("cipo", ["correction.q0=1.0", "correction.rho_min=0.5"], "cipo/groups"),
    ],
)
def test_more_recipes_train_on_the_chat_model(tmp_path, chat_model_dir, chat_data, recipe, extra, metric):
    _, metrics, summary = train(tmp_path, chat_model_dir, chat_data, recipe, *extra)
    assert [m["step"] for m in metrics] == [1, 2, 3] and summary["prompts"]["format"] == "chat"
    assert all(m[metric] > 0 for m in metrics)


def test_a_prompt_cap_the_context_cannot_hold_stops_the_run_in_one_line(tmp_path, chat_model_dir, chat_data, capsys):
    with pytest.raises(SystemExit) as stop:
        main(
            [
                "train",
                "--model",
                str(chat_model_dir),
                "--task",
                str(chat_data / "train.jsonl"),
                "--steps",
                "1",
                "--out",
                str(tmp_path / "r"),
                "prompt.max_tokens=250",
                "sampling.max_new_tokens=12",
            ]
        )
    err = capsys.readouterr().err.strip()
    assert stop.value.code == 2 and "\n" not in err
    assert err.endswith(
        "prompt.max_tokens=250 + max_new_tokens=12 = 262 exceed "
        f"{chat_model_dir}'s context length 256 (max_position_embeddings): lower one of them"
    )
