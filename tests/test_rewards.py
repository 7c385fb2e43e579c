"""Tests for reasonrl.rewards; expected values are worked out by hand in the comments."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import threading
import warnings
from pathlib import Path

import pytest

from reasonrl.rewards import (
    REWARDS,
    ConsistencyReward,
    JudgeReward,
    SetReward,
    SidExact,
    SidLevels,
    TempoReward,
    ComponentError,
    ExactMatch,
    FormatRegex,
    LengthPenalty,
    MathVerify,
    NumericMatch,
    OverlongPenalty,
    RequiredSections,
    Reward,
    RewardError,
    RewardResult,
    Weighted,
    extract_boxed,
    extract_last_number,
    extract_tag,
    get_reward,
    normalize_number,
    normalize_text,
    parse_number,
    resolve_extractor,
    score_rewards,
)
from reasonrl.rewards import base


def run(fn, completions, task="t", **columns):
    """score_rewards on ``completions`` with dummy prompts."""
    return score_rewards(fn, ["p"] * len(completions), completions, columns, task=task)


# ---------------------------------------------------------------- answers


@pytest.mark.parametrize(
    "text, expected",
    [
        (" 7 ", "7"),  # surrounding whitespace stripped
        ("+5", "5"),  # leading + dropped
        ("-0", "0"),  # negative zero is zero
        ("-0.000", "0"),  # ... also with a fractional part
        ("007", "7"),  # leading zeros dropped
        ("-007.50", "-7.5"),  # both ends trimmed, sign kept
        ("1,234", "1234"),  # thousands separator
        ("12,345,678.90", "12345678.9"),
        ("2.50", "2.5"),  # trailing fractional zero
        ("3.0", "3"),  # ".0" alone disappears
        (".5", "0.5"),
        ("5.", "5"),
        ("1e3", "1000"),  # exponent expanded
        ("\u22123", "-3"),  # unicode minus sign
    ],
)
def test_normalize_number(text, expected):
    assert normalize_number(text) == expected


@pytest.mark.parametrize("text", ["", "abc", "1,23", "12,3456", "1_000", "NaN", "Infinity", "3/4", "1e5000", "5 6"])
def test_normalize_number_rejects_non_numbers(text):
    # "1,23" has a malformed thousands group; "1e5000" exceeds the exponent cap; "3/4" is a fraction.
    assert normalize_number(text) is None


def test_normalize_text():
    assert normalize_text("  Paris \n\t France ") == "Paris France"
    assert normalize_text(" Paris  FRANCE", lowercase=True) == "paris france"
    assert normalize_text("Paris") != normalize_text("paris")  # case kept by default


@pytest.mark.parametrize(
    "text, expected",
    [
        ("42", 42.0),
        ("3/4", 0.75),
        ("-3 / 4", -0.75),
        ("\\frac{3}{4}", 0.75),
        ("\\dfrac{1}{8}", 0.125),
        ("-\\frac{3}{4}", -0.75),
        ("\\boxed{\\frac{1}{2}}", 0.5),  # nested braces inside the box
        ("$\\boxed{2}$", 2.0),  # delimiters peeled repeatedly
        ("$1,234$", 1234.0),
        ("\\(2.5\\)", 2.5),
    ],
)
def test_parse_number(text, expected):
    assert parse_number(text) == pytest.approx(expected)


@pytest.mark.parametrize("text", [None, "x/2", "1/0", "\\frac{1}{0}", "1/2/3", "\\boxed{x}", "two"])
def test_parse_number_rejects(text):
    assert parse_number(text) is None


def test_extractors():
    # The last complete box wins; a truncated trailing box falls back to the earlier one.
    assert extract_boxed("a \\boxed{1} b \\boxed{\\frac{1}{2}} c") == "\\frac{1}{2}"
    assert extract_boxed("a \\boxed{7} then \\boxed{8") == "7"
    assert extract_boxed("no box") is None
    assert extract_tag("answer")("<answer>1</answer> <answer>\n 2 </answer>") == "2"
    assert extract_tag("answer")("<answer>unclosed") is None
    # grouped thousands kept whole, not cut to "234"
    assert extract_last_number("first 3, then #### 1,234") == "1,234"
    assert extract_last_number("no digits") is None
    assert resolve_extractor("boxed") is extract_boxed
    with pytest.raises(ValueError, match="unknown extractor 'boxd'"):
        resolve_extractor("boxd")


# ---------------------------------------------------------------- ExactMatch


def test_exact_match_number_or_text():
    completions = [" 7 ", "+5", "-0", "007", "1,234", "2.50", "8", "  Paris   France ", "paris france"]
    refs = ["7", "5", "0", "7", "1234", "2.5", "42", "Paris France", "Paris France"]
    # all equal after normalisation except "8" vs "42" and the case-sensitive "paris france"
    res = run(ExactMatch(), completions, answer=refs)
    assert res.values == [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0]
    assert res.metrics["reward/exact_match/mean"] == pytest.approx(7 / 9)
    assert res.metrics["reward/exact_match/unparsed_frac"] == 0.0


def test_exact_match_modes():
    completions = ["007", " a  b ", "A B"]
    refs = ["7", "a b", "a b"]
    # "none": only exact strings ("a  b" keeps its double space); "text": whitespace folded;
    # lowercase=True also folds case. None of them treats "007" as 7.
    assert ExactMatch(normalize="none")(["p"] * 3, completions, answer=refs) == [0.0, 0.0, 0.0]
    assert ExactMatch(normalize="text")(["p"] * 3, completions, answer=refs) == [0.0, 1.0, 0.0]
    assert ExactMatch(normalize="text", lowercase=True)(["p"] * 3, completions, answer=refs) == [0.0, 1.0, 1.0]
    with pytest.raises(ValueError, match="normalize must be one of"):
        ExactMatch(normalize="fuzzy")


def test_exact_match_extract_and_unparsed():
    completions = ["so \\boxed{7}", "I forgot the box: 7", "\\boxed{8}", "\\boxed{ 007 }"]
    # row 1 has no box -> 0.0 and unparsed; row 2 is wrong; row 3 "007" == "7"
    res = run(ExactMatch(extract="boxed", name="em"), completions, answer=[7, 7, 7, 7])
    assert res.values == [1.0, 0.0, 0.0, 1.0]
    assert res.metrics["reward/em/unparsed_frac"] == pytest.approx(1 / 4)


def test_exact_match_none_reference_and_missing_column():
    res = run(ExactMatch(), ["1", "2"], answer=["1", None])
    assert res.values == [1.0, None]
    assert res.metrics["reward/exact_match/frac_none"] == pytest.approx(0.5)
    with pytest.raises(RewardError, match="needs the column 'answer'.*'solution'"):
        run(ExactMatch(), ["1"], solution=["1"])


# ---------------------------------------------------------------- NumericMatch


def test_numeric_match():
    completions = ["0.75", "3/4", "\\frac{3}{4}", "$\\boxed{0.75}$", "0.7500001", "0.7501", "three quarters"]
    # |0.7500001 - 0.75| = 1e-7 <= rel_tol * 0.7500001 = 7.5e-7 -> match; 1e-4 is not.
    res = run(NumericMatch(), completions, answer=["3/4"] * 7)
    assert res.values == [1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0]
    assert res.metrics["reward/numeric/unparsed_frac"] == pytest.approx(1 / 7)


def test_numeric_match_extract_and_tolerance():
    gsm = ["... so 1,000 + 234 = 1,234\n#### 1,234", "#### 1,235"]
    assert NumericMatch(extract="last_number")(["p", "p"], gsm, answer=[1234, 1234]) == [1.0, 0.0]
    # abs_tol=1.5 accepts 1235 vs 1234 (diff 1), rel_tol=0 disables the relative test
    loose = NumericMatch(extract="last_number", rel_tol=0.0, abs_tol=1.5)
    assert loose(["p", "p"], gsm, answer=[1234, 1234]) == [1.0, 1.0]


def test_numeric_match_bad_reference_names_row():
    with pytest.raises(RewardError) as info:
        run(NumericMatch(), ["1", "2"], task="gsm8k", answer=["1", "two"])
    assert info.value.row == 1
    assert "reference 'two'" in str(info.value) and "gsm8k" in str(info.value)


# ---------------------------------------------------------------- MathVerify


def test_math_verify_scores():
    completions = [
        "The answer is \\boxed{\\frac{1}{2}}.",  # 1/2 == 0.5
        "so \\boxed{2}",
        "so \\boxed{3}",  # wrong
        "no math here",  # nothing parseable -> 0 and unparsed
        "thus \\boxed{x^2+1}",  # needs the plain gold wrapped in $...$ to parse
        "\\boxed{0.5}",
    ]
    golds = ["0.5", "2", "2", "2", "1+x^2", "$\\frac{1}{2}$"]
    res = run(MathVerify(), completions, answer=golds)
    assert res.values == [1.0, 1.0, 0.0, 0.0, 1.0, 1.0]
    assert res.metrics["reward/math_verify/unparsed_frac"] == pytest.approx(1 / 6)
    assert res.metrics["reward/math_verify/timeout_dropped"] == 0.0


def test_math_verify_none_gold_and_bad_gold():
    assert MathVerify()(["p", "p"], ["\\boxed{1}", "\\boxed{1}"], answer=[None, "1"]) == [None, 1.0]
    with pytest.raises(RewardError) as info:
        run(MathVerify(), ["\\boxed{1}", "\\boxed{1}"], answer=["1", ""])
    assert info.value.row == 1 and "could not parse the gold" in str(info.value)


def test_math_verify_timeout_is_whole_seconds():
    # math_verify hands the timeout to signal.alarm, which rejects floats; the library would
    # swallow that TypeError and score a correct answer 0.0. We round up instead.
    mv = MathVerify(timeout_seconds=0.5)
    assert mv.timeout_seconds == 1
    assert mv(["p"], ["\\boxed{2}"], answer=["2"]) == [1.0]
    assert MathVerify(timeout_seconds=None).timeout_seconds is None


def test_math_verify_off_main_thread_does_not_crash():
    # With a signal timeout math_verify raises ValueError outside the main thread; we drop it.
    out: dict = {}

    def target():
        try:
            out["res"] = run(MathVerify(), ["\\boxed{2}"], answer=["2"])
        except Exception as err:  # noqa: BLE001 - reported through the assertion below
            out["err"] = err

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        thread = threading.Thread(target=target)
        thread.start()
        thread.join(timeout=30)
    assert "err" not in out, out.get("err")
    assert out["res"].values == [1.0]
    assert out["res"].metrics["reward/math_verify/timeout_dropped"] == 1.0


# ---------------------------------------------------------------- format


def test_format_regex():
    text = "<think>\nstep\n</think>\n<answer>4</answer>"
    pattern = r"<think>.*</think>\s*<answer>.*</answer>"
    assert FormatRegex(pattern)(["p"], [text]) == [1.0]  # DOTALL lets .* cross newlines
    assert FormatRegex(pattern, flags=0)(["p"], [text]) == [0.0]
    # search finds it after a prefix; fullmatch requires the whole completion to match
    assert FormatRegex(pattern)(["p"], ["hi " + text]) == [1.0]
    assert FormatRegex(pattern, fullmatch=True)(["p"], ["hi " + text]) == [0.0]
    assert FormatRegex(pattern, fullmatch=True)(["p"], [text]) == [1.0]


def test_required_sections():
    tags = ["<think>", "</think>", "<answer>", "</answer>"]
    completions = [
        "<think>a</think><answer>1</answer>",  # all 4 in order -> 1.0
        "<think>a</think> 1",  # 2 of 4 -> 0.5
        "</answer><answer></think><think>",  # all present, reversed: longest in-order run is 1 -> 0.25
        "",  # none -> 0.0
    ]
    res = run(RequiredSections(tags), completions)
    assert res.values == [1.0, 0.5, 0.25, 0.0]
    assert res.metrics["reward/sections/mean"] == pytest.approx(1.75 / 4)
    assert res.metrics["reward/sections/full_frac"] == pytest.approx(1 / 4)
    # unordered: the reversed completion has all four
    assert RequiredSections(tags, ordered=False)(["p"], [completions[2]]) == [1.0]


def test_required_sections_not_greedy():
    # Sections A, B, C in text "B C A": greedy left-to-right takes A (at the end) and then finds
    # nothing; the best in-order subset is B, C -> 2/3.
    assert RequiredSections(["A", "B", "C"])(["p"], ["B C A"]) == [pytest.approx(2 / 3)]
    with pytest.raises(ValueError):
        RequiredSections("<think>")  # a bare string is not a list of sections


# ---------------------------------------------------------------- length


def test_overlong_penalty_dapo_vectors():
    # max_len=20, cache_len=4 -> free zone L <= 16, ramp (16 - L)/4 for 16 < L <= 20, then -1.
    # L=16 -> 0; 17 -> -1/4; 18 -> -2/4; 20 -> -4/4; 21 -> -1; 0 -> 0
    lengths = [16, 17, 18, 20, 21, 0]
    res = run(OverlongPenalty(20, 4), ["x"] * 6, completion_lengths=lengths)
    assert res.values == [0.0, -0.25, -0.5, -1.0, -1.0, 0.0]
    assert res.metrics["reward/overlong/soft_frac"] == pytest.approx(3 / 6)  # 17, 18, 20
    assert res.metrics["reward/overlong/over_frac"] == pytest.approx(1 / 6)  # 21


def test_overlong_length_sources():
    penalty = OverlongPenalty(20, 4)
    # completion_ids: 18 tokens -> -0.5 even though the text is 1 character
    assert penalty(["p"], ["x"], completion_ids=[[0] * 18]) == [-0.5]
    # completion_lengths wins over completion_ids
    assert penalty(["p"], ["x"], completion_lengths=[17], completion_ids=[[0] * 18]) == [-0.25]
    # no token information: 17 characters -> -0.25, with a warning about the unit
    with pytest.warns(UserWarning, match="characters"):
        assert penalty(["p"], ["x" * 17]) == [-0.25]
    with pytest.raises(RewardError, match="2 completion lengths for 1 completions"):
        run(penalty, ["x"], completion_lengths=[1, 2])


def test_overlong_hard_cutoff_and_validation():
    # cache_len=0: no ramp, 0 up to max_len and -1 beyond
    assert OverlongPenalty(10, 0)(["p"] * 2, ["", ""], completion_lengths=[10, 11]) == [0.0, -1.0]
    for bad in [(0, 0), (10, 11), (10, -1)]:
        with pytest.raises(ValueError):
            OverlongPenalty(*bad)


def test_length_penalty():
    # -0.5 * max(0, L - 10) / 10: L=5 -> 0, L=10 -> 0, L=15 -> -0.25, L=30 -> -1.0
    res = run(LengthPenalty(target=10, coef=0.5), ["x"] * 4, completion_lengths=[5, 10, 15, 30])
    assert res.values == [0.0, 0.0, -0.25, -1.0]
    assert res.metrics["reward/length/mean_length"] == pytest.approx(15.0)  # (5+10+15+30)/4
    with pytest.raises(ValueError):
        LengthPenalty(target=0, coef=1.0)


# ---------------------------------------------------------------- Weighted


def has_a(prompts, completions, **kw):
    return [1.0 if "a" in c else None for c in completions]


def has_b(prompts, completions, **kw):
    return [-0.5 if "b" in c else None for c in completions]


def test_weighted_skip_none():
    # weights [1.0, 0.5]: "ab" -> 1 + 0.5*(-0.5) = 0.75; "a" -> 1 (b skipped);
    # "b" -> 0.5*(-0.5) = -0.25; "" -> every component None -> None
    res = run(Weighted([has_a, has_b], [1.0, 0.5]), ["ab", "a", "b", ""])
    assert res.values == [0.75, 1.0, -0.25, None]
    assert res.metrics["reward/weighted/mean"] == pytest.approx((0.75 + 1.0 - 0.25) / 3)
    assert res.metrics["reward/weighted/frac_none"] == pytest.approx(1 / 4)
    # each component's own metrics are passed on: has_b applies to 2 of 4 rows
    assert res.metrics["reward/has_b/frac_none"] == pytest.approx(0.5)
    assert res.metrics["reward/has_a/mean"] == 1.0


def test_weighted_none_as_zero():
    # same rows, None counted as 0: only the all-None row changes, from None to 0.0
    res = run(Weighted([has_a, has_b], [1.0, 0.5], none_as="zero"), ["ab", "a", "b", ""])
    assert res.values == [0.75, 1.0, -0.25, 0.0]


def test_weighted_builtins_share_columns_and_rename_duplicates():
    ones, twos = (lambda p, c, **k: [1.0] * len(c)), (lambda p, c, **k: [2.0] * len(c))
    both = Weighted([ExactMatch(), OverlongPenalty(20, 4), ones, twos])
    res = run(both, ["4", "5"], answer=["4", "4"], completion_lengths=[18, 10])
    # row 0: 1 - 0.5 + 1 + 2 = 3.5; row 1: 0 + 0 + 1 + 2 = 3.0
    assert res.values == [3.5, 3.0]
    assert res.metrics["reward/overlong/soft_frac"] == 0.5
    assert res.metrics["reward/<lambda>/mean"] == 1.0
    assert res.metrics["reward/<lambda>_2/mean"] == 2.0


def test_weighted_validation():
    with pytest.raises(ValueError, match="2 weights for 1 rewards"):
        Weighted([has_a], [1.0, 2.0])
    with pytest.raises(ValueError, match="none_as"):
        Weighted([has_a], none_as="drop")
    with pytest.raises(ValueError):
        Weighted([])


def test_weighted_component_error_names_row_and_component():
    def boom(prompts, completions, **kw):
        return [1.0 / 0 if c == "bad" else 0.0 for c in completions]

    with pytest.raises(RewardError) as info:
        run(Weighted([has_a, boom]), ["a", "a", "bad"], task="gsm8k")
    err = info.value
    assert (err.task, err.row, err.completion) == ("gsm8k", 2, "bad")
    assert isinstance(err.__cause__, ComponentError)
    assert "component 'boom' raised ZeroDivisionError" in str(err)
    assert "<weighted>" not in str(err)  # the inner task label is not leaked


def test_weighted_component_nan_is_reported():
    def nan(prompts, completions, **kw):
        return [math.nan for _ in completions]

    with pytest.raises(RewardError, match="component 'nan' returned a non-finite value nan"):
        run(Weighted([has_a, nan]), ["a"])


# ---------------------------------------------------------------- score_rewards errors


def test_score_rewards_names_task_row_and_completion():
    def third_row_fails(prompts, completions, **kw):
        return [float(len(c)) if c != "kaboom text" else int("x") for c in completions]

    with pytest.raises(RewardError) as info:
        run(third_row_fails, ["a", "bb", "kaboom text", "d"], task="countdown")
    err, msg = info.value, str(info.value)
    assert (err.task, err.row) == ("countdown", 2)
    assert "'countdown'" in msg and "row 2" in msg and "kaboom text" in msg and "ValueError" in msg


def test_score_rewards_wrong_count_and_bad_values():
    with pytest.raises(RewardError, match="returned 1 values for 3 completions"):
        run(lambda p, c, **k: [1.0], ["a", "b", "c"])
    with pytest.raises(RewardError, match="row 1: returned a non-finite value nan") as info:
        run(lambda p, c, **k: [0.0, math.nan], ["a", "b"])
    assert info.value.completion == "b"
    with pytest.raises(RewardError, match="returned str, not a float"):
        run(lambda p, c, **k: ["1.0"], ["a"])


def test_score_rewards_short_column_reports_batch_error():
    # The row-by-row replay cannot index a column shorter than the batch; the original error
    # must still come back as a RewardError (it used to escape as a bare IndexError).
    with pytest.raises(RewardError, match="the batch: ValueError: column 'answer' has 1 values for 2"):
        run(ExactMatch(), ["1", "2"], answer=["1"])


def test_builtin_reward_through_score_rewards_gets_summary():
    res = run(FormatRegex("x"), ["x", "y", "xx", "z"])
    assert isinstance(res, RewardResult)
    assert res.values == [1.0, 0.0, 1.0, 0.0]
    # std as TRL's rewards/<name>/std (Bessel): values 1,0,1,0 around 0.5, squares 4 x 0.25 = 1, / (4-1): sqrt(1/3)
    assert res.metrics == {
        "reward/format/frac_none": 0.0,
        "reward/format/mean": 0.5,
        "reward/format/std": pytest.approx(0.5773502692),
    }


# ---------------------------------------------------------------- registry and package


@pytest.mark.parametrize(
    "name, kwargs, cls",
    [
        ("exact_match", {}, ExactMatch),
        ("numeric", {"rel_tol": 1e-3}, NumericMatch),
        ("math_verify", {"timeout_seconds": 2}, MathVerify),
        ("format_regex", {"pattern": "x"}, FormatRegex),
        ("sections", {"sections": ["<a>"]}, RequiredSections),
        ("overlong", {"max_len": 20, "cache_len": 4}, OverlongPenalty),
        ("length", {"target": 10, "coef": 0.1}, LengthPenalty),
        ("tempo", {"leak_penalty": "count"}, TempoReward),
        ("sid_exact", {}, SidExact),
        ("sid_levels", {"mode": "prefix_match"}, SidLevels),
        ("sspo", {"metric": "f1"}, SetReward),
        ("consistency", {"tau": 0.6}, ConsistencyReward),
        ("judge", {"backend": "judge.py:f"}, JudgeReward),
    ],
)
def test_get_reward_builds_each(name, kwargs, cls):
    reward = get_reward(name, **kwargs)
    assert type(reward) is cls and isinstance(reward, Reward)
    assert set(REWARDS) == {
        "exact_match",
        "numeric",
        "math_verify",
        "format_regex",
        "sections",
        "overlong",
        "length",
        "tempo",
        "sid_exact",
        "sid_levels",
        "sspo",
        "consistency",
        "physics_match",
        "judge",
    }


def test_get_reward_errors():
    with pytest.raises(ValueError) as info:
        get_reward("exact")
    assert "'exact'" in str(info.value) and "exact_match" in str(info.value) and "overlong" in str(info.value)
    with pytest.raises(TypeError, match="get_reward\\('overlong'\\)"):
        get_reward("overlong", max_length=20)  # not an argument of OverlongPenalty


def test_overlong_reads_the_budget_column_and_defaults_the_cache_to_a_fifth():
    # budget 20 -> cache 4 (0.2 * 20), free zone up to 16: L=18 -> (16-18)/4 = -0.5 (spec vector)
    pen = OverlongPenalty()
    out = pen.score(["p"] * 3, ["", "", ""], completion_lengths=[16, 18, 20], max_new_tokens=[20] * 3)
    assert out.values == [0.0, -0.5, -1.0]
    with pytest.raises(ValueError, match="max_new_tokens"):
        pen.score(["p"], [""], completion_lengths=[3])


def test_reexports_are_base_objects():
    assert (Reward, RewardResult, RewardError, score_rewards) == (
        base.Reward,
        base.RewardResult,
        base.RewardError,
        base.score_rewards,
    )


def test_import_does_not_load_torch_or_math_verify():
    src = Path(__file__).resolve().parents[1] / "src"
    code = (
        "import sys, reasonrl.rewards\n"
        "loaded = [m for m in ('torch', 'math_verify', 'sympy') if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    env = {**os.environ, "PYTHONPATH": str(src)}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


# ------------------------------------------------------------------ cases the mutation run found untested (issue 45)


def test_numeric_match_tolerance_checks_and_the_unparsed_share_of_one_row():
    from reasonrl.rewards import NumericMatch

    with pytest.raises(ValueError, match=r"tolerances must be >= 0, got rel_tol=-1.0, abs_tol=1e-09"):
        NumericMatch(rel_tol=-1.0)
    with pytest.raises(ValueError, match=r"got rel_tol=1e-06, abs_tol=-1.0"):
        NumericMatch(abs_tol=-1.0)
    exact = NumericMatch(rel_tol=0.0, abs_tol=0.0)  # zero tolerance is allowed: equal numbers only
    assert exact.score(["p", "p"], ["3", "3.0000001"], answer=["3", "3"]).values == [1.0, 0.0]
    # one applicable row, unparsed: the share is 1 / 1
    res = NumericMatch().score(["p"], ["no number here"], answer=["3"])
    assert res.values == [0.0] and res.metrics["reward/numeric/unparsed_frac"] == 1.0
