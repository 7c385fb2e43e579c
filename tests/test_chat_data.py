"""Data for real models (issue 28, items 2-3): conversational rows, Hub datasets (loaded with
``datasets.load_dataset`` from local folders, never the network), the usual RLVR layouts, a user's
reward function file, and prompts held to the model's limits."""

import json

import pytest

from chat_model import build_tokenizer
from reasonrl.errors import MissingPathError, UserError
from reasonrl.models import build_char_tokenizer
from reasonrl.models.chat import PromptFormatter
from reasonrl.tasks import get_task, take_items
from reasonrl.tasks.limits import limit_prompts, prompt_cap
from reasonrl.tasks.rows import TRL_ROW

Q = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 3 plus 4?"}]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_conversational_rows_are_read_as_messages(tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", [{"prompt": Q, "answer": "7", "level": 1}])
    item = get_task(str(path), test_fraction=0.0).split_items("train")[0]
    assert item.prompt == Q and item.answer == "7" and item.meta == {"level": 1}
    assert item.key == json.dumps(Q, sort_keys=True)  # a conversation's key: its canonical JSON
    # TRL's SFT layout: a messages column; the reference reply (the trailing assistant turn) is not the prompt
    path = write_jsonl(tmp_path / "m.jsonl", [{"messages": [*Q, {"role": "assistant", "content": "7"}], "answer": "7"}])
    assert get_task(str(path), test_fraction=0.0).split_items("train")[0].prompt == Q
    bad = write_jsonl(
        tmp_path / "b.jsonl",
        [{"prompt": Q, "answer": "7"}, {"prompt": [{"role": "robot", "content": "x"}], "answer": "1"}],
    )
    with pytest.raises(UserError, match=r"b.jsonl row 1: column 'prompt': message 0 must be"):
        get_task(str(bad))
    ends = write_jsonl(tmp_path / "e.jsonl", [{"prompt": [*Q, {"role": "assistant", "content": "7"}], "answer": "7"}])
    with pytest.raises(UserError, match=r"e.jsonl row 0: column 'prompt': the last message must be the user's"):
        get_task(str(ends))


def gsm8k_folder(root):
    """A Hub-style dataset repository on disk: data files and a README whose YAML names config ``main``."""
    (root / "data").mkdir(parents=True)
    write_jsonl(
        root / "data" / "train.jsonl",
        [{"question": f"Tom has {i} apples ...", "answer": f"He has ...\n#### {i},000"} for i in range(1, 7)],
    )
    write_jsonl(root / "data" / "test.jsonl", [{"question": "How many?", "answer": "so\n#### 12"}])
    (root / "README.md").write_text(
        "---\nconfigs:\n- config_name: main\n  data_files:\n  - split: train\n    path: "
        "data/train.jsonl\n  - split: test\n    path: data/test.jsonl\n---\n"
    )
    return root


def test_a_hub_dataset_loads_with_load_dataset_from_a_local_repository(tmp_path):
    root = gsm8k_folder(tmp_path / "gsm8k")
    task = get_task(f"hf:{root}:main")
    assert task.preset == "gsm8k" and task.name == f"hf:{root}:main"
    train, test = task.split_items("train"), task.split_items("test")
    assert len(train) == 6 and [it.answer for it in test] == ["12"]  # the test split, the answer after ####
    assert train[0].answer == "1000"  # "1,000": thousands separators dropped
    assert train[0].prompt.endswith("put your final answer within \\boxed{}.")  # the preset's instruction
    # math-verify is the reward: 1,000 boxed, or written out, is right; 999 is not
    assert task.verify("so \\boxed{1000}", "1000", {}) == 1.0 and task.verify("\\boxed{999}", "1000", {}) == 0.0
    with pytest.raises(UserError, match=r"BuilderConfig 'socratic' not found. Available: \['main'\]"):
        get_task(f"hf:{root}:socratic")
    with pytest.raises(UserError, match=r"no split 'validation'; the dataset has \['test', 'train'\]"):
        get_task(f"hf:{root}:main", test_split="validation")


def test_the_dapo_and_math_layouts(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    dapo = [
        {
            "data_source": "math_dapo",
            "prompt": [{"role": "user", "content": f"Solve {i}. Answer: $Answer"}],
            "reward_model": {"ground_truth": str(i * 2), "style": "rule"},
        }
        for i in range(4)
    ]
    (tmp_path / "dapo").mkdir()
    pq.write_table(pa.Table.from_pylist(dapo), tmp_path / "dapo" / "train.parquet")
    task = get_task(f"hf:{tmp_path / 'dapo'}", test_fraction=0.0)
    item = task.split_items("train")[1]
    assert task.preset == "dapo" and item.prompt == dapo[1]["prompt"] and item.answer == "2"
    assert task.verify("work\nAnswer: 2", "2", item.meta) == 1.0 and task.extract_answer("x\nAnswer: 2") == "2"
    rows = [{"problem": "Half of 1?", "solution": "It is $\\boxed{\\frac{1}{2}}$."}]
    write_jsonl((tmp_path / "math").mkdir() or tmp_path / "math" / "train.jsonl", rows)
    task = get_task(f"hf:{tmp_path / 'math'}", test_fraction=0.0)
    item = task.split_items("train")[0]
    assert task.preset == "math" and item.answer == "\\frac{1}{2}"
    assert task.verify("\\boxed{0.5}", item.answer, item.meta) == 1.0  # equivalent, not equal, strings


def test_an_unreachable_hub_dataset_is_one_line(monkeypatch):
    import datasets.config
    import huggingface_hub.constants

    # offline mode: what the library does without network, at once instead of after its retries
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(UserError) as err:
        get_task("hf:nobody-here/no-such-dataset-28")
    text = str(err.value)
    assert (
        text.startswith(
            "task 'hf:nobody-here/no-such-dataset-28': the dataset is not in the local cache and the "
            "Hub cannot be reached"
        )
        and "\n" not in text
    )


def test_a_user_reward_function_gets_trl_arguments(tmp_path):
    data = write_jsonl(tmp_path / "d.jsonl", [{"prompt": Q, "answer": "7", "level": 2}])
    (tmp_path / "rewards.py").write_text(
        "CALLS = []\n"
        "def close(prompts, completions, answer, **kwargs):\n"
        "    CALLS.append((prompts, completions, answer, kwargs))\n"
        "    return [1.0 if c[0]['content'].strip() == a else 0.25 for c, a in zip(completions, answer)]\n"
    )
    task = get_task(str(data), reward=f"{tmp_path / 'rewards.py'}:close", test_fraction=0.0)
    item = task.split_items("train")[0]
    assert TRL_ROW in item.meta
    assert task.verify(" 7 ", item.answer, item.meta) == 1.0 and task.verify("8", item.answer, item.meta) == 0.25
    prompts, completions, answer, kwargs = task.reward.fn.__globals__["CALLS"][0]
    # the row's prompt as messages, the completion as an assistant message, the row's other columns by name
    assert prompts == [Q] and completions == [[{"role": "assistant", "content": " 7 "}]]
    assert answer == ["7"] and kwargs == {"level": [2]}


@pytest.mark.parametrize(
    "source,function,message",
    [
        (
            "def f(prompts, completions, **kw):\n    return [1.0]\n",
            "nope",
            r"defines no function 'nope' \(its functions: f\)",
        ),
        ("import no_such_module_28\n", "f", r"importing .*rewards.py failed: ModuleNotFoundError: No module named"),
        ("def f(x):\n    return [1.0]\n", "f", r"cannot be called as fn\(prompts=..., completions=..., answer=...\)"),
    ],
)
def test_a_broken_reward_file_is_one_line(tmp_path, source, function, message):
    data = write_jsonl(tmp_path / "d.jsonl", [{"prompt": "1+1=", "answer": "2"}])
    (tmp_path / "rewards.py").write_text(source)
    with pytest.raises(UserError, match=message) as err:
        get_task(str(data), reward=f"{tmp_path / 'rewards.py'}:{function}")
    assert "\n" not in str(err.value)
    with pytest.raises(MissingPathError, match="does not exist"):
        get_task(str(data), reward=f"{tmp_path / 'none.py'}:f")


def test_eval_prompt_options_are_the_run_config_keys():
    from reasonrl.commands.evaluate import _prompting

    got = _prompting(["format=chat", "chat_template_kwargs.enable_thinking=false", "max_tokens=64"])
    assert (got.format, got.chat_template_kwargs, got.max_tokens, got.overflow) == (
        "chat",
        {"enable_thinking": False},
        64,
        "drop",
    )
    with pytest.raises(UserError, match=r"unknown config key 'prompt.formt' \(did you mean 'prompt.format'\?\)"):
        _prompting(["formt=chat"])
    with pytest.raises(UserError, match=r"option --prompt 'prompt.overflow' = 'cut' is out of range"):
        _prompting(["overflow=cut"])


def test_prompt_cap_against_the_context_length():
    assert prompt_cap(None, 64, 256) == 192  # 256 positions - 64 new tokens
    assert prompt_cap(100, 64, 256) == 100 and prompt_cap(None, 64, None) is None and prompt_cap(50, 64, None) == 50
    with pytest.raises(
        UserError, match=r"prompt.max_tokens=200 \+ max_new_tokens=64 = 264 exceed M's context length 256"
    ):
        prompt_cap(200, 64, 256, "M")
    with pytest.raises(UserError, match=r"max_new_tokens=256 leaves no room for a prompt in M's context length 256"):
        prompt_cap(None, 256, 256, "M")


def test_too_long_prompts_are_dropped_and_counted_or_cut_from_the_left(tmp_path):
    # the character tokenizer: one token per character, nothing added; prompts of 5, 10, 15 and 20 tokens
    rows = [{"prompt": "x" * (n - 1) + str(n // 5), "answer": "1"} for n in (5, 10, 15, 20)]
    task = get_task(str(write_jsonl(tmp_path / "p.jsonl", rows)), test_fraction=0.0)
    fmt = PromptFormatter.build(build_char_tokenizer(), None, "plain")
    dropped = limit_prompts(task, fmt, 12, "drop")
    kept = take_items(dropped, "train", 4, unique=False)  # two epochs of the 2 rows that fit: every row met once
    assert sorted(len(it.prompt) for it in kept) == [5, 5, 10, 10]
    assert dropped.counts == {"train": {"dropped": 2, "truncated": 0}}  # distinct problems, not draws
    cut = limit_prompts(task, fmt, 12, "truncate_left")
    got = sorted((it.prompt for it in take_items(cut, "train", 4)), key=len)
    # 15 -> its last 12 characters ("xxxxxxxxxxx3"), 20 -> "xxxxxxxxxxx4"; 5 and 10 untouched
    assert got == ["xxxx1", "xxxxxxxxx2", "x" * 11 + "3", "x" * 11 + "4"]
    assert cut.counts == {"train": {"dropped": 0, "truncated": 2}}
    assert cut.report() == {
        "max_prompt_tokens": 12,
        "overflow": "truncate_left",
        "train_dropped": 0,
        "train_truncated": 2,
    }
    with pytest.raises(UserError, match=r"10000 train prompts in a row are longer than 3 tokens"):
        take_items(limit_prompts(task, fmt, 3, "drop"), "train", 1)


def test_a_conversation_is_cut_in_its_first_turn_after_the_system_prompt():
    tok = build_tokenizer()
    fmt = PromptFormatter.build(tok, None, "chat")
    long = [Q[0], {"role": "user", "content": "What is 3 plus 4? " * 20}]
    full = fmt.n_tokens(long)
    from reasonrl.tasks.limits import truncate_left

    out = truncate_left(fmt, long, full - 10)
    assert fmt.n_tokens(out) <= full - 10 and out[0] == Q[0]  # the system turn and the template stay whole
    assert long[1]["content"].endswith(out[1]["content"]) and len(out[1]["content"]) < len(long[1]["content"])
    with pytest.raises(UserError, match="cannot be cut to 5 tokens from the left"):
        truncate_left(fmt, long, 5)  # the template alone is longer


def test_drafts_go_into_the_user_turn_of_a_conversation(tmp_path):
    from reasonrl.data.draft_task import DraftTask
    from reasonrl.data.drafts import draft_prompt

    task = get_task(str(write_jsonl(tmp_path / "c.jsonl", [{"prompt": Q, "answer": "7"}])), test_fraction=0.0)
    item = next(DraftTask(task, None, "no_draft").iter_items("train", 0))
    # the system turn stays; the user turn holds the drafts template around the question (Thinking: N/A)
    assert item.prompt == [Q[0], {"role": "user", "content": draft_prompt("What is 3 plus 4?", None)}]
