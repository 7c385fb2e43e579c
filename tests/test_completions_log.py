"""completions.jsonl (issue 42, item 3): a few of each step's rollouts as text, as TRL's
``log_completions`` gives them. The rows hold what the batch computed (hand-checked rewards and
advantages), the rate is respected, the choice draws nothing from the training RNG, a resumed run's
file equals a straight run's, and ``reasonrl report`` shows the latest rows."""

import dataclasses
import json

import pytest
import torch
from transformers import AutoTokenizer

from reasonrl.loop.batch import BatchMaker
from reasonrl.config.train import TrainConfig
from reasonrl.recipes import get_recipe
from reasonrl.rewards import OverlongPenalty
from reasonrl.rewards.base import Reward, RewardResult
from reasonrl.loop.run import train_run
from reasonrl.loop.stepdata import Batch, chosen_rows, completion_count, completion_rows, row_advantage
from reasonrl.tasks import Item, get_task
from reasonrl.loop.tracking import CompletionsSink, read_completions

from helpers import text_rollouts

LENGTHS = (10, 17, 18, 22)  # characters = tokens (text_rollouts): row j of every group
RIGHT = (True, False, True, False)


class LengthEngine:
    """Row j of every group answers right or wrong (RIGHT) in exactly LENGTHS[j] tokens."""

    device, model = "cpu", None

    class tok:
        pad_token_id = 0

    def generate(self, prompts, n, sampling, generator=None, seeds=None):
        texts = []
        for p in prompts:
            answer = eval(p.split("=")[0])  # noqa: S307 - the arithmetic task's own expressions
            for j in range(n):
                head = f"A:{answer if RIGHT[j] else answer + 1}"
                texts.append(head + "." * (LENGTHS[j] - len(head)))
        return text_rollouts(prompts, texts, n, ["eos", "eos", "eos", "length"] * len(prompts))


def test_the_rate_is_a_count_or_a_fraction_rounded_up():
    assert completion_count(2, 16) == 2 and completion_count(5, 3) == 3  # a count, capped at the rows
    assert completion_count(0.25, 10) == 3  # ceil(2.5)
    assert completion_count(0.999, 8) == 8 and completion_count(0, 8) == 0  # ceil(7.992); off


def test_the_choice_is_seeded_by_run_and_step_and_leaves_the_training_rng_alone():
    before = torch.get_rng_state()
    picks = chosen_rows(3, 16, seed=0, step=1)
    assert torch.equal(torch.get_rng_state(), before)
    assert len(picks) == 3 == len(set(picks)) and picks == sorted(picks) and all(0 <= r < 16 for r in picks)
    assert chosen_rows(3, 16, seed=0, step=1) == picks  # a resumed run picks the same rows
    assert any(chosen_rows(3, 16, seed=0, step=s) != picks for s in range(2, 6))  # other steps, other rows
    assert chosen_rows(0.5, 16, seed=7, step=3) != chosen_rows(0.5, 16, seed=8, step=3)


def test_the_batch_keeps_each_reward_by_name_and_the_rows_show_it():
    # grpo plus DAPO's overlong penalty (weight 0.5) with a 20-token budget: cache 0.2 * 20 = 4, free 16.
    # Rows of a group, lengths 10, 17, 18, 22: penalty 0, (16-17)/4 = -0.25, (16-18)/4 = -0.5, -1 (over 20);
    # correct 1, 0, 1, 0; totals 1 + 0 = 1, 0 - 0.125 = -0.125, 1 - 0.25 = 0.75, 0 - 0.5 = -0.5.
    # GRPO: mean 0.28125, unbiased std 0.709864 -> advantages 1.012517, -0.572292, 0.660337, -1.100562
    recipe = dataclasses.replace(get_recipe("grpo"), group_size=4, extra_rewards=((OverlongPenalty(), 0.5),))
    task = get_task("arithmetic")
    b = BatchMaker(task, recipe, LengthEngine(), budget=20, seed=0).make(2)
    assert set(b.reward_terms) == {"correct", "overlong"}
    assert b.reward_terms["correct"].tolist() == [1.0, 0.0, 1.0, 0.0] * 2
    assert b.reward_terms["overlong"].tolist() == [0.0, -0.25, -0.5, -1.0] * 2
    rows = completion_rows(5, b, lambda ids: f"ids {ids}", list(range(8)))
    totals, advantages = [1.0, -0.125, 0.75, -0.5], [1.012517, -0.572292, 0.660337, -1.100562]
    for r, row in enumerate(rows):
        j = r % 4
        assert (row["step"], row["group"], row["sample"], row["kind"]) == (5, r // 4, j, 0)
        assert row["rewards"] == {"correct": float(RIGHT[j]), "overlong": [0.0, -0.25, -0.5, -1.0][j]}
        assert row["reward"] == totals[j] and row["correct"] == RIGHT[j] and row["length"] == LENGTHS[j]
        assert row["advantage"] == pytest.approx(advantages[j], abs=1e-5)
        assert row["key"] == b.items[r // 4].key and row["answer"] == b.items[r // 4].answer
        assert row["completion"] == b.ro.texts[r] and row["prompt"] == "ids [1]"  # text_rollouts: prompt ids [1]
        assert row["finish"] == ["eos", "eos", "eos", "length"][j]
    assert json.loads(json.dumps(rows)) == rows  # plain JSON


class Verdict(Reward):
    """A judge-like reward: 0.5 per row, but its verdict on every group's second row failed (value None)."""

    name = "verdict"

    def score(self, prompts, completions, **columns):
        failed = [i % 4 == 1 for i in range(len(completions))]
        return RewardResult([None if f else 0.5 for f in failed], {}, failed)


def test_a_failed_verdict_is_none_in_the_rows():
    recipe = dataclasses.replace(get_recipe("grpo"), group_size=4, extra_rewards=((Verdict(), 1.0),))
    b = BatchMaker(get_task("arithmetic"), recipe, LengthEngine(), budget=20, seed=0).make(1)
    rows = completion_rows(1, b, lambda ids: "", [0, 1])
    assert b.reward_terms["verdict"][[0, 2, 3]].tolist() == [0.5] * 3 and b.reward_terms["verdict"][1].isnan()
    assert rows[0]["rewards"] == {"correct": 1.0, "verdict": 0.5} and rows[1]["rewards"] == {
        "correct": 0.0,
        "verdict": None,
    }


def test_a_declined_reward_is_none_and_a_token_level_advantage_is_its_mean_over_trained_tokens():
    ro = text_rollouts(["p"], ["abcd", "ab"], 2)  # lengths 4 and 2: completion mask [1,1,1,1], [1,1,0,0]
    b = Batch(
        items=[Item("k", "p", "a")],
        ro=ro,
        rewards=torch.tensor([[0.5, 0.0]]),
        correct=torch.zeros(1, 2),
        reward_terms={"fmt": torch.tensor([0.5, float("nan")])},
    )
    b.advantages = torch.tensor([[1.0, 2.0, 3.0, 6.0], [4.0, -2.0, 9.0, 9.0]])  # (R, T)
    b.loss_mask = torch.tensor([[1, 1, 1, 0], [0, 0, 0, 0]])  # row 0: its last token not trained; row 1: none
    assert row_advantage(b, 0) == 2.0  # (1 + 2 + 3) / 3
    assert row_advantage(b, 1) == 1.0  # no trained token: over its completion tokens, (4 - 2) / 2
    rows = completion_rows(1, b, lambda ids: "", [0, 1])
    assert rows[0]["rewards"] == {"fmt": 0.5} and rows[1]["rewards"] == {"fmt": None}


# --- a run on the chat model -------------------------------------------------------------------------

REWARD = '''
def close(prompts, completions, answer, **kwargs):
    """1 for the answer; else a length share, so that a random model's groups differ."""
    texts = [c[0]["content"] for c in completions]
    return [1.0 if a in t else min(len(t), 24) / 48 for t, a in zip(texts, answer)]
'''


def MESSAGES(a):  # an item's chat messages
    return [
        {"role": "system", "content": "Answer with a number."},
        {"role": "user", "content": f"What is {a} plus {a % 7}?"},
    ]


@pytest.fixture(scope="module")
def chat_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("completions_data")
    for name, (lo, hi) in (("train", (0, 24)), ("test", (100, 104))):
        (root / f"{name}.jsonl").write_text(
            "".join(json.dumps({"prompt": MESSAGES(a), "answer": str(a + a % 7)}) + "\n" for a in range(lo, hi))
        )
    (root / "rewards.py").write_text(REWARD)
    return root


def chat_cfg(model_dir, data, out, **over):
    base = {"steps": 2, "prompts_per_step": 2, "eval_every": 0, "final_eval_problems": 0, "save_every": 0}
    return TrainConfig(
        model=str(model_dir),
        task=str(data / "train.jsonl"),
        out=str(out),
        task_options={"test_path": str(data / "test.jsonl"), "reward": f"{data / 'rewards.py'}:close"},
        **{**base, **over},
    )


CHAT_GRPO = dataclasses.replace(
    get_recipe("grpo"), group_size=4, sampling=dataclasses.replace(get_recipe("grpo").sampling, max_new_tokens=12)
)


def test_a_chat_run_logs_the_templated_prompt_and_what_its_batch_computed(
    chat_model_dir, chat_data, tmp_path, monkeypatch
):
    from reasonrl.loop.trainer import Trainer

    seen, real_update = [], Trainer.update

    def spy(self, b, minibatches=None):
        seen.append(b)
        return real_update(self, b, minibatches)

    monkeypatch.setattr(Trainer, "update", spy)
    train_run(chat_cfg(chat_model_dir, chat_data, tmp_path / "run", log_completions=3), CHAT_GRPO)
    rows = read_completions(tmp_path / "run" / "completions.jsonl")
    assert [r["step"] for r in rows] == [1, 1, 1, 2, 2, 2]  # 3 of the 2 x 4 rows each step
    tok = AutoTokenizer.from_pretrained(chat_model_dir)
    for row in rows:
        b = seen[row["step"] - 1]
        r = row["group"] * 4 + row["sample"]
        assert r in chosen_rows(3, 8, seed=0, step=row["step"])
        # the prompt as the model saw it: the chat template of the row's messages, special tokens included
        messages = b.items[row["group"]].prompt
        assert messages[1]["content"].startswith("What is ") and "<|im_start|>" in row["prompt"]
        assert row["prompt"] == tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        # the user's reward by hand from the logged text: 1 for the answer, else min(len, 24) / 48
        text = row["completion"]
        close = 1.0 if row["answer"] in text else min(len(text), 24) / 48
        assert row["rewards"] == {"correct": pytest.approx(close)} and row["reward"] == pytest.approx(close)
        # and each field is the batch's own
        assert text == b.ro.texts[r] and row["reward"] == float(b.rewards[row["group"], row["sample"]])
        assert row["advantage"] == pytest.approx(float(b.advantages[r])) and row["finish"] == b.ro.finish_reasons[r]
        assert (
            row["length"] == int(b.ro.policy_lengths[r]) == int(b.ro.lengths[r])
            and row["key"] == b.items[row["group"]].key
        )


def test_log_completions_zero_writes_no_file(chat_model_dir, chat_data, tmp_path):
    train_run(chat_cfg(chat_model_dir, chat_data, tmp_path / "run", steps=1, log_completions=0), CHAT_GRPO)
    assert (tmp_path / "run" / "metrics.jsonl").exists() and not (tmp_path / "run" / "completions.jsonl").exists()


class Stop(Exception):
    pass


def test_a_resumed_run_drops_the_rows_after_its_checkpoint_and_ends_with_the_straight_runs_file(
    chat_model_dir, chat_data, tmp_path
):
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    over = {"steps": 4, "save_every": 2, "log_completions": 0.5}  # ceil(0.5 * 8) = 4 rows a step
    train_run(chat_cfg(chat_model_dir, chat_data, straight, **over), CHAT_GRPO)

    def stop_after_3(m):
        if m["step"] == 3:  # step 3's rows are written; the last checkpoint is step 2's
            raise Stop

    with pytest.raises(Stop):
        train_run(chat_cfg(chat_model_dir, chat_data, killed, **over), CHAT_GRPO, on_step=stop_after_3)
    assert [r["step"] for r in read_completions(killed / "completions.jsonl")] == [1] * 4 + [2] * 4 + [3] * 4
    train_run(chat_cfg(chat_model_dir, chat_data, killed, **over), CHAT_GRPO, resume=True)
    text = (killed / "completions.jsonl").read_text()
    assert [r["step"] for r in read_completions(killed / "completions.jsonl")] == [1] * 4 + [2] * 4 + [3] * 4 + [4] * 4
    assert text == (straight / "completions.jsonl").read_text()


def test_the_sink_starts_a_file_for_a_run_resumed_from_before_it_existed(tmp_path):
    sink = CompletionsSink(tmp_path / "completions.jsonl", resume_from_step=4)
    sink.log_rows([{"step": 5, "completion": "x"}], 5)
    sink.close()
    assert read_completions(tmp_path / "completions.jsonl") == [{"step": 5, "completion": "x"}]
