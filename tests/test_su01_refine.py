"""``reasonrl eval --refine N``: the generate -> verify -> refine loop with a scripted engine (no model),
its verifiers (self, format, and the gold oracle kept apart as an upper bound) and the command's options."""

import pytest

from helpers import text_rollouts
from reasonrl.eval.refine import (
    REFINE_TEMPLATE,
    VERIFY_TEMPLATE,
    FormatVerifier,
    OracleVerifier,
    SelfVerifier,
    accepts,
    refine_loop,
    refine_summary,
)
from reasonrl.tasks import ArithmeticTask
from reasonrl.text import fill_slots

TASK = ArithmeticTask()
ITEMS = [TASK.make_item([a, b], ["+"]) for a, b in ((1, 1), (2, 3), (4, 5))]  # answers 2, 5, 9
FIRST = ["A:3", "A:5", "A:8"]  # greedy answers: wrong, right, wrong


class Engine:
    """Scripted greedy engine: a refine prompt of 1+1 gives the right answer, of 4+5 a wrong one; a verify
    prompt gets VERDICT[question]. Every call is recorded."""

    REFINED = {"1+1": "A:2", "2+3": "A:5", "4+5": "A:7"}
    VERDICT = {"1+1": "no, step 1", "2+3": "yes", "4+5": "no"}

    def __init__(self):
        self.calls = []

    def generate(self, prompts, n, sampling, seeds=None):
        assert n == 1 and sampling.temperature == 0
        kind = "verify" if "Is it correct?" in prompts[0] else "refine"
        self.calls.append((kind, len(prompts)))
        keys = [p.split("=?")[0] for p in prompts]
        table = self.VERDICT if kind == "verify" else self.REFINED
        return text_rollouts(prompts, [table[k] for k in keys], 1)


def test_accepts_reads_the_first_word():
    assert accepts("yes") and accepts("  Yes, all steps hold") and accepts("correct.")
    assert not accepts("no") and not accepts("yesterday") and not accepts("") and not accepts("it is yes")


def test_fill_leaves_braces_inside_the_texts():
    assert fill_slots("{prompt}|{attempt}|{report}", prompt="p", attempt="{report}", report="r") == "p|{report}|r"
    assert fill_slots(REFINE_TEMPLATE, prompt="1+1=?\n", attempt="A:3", report="no").endswith("1+1=?\n")
    assert "A:3" in fill_slots(VERIFY_TEMPLATE, prompt="1+1=?\n", attempt="A:3")


def test_oracle_loop_refines_until_right_or_out_of_rounds():
    eng = Engine()
    final, rows = refine_loop(eng, TASK, ITEMS, FIRST, 2, OracleVerifier(), budget=16)
    # round 1: 1+1 and 4+5 rejected -> refined to A:2 (right) and A:7 (wrong); round 2: only 4+5 again -> A:7
    assert final == ["A:2", "A:5", "A:7"] and eng.calls == [("refine", 2), ("refine", 1)]
    assert [r["refines"] for r in rows] == [1, 0, 2] and [r["accepted"] for r in rows] == [True, True, False]
    s = refine_summary(TASK, ITEMS, rows, OracleVerifier())
    # gold pass@1: round 0 1/3, round 1 2/3, round 2 2/3; accepted 2/3; refines (1 + 0 + 2) / 3 = 1
    assert s == pytest.approx(
        {
            "refine_oracle_upper_bound/pass@1_round0": 1 / 3,
            "refine_oracle_upper_bound/pass@1_round1": 2 / 3,
            "refine_oracle_upper_bound/pass@1_round2": 2 / 3,
            "refine_oracle_upper_bound/pass@1": 2 / 3,
            "refine_oracle_upper_bound/accept_rate": 2 / 3,
            "refine_oracle_upper_bound/mean_refines": 1.0,
        }
    )
    assert not any(k.startswith("refine/") for k in s)  # the oracle never writes the headline keys


def test_self_verifier_uses_the_model_s_verdict_not_the_gold_answer():
    eng = Engine()
    eng.VERDICT = {"1+1": "yes", "2+3": "no", "4+5": "no"}  # accepts the wrong 1+1, rejects the right 2+3
    final, rows = refine_loop(eng, TASK, ITEMS, FIRST, 1, SelfVerifier(), budget=16)
    # one verify call on all 3, one refine call on 2+3 and 4+5 -> A:5 (still right), A:7
    assert eng.calls == [("verify", 3), ("refine", 2)] and final == ["A:3", "A:5", "A:7"]
    s = refine_summary(TASK, ITEMS, rows, SelfVerifier())
    assert s["refine/pass@1_round0"] == pytest.approx(1 / 3) and s["refine/pass@1"] == pytest.approx(1 / 3)
    assert s["refine/accept_rate"] == pytest.approx(1 / 3)


def test_self_verifier_report_reaches_the_refine_prompt():
    eng, seen = Engine(), []
    real = eng.generate

    def spy(prompts, n, sampling, seeds=None):
        seen.extend(prompts)
        return real(prompts, n, sampling, seeds)

    eng.generate = spy
    refine_loop(eng, TASK, ITEMS[:1], FIRST[:1], 1, SelfVerifier(), budget=16)
    assert seen[1] == fill_slots(REFINE_TEMPLATE, prompt="1+1=?\n", attempt="A:3", report="no, step 1")


def test_format_verifier_rejects_only_unreadable_answers_and_zero_rounds_change_nothing():
    eng = Engine()
    final, rows = refine_loop(eng, TASK, ITEMS, ["A:3", "garbled", "A:8"], 1, FormatVerifier(), budget=16)
    assert eng.calls == [("refine", 1)] and final == ["A:3", "A:5", "A:8"]
    same, rows0 = refine_loop(Engine(), TASK, ITEMS, FIRST, 0, FormatVerifier(), budget=16)
    assert same == FIRST and [r["answers"] for r in rows0] == [[a] for a in FIRST]


def test_eval_refine_options_are_checked():
    from typer.testing import CliRunner

    from reasonrl.cli import app

    res = CliRunner().invoke(app, ["eval", "--refine", "1", "--refine-verifier", "gold"])
    assert res.exit_code != 0 and "--refine-verifier 'gold'" in str(res.exception)
    res = CliRunner().invoke(app, ["eval", "--refine", "-1"])
    assert res.exit_code != 0 and "--refine -1" in str(res.exception)
