"""The answer extractors and the number canon at their edges (issue 45: mutation survivors of
``rewards/answers.py``). Each expected value is read off the input by hand."""

from __future__ import annotations

from reasonrl.rewards.answers import (
    _unwrap,
    extract_a_colon,
    extract_answer_line,
    extract_tag,
    extract_whole,
    normalize_number,
    parse_number,
)


def test_a_colon_takes_the_token_after_the_last_marker():
    assert extract_a_colon("A:1 then A: 2 and finally A:   3 done") == "3"  # three markers: the last
    assert extract_a_colon("A:12\nA:7") == "7"
    assert extract_a_colon("A: 5") == "5"
    assert extract_a_colon("a: 5") is None  # the marker is upper case
    assert extract_a_colon("no marker at all") is None


def test_answer_line_takes_the_rest_of_the_last_answer_line():
    text = "work\nAnswer: 1\nmore work\n  Answer:  2 \nAnswer:   $x+1$   \ntrailing"
    assert extract_answer_line(text) == "$x+1$"  # the third of three, stripped on both sides
    assert extract_answer_line("Answer: 42") == "42"
    assert extract_answer_line("answer: 42") is None  # the case is the format's
    assert extract_answer_line("The Answer: 42") is None  # the line must start with it
    assert extract_answer_line("nothing here") is None


def test_whole_and_tag_extractors():
    assert extract_whole("  the whole thing \n") == "the whole thing"
    assert extract_whole(" \n\t") is None and extract_whole("") is None
    tag = extract_tag()  # the default tag is "answer"
    assert tag.__name__ == "extract_answer_tag"
    assert tag("<answer> 1 </answer> x <answer>\n2\n</answer>") == "2"  # the last one, across lines, stripped
    assert tag("<ans>3</ans>") is None and extract_tag("ans")("<ans>3</ans>") == "3"


def test_exponent_bound_is_inclusive():
    # Decimal.adjusted() is the exponent of the leading digit: 1e1000 -> 1000 and 1e-1000 -> -1000 are kept,
    # 1e1001 / 1e-1001 are refused (a completion cannot make the canon build a million-digit string)
    assert normalize_number("1e1000") == "1" + "0" * 1000
    assert normalize_number("1e-1000") == "0." + "0" * 999 + "1"
    assert normalize_number("1e1001") is None and normalize_number("1e-1001") is None
    # a number the canon keeps but a float cannot hold is not a parsed number
    assert parse_number("1e400") is None and parse_number("1e300") == 1e300


def test_unwrap_peels_only_whole_pairs():
    assert _unwrap("\\[ 3 \\]") == "3" and _unwrap("\\( -2 \\)") == "-2"
    assert _unwrap("$$\\boxed{4}$$") == "4"
    assert _unwrap("$$") == "" and _unwrap("\\(\\)") == ""  # an empty pair is still a pair
    assert _unwrap("$") == "$"  # one delimiter is not a pair
    assert _unwrap("7$") == "7$" and _unwrap("$7") == "$7"  # both ends, or nothing
    assert _unwrap("abcdef{5}") == "abcdef{5}"  # a brace at position 6 is a box only after \boxed
    assert _unwrap("\\boxed{5} + 1") == "\\boxed{5} + 1"  # the box must close at the end
