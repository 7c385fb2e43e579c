"""The word_math task and the free-form answer reader (issue 42), on outputs SmolLM2-135M-Instruct
really wrote (greedy, the task's system prompt; docs/models-and-data.md), numbers worked by hand."""

from __future__ import annotations

import re

import pytest

from reasonrl.errors import UserError
from reasonrl.rewards.answers import EXTRACTORS, extract_final_number, stated_answer
from reasonrl.tasks import get_task, take_items
from reasonrl.tasks.word_math import SYSTEM_PROMPT

# (completion, what the reader must return): the first eight are the model's own words
REAL = [
    # states 18 (right), then runs on to the budget inventing new sums: the first statement counts
    (
        "Mia has 14 toys.\nA friend gives Mia 4 more toys, so Mia now has 14 + 4 = 18 toys.\nThe answer is 18.\n\n"
        "Mia has 14 toys now.\nA friend gives Mia 18 toys, so Mia now has 14 + 18 = 22 toys.\nThe answer is 22.\n\n"
        "Mia has 14 toys now.\nA friend gives Mia 22 toys, so Mia now has 14 + 22 = 36 toys.\nThe",
        "18",
    ),
    # a statement that is an expression: the last number of its sentence
    (
        "There are 7 boxes with 7 toys in each box. To find out how many toys Anna has in all, we multiply the "
        "number of boxes by the number of toys in each box.\n\nThe answer is 7 * 7 = 49. So, Anna has 49 toys in all.",
        "49",
    ),
    # GSM8K's marker first, then a colon statement
    ("Sara has 10 apples / 5 boxes = 2 apples per box.\n#### 2\nThe answer is: 2", "2"),
    # no statement: the last number of the text
    (
        "To solve this problem, we need to find out how many books each friend gets by dividing 12 by 3.\n"
        "12 / 3 = 3 books.\nEach friend gets 3 books.\n\nSo, there are 3 books for each of Tom's friends.",
        "3",
    ),
    # "To find the answer, ..." is no statement (no "is", ":" or "="): the statement after it counts
    (
        "So, she has 5 - 3 = 2 apples left.\n\nTo find the answer, we can use the formula for this type of "
        "problem: 5 - 3 = 2.\n\nThe answer is 2.",
        "2",
    ),
    # a statement without a number is skipped ("The answer is not just any number, ..."): last number
    (
        "Ben has 12 cards and gives 7 of them away, so Ben has 12 - 7 = 2 cards left.\n\nThe answer is not just "
        "any number, but a number inside a number inside a number",
        "2",
    ),
    (
        "So, 63 + 14 = 87.\nThe final answer is 87.\n\nIn this example, we used a simple arithmetic operation to "
        "add 63 and 14, which is a common arithmetic operation in mathematics.",
        "87",
    ),
    ("3 - 2 - 0 = 42", "42"),
    # the tag wins over everything; its last number; a tag without a number reads as no answer
    ("The answer is 11.\n<answer>12 apples</answer>", "12"),
    ("<answer>7</answer> then <answer>9</answer>", "9"),
    ("<answer>twelve</answer> The answer is 12.", None),
    ("so the total is \\boxed{49} apples, the answer is 50.", "49"),
    # numbers normalised: thousands, a decimal point inside the sentence, a sign
    ("The answer is 1,200.", "1200"),
    ("The answer is 2.50 dollars.", "2.5"),
    ("The answer is -3.", "-3"),
    ("I cannot tell.", None),
]


@pytest.mark.parametrize("text,want", REAL)
def test_the_final_number_reader_on_real_outputs(text, want):
    assert extract_final_number(text) == want
    assert EXTRACTORS["final_number"](text) == want  # the name a data file's `extract` option takes


def test_stated_answer_takes_the_first_statement_with_a_number():
    assert stated_answer("Answer: 4. Later the answer is 5.") == "4"
    assert stated_answer("The answer is unclear.\nAnswer = 6") == "6"
    assert stated_answer("no statement 5") is None


def test_word_math_items_are_chat_prompts_with_the_system_prompt():
    item = take_items(get_task("word_math"), "test", 1)[0]
    assert [m["role"] for m in item.prompt] == ["system", "user"] and item.prompt[0]["content"] == SYSTEM_PROMPT
    assert "<answer></answer>" in SYSTEM_PROMPT and item.prompt[1]["content"] == item.key
    bare = take_items(get_task("word_math", system_prompt=""), "test", 1)[0]
    assert [m["role"] for m in bare.prompt] == ["user"]


def solve_story(text: str) -> int:
    """An independent reading of a story (not the generator's code): the operation from its words."""
    n = [int(x) for x in re.findall(r"\d+", text)]
    if "boxes with" in text:
        value = n[0] * n[1]
    elif "equally among" in text:
        value = n[0] // n[1]
    elif "gives" in text and "away" in text:
        value = n[0] - n[1]
    else:
        value = n[0] + n[1]
    if "loses" in text:
        value -= n[2]
    elif "finds" in text:
        value += n[2]
    return value


@pytest.mark.parametrize("steps", [1, 2])
def test_every_answer_matches_the_story(steps):
    task = get_task("word_math", steps=steps)
    for split in ("train", "test"):
        for item in take_items(task, split, 300, seed=3):
            assert int(item.answer) == solve_story(item.key) >= 0, item.key
            assert steps == 1 or re.search(r"\b(loses|finds)\b", item.key)


def test_the_splits_never_share_a_question():
    task = get_task("word_math")
    train = {it.key for it in take_items(task, "train", 1500, seed=0)}
    test = {it.key for it in take_items(task, "test", 300, seed=1)}
    assert not train & test


def test_verify_and_the_tag_rate():
    task = get_task("word_math")
    outs = ["The answer is 18.", "<answer>18</answer>", "So 14 + 4 = 17."]
    assert [task.verify(o, "18", {}) for o in outs] == [1.0, 1.0, 0.0]
    assert task.diagnostics(outs, [{}] * 3, [1.0, 1.0, 0.0]) == {"answer_tag_rate": pytest.approx(1 / 3)}


def test_bad_options_are_named():
    with pytest.raises(UserError, match="ops must be a comma list of add, sub, mul, div, got 'add,pow'"):
        get_task("word_math", ops="add,pow")
    with pytest.raises(UserError, match="unknown option"):
        get_task("word_math", digits=2)


def test_reasoning_gym_reads_a_free_form_answer_when_asked():
    """rg:chain_sum as the model answers it: no tag, so reasoning-gym's tag convention scores 0."""
    tagged, free = get_task("rg:chain_sum"), get_task("rg:chain_sum", answer="final_number")
    meta = {"rg_entry": {"question": "5 + 2 =", "answer": "7", "metadata": {}}}
    assert tagged.verify("5 + 2 = 7", "7", meta) == 0.0 and free.verify("5 + 2 = 7", "7", meta) == 1.0
    assert free.extract_answer("5 + 2 = 7") == "7" and tagged.extract_answer("5 + 2 = 7") is None
    with pytest.raises(UserError, match="answer='boxed' is not one of tag, final_number"):
        get_task("rg:chain_sum", answer="boxed")
