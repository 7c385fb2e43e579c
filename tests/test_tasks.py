import json

import pytest

from reasonrl.tasks import Item, get_task, in_test_split, take_items
from reasonrl.tasks.arithmetic import ArithmeticTask, extract_answer, solve


def test_addition_chain_of_thought_by_hand():
    # 347 + 85: 7+5+0=12 (write 2, carry 1), 4+8+1=13 (write 3, carry 1), 3+0+1=4 -> 432
    demo, value = solve([347, 85], ["+"])
    assert demo == "7+5+0=12,4+8+1=13,3+0+1=4\nA:432"
    assert value == 432


def test_subtraction_borrow_and_negative_by_hand():
    # 502 - 47: 2-7 borrows: 12-7-0=5; 0-4-1 borrows: 10-4-1=5; 5-0-1=4 -> 455
    assert solve([502, 47], ["-"]) == ("12-7-0=5,10-4-1=5,5-0-1=4\nA:455", 455)
    # 85 - 347 = -(347 - 85): 7-5-0=2, 4-8 borrows: 14-8-0=6, 3-0-1=2 -> -262
    assert solve([85, 347], ["-"]) == ("~7-5-0=2,14-8-0=6,3-0-1=2\nA:-262", -262)


def test_three_terms_write_intermediate_results():
    # 12+9=21 (2+9+0=11, 1+0+1=2), then 21-30 = -(30-21): 10-1-0=9, 3-2-1=0 -> -9
    assert solve([12, 9, 30], ["+", "-"]) == ("2+9+0=11,1+0+1=2>21\n~10-1-0=9,3-2-1=0\nA:-9", -9)


@pytest.mark.parametrize("options", [{}, {"ops": "+-", "terms": 3, "max_digits": 4}, {"ops": "-", "min_digits": 2}])
def test_every_demonstration_verifies_and_matches_python(options):
    task = ArithmeticTask(**options)
    for item in take_items(task, "train", 300, seed=3):
        assert item.answer == str(eval(item.key))  # noqa: S307 - our own generated expressions
        assert task.verify(item.demo, item.answer, item.meta) == 1.0
        assert len(item.demo) + 1 <= task.max_new_tokens  # +1 for EOS


@pytest.mark.parametrize(
    "text,expected",
    [
        ("A:432", "432"),
        ("A: 007", "7"),
        ("A:-0", "0"),
        ("A:-12", "-12"),
        ("A:1\nA:2", "2"),  # the last answer line wins
        ("7+5=12", None),
        ("A:", None),
        ("", None),
    ],
)
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


def test_verifier_rejects_wrong_and_unparsed():
    task = ArithmeticTask()
    assert task.verify("...\nA:433", "432", {}) == 0.0
    assert task.verify("no answer here", "432", {}) == 0.0
    assert task.verify("x\nA:0432", "432", {}) == 1.0  # leading zero is the same number


def test_arithmetic_splits_are_disjoint_and_deterministic():
    task = ArithmeticTask()
    test = {it.key for it in take_items(task, "test", 500, seed=0)}
    train = {it.key for s in (0, 1, 2) for it in take_items(task, "train", 3000, seed=s, unique=False)}
    assert len(test) == 500 and not test & train
    again = [it.key for it in take_items(task, "test", 50, seed=0)]
    assert again == [it.key for it in take_items(ArithmeticTask(), "test", 50, seed=0)]
    assert again != [it.key for it in take_items(task, "test", 50, seed=1)]


def test_split_membership_ignores_seed_and_fraction_is_respected():
    keys = [f"{a}+{b}" for a in range(60) for b in range(60)]
    frac = sum(in_test_split(k, 0.1) for k in keys) / len(keys)
    assert 0.08 < frac < 0.12  # 3600 keys: binomial std ~0.005


def test_unknown_options_name_the_valid_ones():
    with pytest.raises(ValueError, match="digits.*valid.*max_digits"):
        get_task("arithmetic", digits=3)
    with pytest.raises(ValueError, match="unknown task 'arithmetik'"):
        get_task("arithmetik")


def test_reasoning_gym_task_scores_with_its_own_verifier():
    task = get_task("rg:chain_sum", max_terms=3, max_digits=2)
    items = take_items(task, "test", 20, seed=0)
    for it in items:
        assert task.verify(it.demo, it.answer, it.meta) == 1.0
        assert task.verify(f"<answer>{int(it.answer) + 1}</answer>", it.answer, it.meta) == 0.0
        assert task.verify(it.answer, it.answer, it.meta) == 0.0  # answer outside the tag: unparsed
    train = {it.key for it in take_items(task, "train", 400, seed=0)}
    assert not train & {it.key for it in items}
    with pytest.raises(ValueError, match="max_term.*valid"):
        get_task("rg:chain_sum", max_term=3)


def _write_jsonl(path, rows):
    path.write_text("\n".join(json.dumps(r) if isinstance(r, dict) else r for r in rows) + "\n")
    return path


def test_jsonl_task_with_column_mapping_and_reward_by_name(tmp_path):
    rows = [{"q": f"What is {i}+{i}?", "a": str(2 * i), "level": i % 3} for i in range(40)]
    path = _write_jsonl(tmp_path / "d.jsonl", rows)
    task = get_task(str(path), prompt_column="q", answer_column="a", reward="numeric", extract="boxed")
    items = task.split_items("train") + task.split_items("test")
    assert len(items) == 40 and {it.key for it in task.split_items("test")}.isdisjoint(
        it.key for it in task.split_items("train")
    )
    item = items[0]
    assert item.meta == {"level": int(item.answer) // 2 % 3}
    assert task.verify(f"so \\boxed{{{item.answer}}}", item.answer, item.meta) == 1.0
    assert task.verify("\\boxed{-1}", item.answer, item.meta) == 0.0


def test_malformed_jsonl_row_names_file_and_line(tmp_path):
    path = _write_jsonl(
        tmp_path / "bad.jsonl", [{"prompt": "a", "answer": "1"}, "{not json", {"prompt": "b", "answer": "2"}]
    )
    with pytest.raises(ValueError, match=r"bad.jsonl:2: not valid JSON"):
        get_task(str(path))
    path = _write_jsonl(tmp_path / "miss.jsonl", [{"prompt": "a", "answer": "1"}, {"prompt": "b"}])
    with pytest.raises(ValueError, match=r"row 1: missing column\(s\) \['answer'\]"):
        get_task(str(path))


def test_parquet_and_hf_dataset_dir_with_explicit_test_file(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    from datasets import Dataset

    train = {"prompt": ["1+1=", "2+2="], "answer": ["2", "4"]}
    pq.write_table(pa.table(train), tmp_path / "train.parquet")
    Dataset.from_dict({"prompt": ["3+3="], "answer": ["6"]}).save_to_disk(str(tmp_path / "test_ds"))
    task = get_task(str(tmp_path / "train.parquet"), test_path=str(tmp_path / "test_ds"), extract="none")
    assert [it.prompt for it in task.split_items("train")] == ["1+1=", "2+2="]
    assert [it.prompt for it in task.split_items("test")] == ["3+3="]
    assert task.verify(" 6 ", "6", {}) == 1.0
    stream = task.iter_items("train", seed=0)
    assert sorted(next(stream).prompt for _ in range(2)) == ["1+1=", "2+2="]  # one epoch visits each row


def test_item_is_a_plain_record():
    it = Item(key="k", prompt="p", answer="a")
    assert it.meta == {} and it.demo is None


def test_spaced_style_of_a_demonstration_by_hand():
    from reasonrl.tasks.arithmetic import SPACED_RE, spaced

    assert spaced("7+5+0=12,4+8+1=13\nA:432") == "7 + 5 + 0 = 12,4 + 8 + 1 = 13\nA:432"
    # the negative marker and an intermediate result keep their form; the answer line is untouched
    assert spaced("~7-5-0=2>-132\nA:-139") == "~7 - 5 - 0 = 2>-132\nA:-139"
    import re

    assert re.search(SPACED_RE, "1 + 2") and not re.search(SPACED_RE, "1+2 =3")


def test_spaced_rate_marks_a_hash_chosen_share_of_demos_and_widens_the_budget():
    from reasonrl.tasks import get_task, take_items
    from reasonrl.tasks.arithmetic import SPACED_RE
    import re

    plain, styled = get_task("arithmetic"), get_task("arithmetic", spaced_rate=0.3)
    assert plain.max_new_tokens == 51  # the default budget is unchanged
    assert styled.max_new_tokens == 51 + 4 * 6  # 4 columns (max_digits + 1) x 2 spaces x 3 operators
    items = take_items(styled, "train", 400)
    share = sum(bool(re.search(SPACED_RE, it.demo)) for it in items) / len(items)
    assert 0.22 < share < 0.38  # 0.3 +- 3.5 binomial std (0.023)
    assert all(styled.verify(it.demo, it.answer, it.meta) == 1.0 for it in items)
    assert len(max((it.demo for it in items), key=len)) <= styled.max_new_tokens
    assert styled.diagnostics(["1 + 2 = 3\nA:3", "1+2=3\nA:3"], [{}, {}], [1.0, 1.0]) == {"spaced_rate": 0.5}
    assert plain.diagnostics(["1 + 2"], [{}], [0.0]) == {}
    with pytest.raises(ValueError, match="spaced_rate"):
        get_task("arithmetic", spaced_rate=1.5)
