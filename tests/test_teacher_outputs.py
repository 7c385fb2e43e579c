"""The JSONL loader of users' teacher outputs (distill/teacher_outputs.py): rows, grouping, and bad rows
named by file and line."""

import json

import pytest

from reasonrl.distill.teacher_outputs import TeacherOutput, load_teacher_outputs, outputs_by_key
from reasonrl.errors import UserError


def write(tmp_path, rows, name="t.jsonl"):
    path = tmp_path / name
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return path


def test_rows_load_in_order_and_group_by_key(tmp_path):
    path = write(
        tmp_path,
        [
            {"key": "a", "prompt": "1+1=?\n", "completion": "A:2"},
            "",
            {"key": 7, "prompt": "p", "completion": "c", "teacher": "big", "correct": False},
            {"key": "a", "prompt": "1+1=?\n", "completion": "A:3", "correct": True},
        ],
    )
    out = load_teacher_outputs(path)
    assert out[1] == TeacherOutput(key="7", prompt="p", completion="c", teacher="big", correct=False)
    grouped = outputs_by_key(out)
    assert list(grouped) == ["a", "7"] and [o.completion for o in grouped["a"]] == ["A:2", "A:3"]


@pytest.mark.parametrize(
    "row,message",
    [
        ({"key": "a", "prompt": "p"}, r"t.jsonl:2: missing completion"),
        ({"key": "a", "prompt": "p", "completion": "c", "score": 1}, r"t.jsonl:2: unknown key\(s\) score"),
        ({"key": None, "prompt": "p", "completion": "c"}, r"t.jsonl:2: 'key' must be"),
        ({"key": "a", "prompt": "", "completion": "c"}, r"t.jsonl:2: 'prompt' must be a non-empty string"),
        ({"key": "a", "prompt": "p", "completion": 3}, r"t.jsonl:2: 'completion' must be"),
        (
            {"key": "a", "prompt": "p", "completion": "c", "correct": "yes"},
            r"t.jsonl:2: 'correct' must be true or false",
        ),
        ("{not json", r"t.jsonl:2: not valid JSON"),
    ],
)
def test_bad_rows_are_named_by_file_and_line(tmp_path, row, message):
    path = write(tmp_path, [{"key": "ok", "prompt": "p", "completion": "c"}, row])
    with pytest.raises(UserError, match=message):
        load_teacher_outputs(path)


def test_missing_and_empty_files(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        load_teacher_outputs(tmp_path / "nope.jsonl")
    (tmp_path / "e.jsonl").write_text("\n")
    with pytest.raises(UserError, match="no rows"):
        load_teacher_outputs(tmp_path / "e.jsonl")
