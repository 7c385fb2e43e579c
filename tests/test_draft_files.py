"""The drafts JSONL loader (data/draft_files.py): schema, defaults, and errors naming file and row."""

import json

import pytest

from reasonrl.data.draft_files import DraftEntry, draft_line, load_drafts
from reasonrl.errors import MissingPathError, UserError


def write(tmp_path, rows, name="d.jsonl"):
    path = tmp_path / name
    path.write_text("".join(r if isinstance(r, str) else json.dumps(r) + "\n" for r in rows))
    return path


def test_load_drafts_groups_rows_by_key_in_file_order(tmp_path):
    path = write(
        tmp_path,
        [
            {"key": "1+2", "draft": "a", "correct": False},
            {"problem": "Q?", "draft": "b"},
            "\n",  # blank lines are skipped but still counted as lines
            {"key": "1+2", "draft": "", "correct": True, "quasi": True},
        ],
    )
    got = load_drafts(path)
    assert got == {
        "1+2": [DraftEntry("a", False, None, 1), DraftEntry("", True, True, 4)],
        "Q?": [DraftEntry("b", None, None, 2)],
    }


def test_draft_line_round_trips(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text(draft_line("3+4", "3+4+0=8\nA:8", correct=False, quasi=False) + draft_line("3+4", "x"))
    assert load_drafts(path)["3+4"] == [DraftEntry("3+4+0=8\nA:8", False, False, 1), DraftEntry("x", None, None, 2)]


@pytest.mark.parametrize(
    "row,message",
    [
        ({"draft": "a"}, "exactly one of 'key' and 'problem'"),
        ({"key": "k", "problem": "p", "draft": "a"}, "exactly one of 'key' and 'problem'"),
        ({"key": "", "draft": "a"}, "'key' must be a non-empty string"),
        ({"key": 3, "draft": "a"}, "'key' must be a non-empty string"),
        ({"key": "k"}, "'draft' must be a string"),
        ({"key": "k", "draft": None}, "'draft' must be a string"),
        ({"key": "k", "draft": "a", "correct": "yes"}, "'correct' must be true or false"),
        ({"key": "k", "draft": "a", "quasi": 1}, "'quasi' must be true or false"),
        ({"key": "k", "draft": "a", "correct": True, "quasi": False}, "contradicts"),
        ({"key": "k", "draft": "a", "score": 1}, "unknown field(s) ['score']"),
    ],
)
def test_bad_rows_are_named_by_file_and_row(tmp_path, row, message):
    path = write(tmp_path, [{"key": "ok", "draft": "fine"}, row])
    with pytest.raises(UserError, match="row 2") as err:
        load_drafts(path)
    assert message in str(err.value) and str(path) in str(err.value)


def test_not_json_not_an_object_missing_and_empty(tmp_path):
    with pytest.raises(UserError, match=r"d.jsonl row 1: not valid JSON"):
        load_drafts(write(tmp_path, ["{nope\n"]))
    with pytest.raises(UserError, match=r"row 1: expected a JSON object, got list"):
        load_drafts(write(tmp_path, [[1, 2]]))
    with pytest.raises(MissingPathError, match="does not exist"):
        load_drafts(tmp_path / "absent.jsonl")
    with pytest.raises(UserError, match="has no rows"):
        load_drafts(write(tmp_path, ["\n"]))
