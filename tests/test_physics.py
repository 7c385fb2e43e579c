"""Physics-R1's answer reward, its LaTeX conversion, its dense option and the multipart task, by hand
(spec envs-selfplay-eval section 7(b) and (d))."""

import math

import pytest

from reasonrl.errors import UserError
from reasonrl.rewards import REWARDS, score_rewards
from reasonrl.rewards.latex import latex_to_text, numbers_close, parse_quantity, split_unit
from reasonrl.rewards.answers import all_boxed, extract_boxed
from reasonrl.rewards.physics import PhysicsMatch, mcq_letter, split_parts
from reasonrl.rewards.physics_dense import dense_value, symbols_of, unit_of
from reasonrl.tasks import get_task, take_items


def score(completions, golds, **options):
    return PhysicsMatch(**options).score(["p"] * len(completions), completions, answer=golds)


# ---- extraction -------------------------------------------------------------------------------


def test_the_one_boxed_extractor_counts_nested_braces():
    # the regex-free brace count keeps \frac{1}{2}'s inner braces; the LAST box wins
    assert extract_boxed(r"first \boxed{1} then \boxed{\frac{1}{2}} done") == r"\frac{1}{2}"
    assert extract_boxed(r"\boxed{\sqrt{\frac{a}{b^{2}}}}") == r"\sqrt{\frac{a}{b^{2}}}"
    # an unbalanced last box (cut off) falls back to the previous complete one
    assert extract_boxed(r"\boxed{3} and \boxed{\frac{4}{") == "3"
    assert extract_boxed("no box here") is None
    assert all_boxed(r"(a) \boxed{3} (b) \boxed{ 4 }") == ["3", "4"]
    # loose (physics answers): "\boxed {x}" and "\fbox{x}" count too; strict (math answers) reads \boxed{ only
    text = r"\boxed{1} then \boxed {2} and \fbox{3}"
    assert all_boxed(text, loose=True) == ["1", "2", "3"] and extract_boxed(text, loose=True) == "3"
    assert all_boxed(text) == ["1"] and extract_boxed(text) == "1"


def test_mcq_letters():
    assert [mcq_letter(s) for s in ["(B)", "B", "B.", r"\text{C}", "D) 5 m/s", "b", "F", "Because"]] == [
        "B",
        "B",
        "B",
        "C",
        "D",
        None,
        None,
        None,
    ]


def test_split_parts_on_labels_and_semicolons():
    assert split_parts("(a) 3 (b) 4") == ["3", "4"]
    assert split_parts("a. 3 m b. 4 s") == ["3 m", "4 s"]
    assert split_parts("7; 12") == ["7", "12"]
    # a ';' inside braces is not a part boundary; a comma never is (it can be a thousands separator)
    assert split_parts(r"\text{a;b}; 1,234") == [r"\text{a;b}", "1,234"]
    assert split_parts("(b) 3 (a) 4") == ["(b) 3 (a) 4"]  # labels out of order are not a split


# ---- LaTeX to text and numbers -------------------------------------------------------------------


@pytest.mark.parametrize(
    "latex, value",
    [
        (r"\frac{1}{2}", 0.5),
        (r"\dfrac{3}{4}", 0.75),
        (r"\frac{\frac{1}{2}}{4}", 0.125),  # (1/2)/4
        (r"-\tfrac{3}{4}", -0.75),
        (r"3.0 \times 10^{8}\,\text{m/s}", 3.0e8),  # unit in \text{} stripped
        (r"2 \cdot 10^{-3}", 0.002),
        (r"\left(2\right)^{3}", 8.0),
        ("1,234 kg", 1234.0),  # thousands separator, plain-text unit
        ("1,234,567", 1234567.0),
        ("6.02e23", 6.02e23),
        ("1.5E-3 J", 0.0015),
        ("v = 2.5", 2.5),  # a leading 'symbol =' is dropped
        (r"50\%", 50.0),
        (r"\pi/2", math.pi / 2),
        (r"\sqrt{16}", 4.0),
        (r"$\boxed{7}$", 7.0),
        ("007", 7.0),  # leading zeros read away, but not the zero after a decimal point
        ("0.05", 0.05),
    ],
)
def test_parse_quantity(latex, value):
    assert parse_quantity(latex) == pytest.approx(value, rel=1e-12)


@pytest.mark.parametrize("text", ["3 4", "kg", "x+1", "1,5", "2(3)", "1/0", "10^{999}", "", r"\frac{1}{"])
def test_parse_quantity_refuses_what_is_not_one_number(text):
    assert parse_quantity(text) is None


def test_latex_to_text_and_split_unit():
    assert latex_to_text(r"\frac{a}{b}") == "((a)/(b))"
    assert latex_to_text(r"3\times10^{8}\ \mathrm{m}") == "3*10**(8) m"
    assert latex_to_text(r"3\times10^{8}\ \mathrm{m}", units=False) == "3*10**(8)"
    assert split_unit("3*10**(8) m/s") == ("3*10**(8)", "m/s")
    assert split_unit("5 -") == ("5", "-")  # an expression never ends on an operator


def test_numbers_close_boundaries():
    # |p - g| <= atol + rtol |g|, rtol 1e-2, atol 1e-6, relative to the GOLD:
    # g = 100: bound 1 + 1e-6, so 101 passes and 101.01 fails
    assert numbers_close(101.0, 100.0) and not numbers_close(101.01, 100.0)
    # g = 0: bound = atol = 1e-6 only
    assert numbers_close(9e-7, 0.0) and not numbers_close(2e-6, 0.0)
    # asymmetric: g = 99, p = 100: |1| > 0.99 + 1e-6 fails, while g = 100, p = 99 passes (1 <= 1.000001)
    assert not numbers_close(100.0, 99.0) and numbers_close(99.0, 100.0)


# ---- the reward --------------------------------------------------------------------------------


def test_spec_examples():
    # spec 7(d): \boxed{\frac{1}{2}} vs "0.5" -> 1; "(a) 3 (b) 4" vs "(a) 3 (b) 5" -> 0
    assert score([r"so \boxed{\frac{1}{2}}"], ["0.5"]).values == [1.0]
    assert score([r"\boxed{(a) 3 (b) 4}"], ["(a) 3 (b) 5"]).values == [0.0]


def test_tolerance_in_the_reward():
    # gold 1: bound 1e-6 + 1e-2 = 0.010001; 1.01 passes, 1.0102 fails; rtol=0.05 lets 1.04 pass
    assert score([r"\boxed{1.01}", r"\boxed{1.0102}"], ["1", "1"]).values == [1.0, 0.0]
    assert score([r"\boxed{1.04}"], ["1"], rtol=0.05).values == [1.0]
    # units on either side do not matter for the value
    assert score([r"\boxed{3 \times 10^{8} \text{ m/s}}"], ["300000000 m/s"]).values == [1.0]


def test_multipart_and_in_order():
    golds = ["7; 12"] * 5 + ["(a) 3 (b) 4"]
    completions = [
        r"\boxed{7; 12}",
        r"\boxed{7; 13}",
        r"\boxed{12; 7}",
        r"\boxed{7}",
        r"(a) \boxed{7} (b) \boxed{12}",  # one box per part: the last 2 boxes are the parts
        r"\boxed{a. 3 b. 4}",
    ]  # the labels need not be the gold's style
    res = score(completions, golds)
    assert res.values == [1.0, 0.0, 0.0, 0.0, 1.0, 1.0]
    # part_acc: hits per row 2/2, 1/2, 0/2, 1/2, 2/2, 2/2 -> (1 + .5 + 0 + .5 + 1 + 1) / 6 = 4/6
    assert res.metrics["reward/physics_match/part_acc"] == pytest.approx(4 / 6)
    # the one-part answer to a two-part gold is a count mismatch: 1 of 6
    assert res.metrics["reward/physics_match/count_mismatch_frac"] == pytest.approx(1 / 6)


def test_mcq_rows():
    completions = [r"\boxed{(B)}", r"\boxed{B. 5 m/s}", "The answer is (C).", "Answer: d", r"\boxed{C}", "I think so"]
    golds = ["B", "(B)", "C.", "D", "B", "A"]
    res = score(completions, golds)
    # 'Answer: d' reads D (case folded after 'answer:'); the last row has no letter to read
    assert res.values == [1.0, 1.0, 1.0, 1.0, 0.0, 0.0]
    assert res.metrics["reward/physics_match/mcq_frac"] == 1.0
    assert res.metrics["reward/physics_match/unparsed_frac"] == pytest.approx(1 / 6)


def test_text_parts_and_symbolic_option():
    # a non-numeric part compares as plain text (spaces and case folded): the spec's strict mode
    assert score([r"\boxed{X^2 + 1}"], ["x^{2}+1"]).values == [1.0]
    assert score([r"\boxed{1 + x^2}"], ["x^2+1"]).values == [0.0]
    pytest.importorskip("math_verify")
    assert score([r"\boxed{1 + x^2}"], ["x^2+1"], symbolic=True).values == [1.0]


def test_unparseable_completion_scores_zero_and_is_counted():
    res = score(["no box at all", r"\boxed{", r"\boxed{42}", r"\boxed{kg}"], ["42"] * 4)
    # rows 0-1 have no balanced box (unparsed); row 3 has a box whose content is no number: parsed, wrong
    assert res.values == [0.0, 0.0, 1.0, 0.0]
    assert res.metrics["reward/physics_match/unparsed_frac"] == 0.5


@pytest.mark.parametrize("gold", ["", "3;", r"\boxed{3", "{3", "(a) 3 (b) "])
def test_malformed_gold_is_a_user_error_naming_the_row(gold):
    with pytest.raises(UserError, match=r"row 1"):
        score([r"\boxed{1}", r"\boxed{1}"], ["1", gold])


def test_none_gold_is_not_applicable_and_the_registry_builds_it():
    res = score_rewards(REWARDS["physics_match"](), ["p", "p"], [r"\boxed{1}", "x"], {"answer": ["1", None]})
    assert res.values == [1.0, None]
    with pytest.raises(ValueError, match="rtol"):
        PhysicsMatch(rtol=-1)


# ---- the dense option -------------------------------------------------------------------------


def test_dense_terms_and_clipping():
    golds = ["7; 12"] * 4 + ["3 m/s"] * 3 + ["x^2+1"]
    completions = [
        r"\boxed{7; 12}",  # 1 + .1 + 0 (no unit) + .2 = 1.3 -> clipped 1
        r"\boxed{7; 13}",  # 0 + .1 + .2 (both numbers) = 0.3
        r"\boxed{7}",  # count mismatch: .1 - .25 = -0.15
        r"\boxed{3} so \boxed{4; 5}",  # wrong, boxes disagree: .1 + .2 - .25 = 0.05
        r"\boxed{2\,\text{m/s}}",  # wrong value, right unit and form: .1 + .15 + .2 = 0.45
        r"\boxed{2 kg}",  # wrong unit: .1 + .2 = 0.3
        "no box",  # nothing: 0
        r"\boxed{2x}",
    ]  # same symbols {x}: .1 + .2 = 0.3
    res = score(completions, golds, dense=True)
    assert res.values == pytest.approx([1.0, 0.3, -0.15, 0.05, 0.45, 0.3, 0.0, 0.3])
    # dim fires on rows 4 only (gold has a unit and the prediction the same one): 1/8
    assert res.metrics["reward/physics_match/dense_dim"] == pytest.approx(1 / 8)
    assert res.metrics["reward/physics_match/dense_cons"] == pytest.approx(2 / 8)


def test_dense_partial_credit_per_part():
    # dense_answer=fraction: one of two parts right -> r_ans 0.5, + .1 + .2 = 0.8
    assert score([r"\boxed{7; 13}"], ["7; 12"], dense=True, dense_answer="fraction").values == pytest.approx([0.8])
    # the clip: the weights can make it fall below -1
    assert (
        dense_value(
            {"ans": 0, "fmt": 0, "dim": 0, "sym": 0, "cons": 1}, {"ans": 1, "fmt": 0, "dim": 0, "sym": 0, "cons": -3}
        )
        == -1.0
    )
    with pytest.raises(ValueError, match="dense_answer"):
        PhysicsMatch(dense=True, dense_answer="most")


def test_units_and_symbols_helpers():
    assert unit_of(r"3\,\text{m/s}") == "m/s" and unit_of("3 m s^{-1}") == "ms^(-1)" and unit_of("3") == ""
    assert symbols_of(r"\omega t + x") == {"omega", "t", "x"} and symbols_of(r"\frac{1}{2}") == frozenset()


# ---- the multipart task ------------------------------------------------------------------------


def test_multipart_task_items_verify_and_split():
    task = get_task("multipart")
    train = take_items(task, "train", 400, seed=0)
    test = take_items(task, "test", 40, seed=0)
    assert not {it.key for it in train} & {it.key for it in test}  # disjoint by the key's hash
    for it in train[:50]:
        assert task.verify(it.demo, it.answer, it.meta) == 1.0  # every demonstration is right
        assert len(it.demo) <= task.max_new_tokens  # and fits the budget (one character = one token)
    item = task.make_item([(55, "+", 7), (7, "-", 42)])
    # 55+7: columns 5+7+0=12 then 5+0+1=6 -> 62; 7-42 is negative: ~ and 42-7 -> 12-7-0=5, 4-0-1=3 -> -35
    assert item.prompt == "(a) 55+7 (b) 7-42\n" and item.answer == "62; -35"
    assert item.demo == "(a) 5+7+0=12,5+0+1=6\n(b) ~12-7-0=5,4-0-1=3\n\\boxed{62; -35}"
    assert task.verify(r"\boxed{62; -35}", item.answer, item.meta) == 1.0
    assert task.verify(r"\boxed{62; 35}", item.answer, item.meta) == 0.0
    assert task.extract_answer(r"\boxed{062; -35.0}") == "62; -35" and task.extract_answer("A:3") is None


def test_multipart_options_are_checked():
    with pytest.raises(UserError, match="parts"):
        get_task("multipart", parts=1)
    with pytest.raises(UserError, match="unknown option"):
        get_task("multipart", digits=3)
    assert get_task("multipart", parts=3).make_item([(1, "+", 2)] * 3).answer == "3; 3; 3"


def test_a_file_task_can_verify_with_physics_match(tmp_path):
    # physics_r1's dynamic sampling reads the task's verifier: a file task takes physics_match by name
    import json

    rows = [{"prompt": "two parts", "answer": r"(a) 3 m/s (b) \frac{1}{2}"}, {"prompt": "mcq", "answer": "(B)"}]
    path = tmp_path / "phys.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = get_task(str(path), reward="physics_match", extract="boxed", test_fraction=0.01)
    got = {it.prompt: it for it in task.split_items("train")}
    two, mcq = got["two parts"], got["mcq"]
    # 3.02 is within 1e-6 + 0.01 * 3 = 0.030001 of 3; 0.5 = 1/2
    assert task.verify(r"\boxed{(a) 3.02\,\mathrm{m/s} (b) 0.5}", two.answer, two.meta) == 1.0
    assert task.verify(r"\boxed{(a) 3.04 m/s (b) 0.5}", two.answer, two.meta) == 0.0
    assert task.verify(r"\boxed{B}", mcq.answer, mcq.meta) == 1.0
