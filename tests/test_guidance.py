"""Task guidance: arithmetic's hints / critique / steps worked by hand, the JSONL loaders, GuidedTask."""

import json
import random

import pytest

from reasonrl.errors import UserError
from reasonrl.tasks import FileTask, GuidedTask, Item, get_task, load_guidance
from reasonrl.tasks import guidance as g


@pytest.fixture(scope="module")
def arith():
    return get_task("arithmetic")


def item(task, terms, ops):
    return task.make_item(terms, ops)


# -- hints ----------------------------------------------------------------------------------------


def test_hints_347_plus_85_by_hand(arith):
    # columns: 7+5+0=12 (carries 1), 4+8+1=13 (carries 1), 3+0+1=4 (no carry); 432 has 3 digits
    assert g.hints(arith, item(arith, [347, 85], ["+"])) == [
        "column 1 carries 1, column 2 carries 1",
        "3 columns, from the ones digit leftwards",
        "column 1 is 7+5+0=12",
        "the answer has 3 digits",
    ]


def test_hints_subtraction_borrows_and_negative_swap(arith):
    # 503-78: 13-8-0=5 (column 1 borrowed), 10-7-1=2 (column 2 borrowed), 5-0-1=4 -> 425
    assert g.hints(arith, item(arith, [503, 78], ["-"])) == [
        "column 1 borrows 1, column 2 borrows 1",
        "3 columns, from the ones digit leftwards",
        "column 1 is 13-8-0=5",
        "the answer has 3 digits",
    ]
    # 85-347 = -(347-85): 7-5-0=2, 14-8-0=6 (column 2 borrowed), 3-0-1=2 -> -262
    hs = g.hints(arith, item(arith, [85, 347], ["-"]))
    assert hs[0] == "column 2 borrows 1" and "85-347 is negative: write ~ and subtract 347-85" in hs
    assert hs[-1] == "the answer is negative and has 3 digits"


def test_hints_multi_term_per_line(arith):
    # 12+9 = 21 (2+9+0=11 carries, 1+0+1=2); 21-30 = -(30-21): 10-1-0=9 (borrow), 3-2-1=0 -> -9
    hs = g.hints(arith, item(arith, [12, 9, 30], ["+", "-"]))
    assert hs == [
        "work left to right, one line per operation: 2 lines",
        "line 1: column 1 carries 1",
        "line 1: 2 columns, from the ones digit leftwards",
        "line 1: column 1 is 2+9+0=11",
        "line 2: column 1 borrows 1",
        "line 2: 2 columns, from the ones digit leftwards",
        "line 2: column 1 is 10-1-0=9",
        "line 2: 21-30 is negative: write ~ and subtract 30-21",
        "the answer is negative and has 1 digit",
    ]


def test_hints_no_carry_and_at_least_three_distinct(arith):
    assert g.hints(arith, item(arith, [12, 3], ["+"]))[0] == "no column carries"  # 2+3=5, 1+0=1
    task = get_task("arithmetic", ops="+-", terms=3)
    for it in task.iter_items("train", 0):
        hs = g.hints(task, it)
        assert len(set(hs)) >= 3
        if it.key.endswith("9"):
            break


def test_hints_reject_a_key_that_is_not_a_problem(arith):
    with pytest.raises(UserError, match="'what' is not a problem key"):
        g.hints(arith, Item(key="what", prompt="what", answer="0"))


# -- steps, prefixes, critiques -------------------------------------------------------------------


def test_arithmetic_steps_and_prefix_keep_the_steps_before_k(arith):
    demo = "2+9+0=11,1+0+1=2>21\n~10-1-0=9,3-2-1=0\nA:-9"
    assert g.steps(arith, demo) == ["2+9+0=11", "1+0+1=2>21", "~10-1-0=9", "3-2-1=0", "A:-9"]
    assert g.prefix_before_step(arith, demo, 1) == ("", 0)
    assert g.prefix_before_step(arith, demo, 3) == ("2+9+0=11,1+0+1=2>21\n", 20)  # 8 + 1 + 10 + 1 chars
    assert g.prefix_before_step(arith, demo, 6) == (demo, len(demo))  # after the last step
    with pytest.raises(ValueError, match="step 7 is out of range"):
        g.prefix_before_step(arith, demo, 7)
    assert g.prefix_before_step(arith, "7+5+0=12, 4+8+1=13", 2) == ("7+5+0=12, ", 10)  # the space is kept


def test_generic_steps_split_on_blank_lines():
    class Plain:
        name = "plain"

    assert g.steps(Plain(), "A\n\nB\n\nC") == ["A", "B", "C"]
    assert g.prefix_before_step(Plain(), "A\n\nB\n\nC", 2) == ("A\n\n", 3)  # spec 7 (d): kept prefix "A"
    assert "Solution (steps are separated by blank lines" in g.critique_prompt(Plain(), Item("k", "Q?", "1"), "A")


def test_critique_wrong_second_step_347_plus_85(arith):
    it = item(arith, [347, 85], ["+"])
    c = g.critique(arith, it, "7+5+0=12,4+8+1=12,3+0+1=4\nA:422")
    assert (c.first_error, c.verdict) == (2, "incorrect")
    assert c.text == "step 2: 4+8+1 is 13, not 12\n<first_error>2</first_error>\n<verdict>incorrect</verdict>"
    assert g.parse_critique(c.text) == c


def test_critique_correct_spaced_and_wrong_answer(arith):
    it = item(arith, [347, 85], ["+"])
    for right in (it.demo, "7 + 5 + 0 = 12,4 + 8 + 1 = 13,3 + 0 + 1 = 4\nA: 432"):
        c = g.critique(arith, it, right)
        assert (c.first_error, c.verdict) == (None, "correct") and "<first_error>none</first_error>" in c.text
    c = g.critique(arith, it, "7+5+0=12,4+8+1=13,3+0+1=4\nA:431")
    assert c.first_error == 4 and "step 4: the answer line is A:432, not A:431" in c.text


def test_critique_wrong_carry_missing_step_extra_step_and_garbage(arith):
    it = item(arith, [347, 85], ["+"])
    c = g.critique(arith, it, "7+5+0=12,4+8+0=12,3+0+1=4\nA:422")  # forgot the carry into column 2
    assert c.first_error == 2 and "step 2: it should be 4+8+1=13, not 4+8+0=12" in c.text
    assert g.critique(arith, it, "7+5+0=12,4+8+1=13").first_error == 3  # stopped early: step 3 missing
    assert g.critique(arith, it, it.demo + "\nA:5").first_error == 5  # nothing may follow the answer
    for garbage in ("hello", "", "A:432"):
        assert g.critique(arith, it, garbage).first_error == 1


def test_critique_subtraction_and_multi_term(arith):
    it = item(arith, [85, 347], ["-"])  # ~7-5-0=2,14-8-0=6,3-0-1=2 / A:-262
    c = g.critique(arith, it, "~7-5-0=2,14-8-0=6,3-0-1=3\nA:-362")
    assert c.first_error == 3 and "step 3: 3-0-1 is 2, not 3" in c.text
    assert g.critique(arith, it, "7-5-0=2,14-8-0=6,3-0-1=2\nA:262").first_error == 1  # no ~ marker
    it = item(arith, [12, 9, 30], ["+", "-"])  # 2+9+0=11,1+0+1=2>21 / ~10-1-0=9,3-2-1=0 / A:-9
    c = g.critique(arith, it, "2+9+0=11,1+0+1=2>22\n~10-1-0=9,3-2-1=0\nA:-9")
    assert c.first_error == 2 and "the running total is 21, not 22" in c.text
    assert g.critique(arith, it, "2+9+0=11,1+0+1=2>21\n~10-1-0=9,3-2-1=1\nA:-19").first_error == 4


def test_parse_critique_reads_tags_and_rejects_contradictions():
    assert g.parse_critique("x <first_error>3</first_error> <verdict>incorrect</verdict>").first_error == 3
    assert g.parse_critique("<verdict>correct</verdict>").first_error is None
    assert g.parse_critique("<first_error>2</first_error><verdict>correct</verdict>") is None
    assert g.parse_critique("<first_error>2</first_error>") is None


def test_reference_solution_and_critique_prompt(arith):
    it = item(arith, [347, 85], ["+"])
    assert g.reference_solution(arith, it) == "7+5+0=12,4+8+1=13,3+0+1=4\nA:432"
    prompt = g.critique_prompt(arith, it, "7+5+0=12\nA:12")
    assert prompt.startswith("check 347+85=?\n7+5+0=12\nA:12\n")


def test_missing_methods_fail_loudly_naming_the_task():
    class Bare:
        name = "bare"

    it = Item("k", "Q?", "1")
    with pytest.raises(UserError, match=r"task 'bare' has no hints\(\).*GuidedTask\(task, hints=PATH\)"):
        g.hints(Bare(), it)
    with pytest.raises(UserError, match=r"task 'bare' has no reference_solution\(\)"):
        g.reference_solution(Bare(), it)
    with pytest.raises(UserError, match=r"task 'bare' has no critique\(\)"):
        g.critique(Bare(), it, "x")


def test_synthetic_critiques_name_the_corrupted_step(arith):
    pairs = g.synthetic_critiques(arith, 40, seed=3)
    assert len(pairs) == 40
    for p in pairs:
        demo = g.reference_solution(arith, arith.make_item(*_parse(p.meta["problem"])))
        done, got = g.steps(arith, demo), g.steps(arith, p.meta["completion"])
        # exactly one digit differs, and the first differing step is the target's first error
        assert sum(a != b for a, b in zip(demo, p.meta["completion"])) == 1
        first = next(k for k, (a, b) in enumerate(zip(done, got), 1) if a != b)
        assert p.meta["first_error"] == first and p.answer == "incorrect"
        assert p.demo == g.critique(arith, Item(p.meta["problem"], "", ""), p.meta["completion"]).text
        assert p.prompt == g.critique_prompt(arith, arith.make_item(*_parse(p.meta["problem"])), p.meta["completion"])
    assert [p.key for p in g.synthetic_critiques(arith, 40, seed=3)] == [p.key for p in pairs]  # deterministic
    kept = g.synthetic_critiques(arith, 20, seed=3, correct_rate=1.0)
    assert all(p.answer == "correct" and p.meta["first_error"] is None for p in kept)


def _parse(key):
    from reasonrl.tasks.arithmetic import parse_problem

    return parse_problem(key)


def test_corrupt_digit_changes_one_digit():
    rng = random.Random(0)
    out = g.corrupt_digit(get_task("arithmetic"), "7+5+0=12\nA:12", rng)
    assert len(out) == len("7+5+0=12\nA:12")
    assert sum(a != b for a, b in zip(out, "7+5+0=12\nA:12")) == 1


# -- loaders --------------------------------------------------------------------------------------


def write(tmp_path, name, rows):
    path = tmp_path / name
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return path


def test_load_guidance_kinds(tmp_path):
    h = write(tmp_path, "h.jsonl", [{"key": "1+2", "hints": ["add"]}, "", {"prompt": "Q?", "hints": ["a", "b"]}])
    assert load_guidance(h, "hints") == {"1+2": ["add"], "Q?": ["a", "b"]}
    s = write(tmp_path, "s.jsonl", [{"key": "1+2", "solution": "1+2+0=3\nA:3", "extra": 1}])
    assert load_guidance(s, "solutions") == {"1+2": "1+2+0=3\nA:3"}
    c = write(
        tmp_path,
        "c.jsonl",
        [
            {
                "key": "1+2",
                "completion": "A:4",
                "critique": "bad\n<first_error>1</first_error><verdict>incorrect</verdict>",
            },
            {"key": "1+2", "completion": "A:3", "critique": "fine", "verdict": "correct"},
        ],
    )
    table = load_guidance(c, "critiques")["1+2"]
    assert (table["A:4"].first_error, table["A:4"].verdict) == (1, "incorrect")
    assert (table["A:3"].first_error, table["A:3"].verdict, table["A:3"].text) == (None, "correct", "fine")


@pytest.mark.parametrize(
    "kind,rows,message",
    [
        ("hints", [{"key": "a", "hints": ["x"]}, {"hints": ["y"]}], r"h\.jsonl row 2: missing field 'prompt'"),
        ("hints", [{"key": "a", "hints": []}], r"h\.jsonl row 1: field 'hints' must be a non-empty list"),
        ("hints", [{"key": "a", "hints": "x"}], r"h\.jsonl row 1: field 'hints'"),
        (
            "hints",
            [{"key": "a", "hints": ["x"]}, "", {"key": "a", "hints": ["y"]}],
            r"h\.jsonl row 3: duplicate key 'a' \(first given in row 1\)",
        ),
        ("hints", [{"key": "a", "hints": ["x"]}, "{not json"], r"h\.jsonl row 2: not valid JSON"),
        ("hints", ["[1, 2]"], r"h\.jsonl row 1: expected a JSON object"),
        ("hints", [{"key": 7, "hints": ["x"]}], r"h\.jsonl row 1: field 'key' must be a non-empty string"),
        ("solutions", [{"key": "a"}], r"h\.jsonl row 1: missing field 'solution'"),
        ("solutions", [{"key": "a", "solution": ""}], r"h\.jsonl row 1: field 'solution' must be a non-empty string"),
        (
            "critiques",
            [{"key": "a", "critique": "c", "verdict": "correct"}],
            r"h\.jsonl row 1: missing field 'completion'",
        ),
        (
            "critiques",
            [{"key": "a", "completion": "x", "critique": "no tags"}],
            r"h\.jsonl row 1: field 'verdict' missing",
        ),
        (
            "critiques",
            [{"key": "a", "completion": "x", "critique": "c", "verdict": "incorrect", "first_error": 0}],
            r"h\.jsonl row 1: field 'first_error' must be a 1-based step number",
        ),
        (
            "critiques",
            [{"key": "a", "completion": "x", "critique": "c", "verdict": "correct", "first_error": 2}],
            r"h\.jsonl row 1: field 'first_error' is 2 but the verdict is 'correct'",
        ),
        (
            "critiques",
            [{"key": "a", "completion": "x", "critique": "c", "verdict": "correct"}] * 2,
            r"h\.jsonl row 2: duplicate key 'a' with this completion",
        ),
    ],
)
def test_load_guidance_errors_name_file_row_and_field(tmp_path, kind, rows, message):
    with pytest.raises(UserError, match=message):
        load_guidance(write(tmp_path, "h.jsonl", rows), kind)


def test_load_guidance_missing_file_empty_file_and_unknown_kind(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.jsonl does not exist"):
        load_guidance(tmp_path / "nope.jsonl", "hints")
    with pytest.raises(UserError, match="has no rows"):
        load_guidance(write(tmp_path, "e.jsonl", [""]), "hints")
    with pytest.raises(UserError, match="unknown guidance kind 'hint'"):
        load_guidance(write(tmp_path, "e.jsonl", [""]), "hint")


# -- GuidedTask -----------------------------------------------------------------------------------


def test_guided_file_task(tmp_path):
    data = write(tmp_path, "d.jsonl", [{"prompt": f"Q{i}?", "answer": str(i)} for i in range(6)])
    task = FileTask(str(data), test_fraction=0.0)
    hints = write(tmp_path, "h.jsonl", [{"prompt": f"Q{i}?", "hints": [f"think {i}"]} for i in range(5)])
    sols = write(tmp_path, "s.jsonl", [{"key": "Q1?", "solution": "<answer>1</answer>"}])
    crits = write(
        tmp_path,
        "c.jsonl",
        [
            {
                "key": "Q1?",
                "completion": "step\n\n<answer>2</answer>",
                "critique": "wrong <first_error>2</first_error><verdict>incorrect</verdict>",
            }
        ],
    )
    guided = GuidedTask(task, hints=hints, solutions=sols, critiques=crits)
    items = {it.key: it for it in guided.split_items("train")}  # other attributes pass through
    assert g.hints(guided, items["Q3?"]) == ["think 3"]
    assert g.reference_solution(guided, items["Q1?"]) == "<answer>1</answer>"
    assert g.critique(guided, items["Q1?"], "step\n\n<answer>2</answer>").first_error == 2
    assert g.prefix_before_step(guided, "step\n\n<answer>2</answer>", 2) == ("step\n\n", 6)
    assert guided.verify("<answer>3</answer>", "3", {}) == 1.0 and guided.name == task.name
    with pytest.raises(UserError, match=r"hints file .*h\.jsonl has no row for problem key 'Q5\?'"):
        g.hints(guided, items["Q5?"])
    with pytest.raises(UserError, match=r"solutions file .*s\.jsonl has no row for problem key 'Q2\?'"):
        g.reference_solution(guided, items["Q2?"])
    with pytest.raises(UserError, match=r"critiques file .*c\.jsonl has no critique of completion"):
        g.critique(guided, items["Q1?"], "other")


def test_guided_arithmetic_keeps_its_own_methods_for_kinds_without_a_file(tmp_path, arith):
    hints = write(tmp_path, "h.jsonl", [{"key": "347+85", "hints": ["line the digits up"]}])
    guided = GuidedTask(arith, hints=hints)
    it = item(arith, [347, 85], ["+"])
    assert g.hints(guided, it) == ["line the digits up"]  # the file wins for its kind
    assert g.critique(guided, it, it.demo).verdict == "correct"  # the task's own critique
    assert g.steps(guided, it.demo) == ["7+5+0=12", "4+8+1=13", "3+0+1=4", "A:432"]
    with pytest.raises(UserError, match="needs at least one of hints=, solutions=, critiques="):
        GuidedTask(arith)


def test_guidance_files_from_the_run_config_wrap_the_task(tmp_path):
    from reasonrl.config.train import split_config
    from reasonrl.loop.run import task_for
    from reasonrl.tasks import get_task

    item = next(get_task("arithmetic").iter_items("train", 0))
    path = tmp_path / "hints.jsonl"
    path.write_text(json.dumps({"key": item.key, "hints": ["carry twice"]}) + "\n")
    cfg, _ = split_config({"guidance": {"hints": str(path)}})
    task = task_for(cfg)
    assert isinstance(task, GuidedTask) and g.hints(task, item) == ["carry twice"]
    assert not isinstance(task_for(split_config({})[0]), GuidedTask)  # no file: the task as it is
    cfg, _ = split_config({"guidance": {"solutions": str(tmp_path / "missing.jsonl")}})
    with pytest.raises(UserError, match="missing.jsonl"):
        task_for(cfg)


def test_a_binary_guidance_file_is_named(tmp_path):
    path = tmp_path / "hints.jsonl"
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(UserError, match=r"hints\.jsonl: not a UTF-8 text file"):
        load_guidance(path, "hints")
