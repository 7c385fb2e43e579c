"""CodeThinker (arXiv 2605.17958, spec section 12): the consistency reward, the trace parser and
branching helpers, the sandboxed tracer, and the ``code`` task."""

import json
import random
import subprocess
import sys
from types import SimpleNamespace

import pytest

from reasonrl.rewards.consistency import (
    ConsistencyReward,
    branch_point,
    canon_value,
    consistency,
    first_inconsistent_step,
    normalize_output,
    parse_output,
    parse_steps,
    parse_trace,
    prefix_consistency,
    step_boundaries,
)
from reasonrl.rewards.sandbox import run_python
from reasonrl.tasks import take_items
from reasonrl.tasks import codegen
from reasonrl.tasks.code import CodeTask, compact_value, make_prompt, render_demo

# spec 12(d): x = 2; y = x*3; print(y+1) -> true trace x=2, y=6, output 7
SPEC_TRACE = [[1, "x", "2"], [2, "y", "6"]]
# s=0 / for i in range(2): / s=s+i+1 / print(s): s=0; i=0, s=1; i=1, s=3
LOOP_TRACE = [[1, "s", "0"], [2, "i", "0"], [3, "s", "1"], [2, "i", "1"], [3, "s", "3"]]


def _score(completions, trace=SPEC_TRACE, answer="7", **options):
    reward = ConsistencyReward(**options)
    n = len(completions)
    return reward.score([""] * n, completions, answer=[answer] * n, meta=[{"trace": trace}] * n)


# ----------------------------------------------------------------------------- reward: spec examples


def test_spec_examples_gated():
    res = _score(
        [
            "L1 x=2\nL2 y=5\nO:7",  # c = 1/2, o = 1: gate passes -> 1 + 0.5*0.5 = 1.25
            "L1 x=2\nL2 y=5\nO:6",  # c = 1/2, o = 0 -> 0 + 0.25
            "L1 x=3\nL2 y=5\nO:7",
        ]
    )  # c = 0: a guessed output earns nothing
    assert res.values == pytest.approx([1.25, 0.25, 0.0])
    m = res.metrics
    assert m["reward/consistency/c_mean"] == pytest.approx(1 / 3)
    assert m["reward/consistency/outcome_rate"] == pytest.approx(2 / 3)
    assert m["reward/consistency/gated_out_rate"] == pytest.approx(1 / 3)  # the third: right output, c = 0
    assert m["reward/consistency/recall_mean"] == pytest.approx((1 / 2 + 1 / 2 + 0) / 3)
    assert m["reward/consistency/no_trace_rate"] == 0.0


def test_spec_examples_in_the_paper_notation():
    text = "[STEP 1] line 1: x = 2\n[STEP 2] line 2: y = 5\n[OUTPUT] 7"
    assert parse_trace(text) == ([(1, "x", "2"), (2, "y", "5")], "7")
    assert _score([text]).values == pytest.approx([1.25])


def test_correct_output_with_inconsistent_trace_gets_no_outcome_credit():
    # claims x=2 (ok), y=5, y=7 (both wrong): c = 1/3 < tau = 0.5 -> R = 0*1 + 0.5/3 = 1/6
    res = _score(["L1 x=2\nL2 y=5\nL2 y=7\nO:7"])
    assert res.values == pytest.approx([1 / 6])
    assert res.metrics["reward/consistency/gated_out_rate"] == 1.0
    # no trace at all: c = 0 -> R = 0 even though the output is right
    res = _score(["O:7"])
    assert res.values == [0.0] and res.metrics["reward/consistency/no_trace_rate"] == 1.0


def test_f1_process_term_pays_for_coverage_by_hand():
    # LOOP_TRACE has 5 records. A: all 5 claimed right -> c = 1, recall = 1, F1 = 1.
    # B: only "L1 s=0" -> c = 1, recall = 1/5, F1 = 2*1*0.2/1.2 = 1/3.
    # C: 4 claims, 2 right (s=0, i=0) -> c = 1/2, recall = 2/5, F1 = 2*0.5*0.4/0.9 = 4/9.
    # All with the right output 3; gate on c (>= 0.5 passes for all three):
    # precision: A 1 + .5*1 = 1.5, B 1 + .5*1 = 1.5, C 1 + .5*.5 = 1.25
    # f1:        A 1.5,            B 1 + .5/3 = 7/6, C 1 + .5*4/9 = 11/9
    texts = ["L1 s=0\nL2 i=0\nL3 s=1\nL2 i=1\nL3 s=3\nO:3", "L1 s=0\nO:3", "L1 s=0\nL2 i=0\nL3 s=5\nL2 i=7\nO:3"]
    assert _score(texts, trace=LOOP_TRACE, answer="3").values == pytest.approx([1.5, 1.5, 1.25])
    assert _score(texts, trace=LOOP_TRACE, answer="3", process="f1").values == pytest.approx([1.5, 7 / 6, 11 / 9])
    # multiplicative with f1: o * (1 - .5 + .5 * F1): B -> .5 + .5/3 = 2/3
    res = _score(texts[1:2], trace=LOOP_TRACE, answer="3", process="f1", mode="multiplicative")
    assert res.values == pytest.approx([2 / 3])
    with pytest.raises(ValueError, match="unknown process"):
        ConsistencyReward(process="recall")
    with pytest.raises(ValueError, match="needs the recall"):
        ConsistencyReward(process="f1").value(1.0, 1.0)


def test_own_example_gated_multiplicative_outcome():
    # loop program, claims: s=0 ok, i=0 ok, s=1 ok, i=1 ok, s=4 (wrong; true 3) -> c = 4/5 = 0.8
    text = "L1 s=0\nL2 i=0\nL3 s=1\nL2 i=1\nL3 s=4\nO:3"
    # gated: 1[0.8 >= 0.5]*1 + 0.5*0.8 = 1.4
    assert _score([text], LOOP_TRACE, "3").values == pytest.approx([1.4])
    # multiplicative, lambda 0.5: 1*(1 - 0.5 + 0.5*0.8) = 0.9; lambda 0.2: 1*(0.8 + 0.16) = 0.96
    assert _score([text], LOOP_TRACE, "3", mode="multiplicative").values == pytest.approx([0.9])
    assert _score([text], LOOP_TRACE, "3", mode="multiplicative", lambda_p=0.2).values == pytest.approx([0.96])
    # wrong output: multiplicative gives 0; gated keeps the dense 0.5*0.8 = 0.4
    assert _score([text.replace("O:3", "O:4")], LOOP_TRACE, "3", mode="multiplicative").values == [0.0]
    assert _score([text.replace("O:3", "O:4")], LOOP_TRACE, "3").values == pytest.approx([0.4])
    # outcome mode: R = o whatever the trace
    assert _score(["O:3", "L1 s=9\nO:2"], LOOP_TRACE, "3", mode="outcome").values == [1.0, 0.0]
    # a stricter gate: tau = 0.9 > c = 0.8 -> 0 + 0.5*0.8 = 0.4
    assert _score([text], LOOP_TRACE, "3", tau=0.9).values == pytest.approx([0.4])


def test_reward_options_and_missing_trace_fail_loudly():
    with pytest.raises(ValueError, match="valid: \\['gated', 'multiplicative', 'outcome'\\]"):
        ConsistencyReward(mode="prm")
    with pytest.raises(ValueError, match="lambda_p"):
        ConsistencyReward(mode="multiplicative", lambda_p=1.5)
    with pytest.raises(ValueError, match="tau"):
        ConsistencyReward(tau=2.0)
    with pytest.raises(ValueError, match="row 1: meta has no 'trace'"):
        ConsistencyReward().score(["", ""], ["O:7", "O:7"], answer=["7", "7"], meta=[{"trace": []}, {}])


# ----------------------------------------------------------------------------- alignment


def test_monotone_alignment_with_a_loop():
    in_order = [(1, "s", "0"), (2, "i", "0"), (3, "s", "1"), (2, "i", "1"), (3, "s", "3")]
    assert consistency(in_order, LOOP_TRACE) == (1.0, [True] * 5)
    # second iteration claimed before the first: only one pair can be aligned in order -> 2/4;
    # the earlier claims are kept, the out-of-order ones flagged
    swapped = [(2, "i", "1"), (3, "s", "3"), (2, "i", "0"), (3, "s", "1")]
    assert consistency(swapped, LOOP_TRACE) == (0.5, [True, True, False, False])
    # one trace record backs one claim: a repeated s=1 is not consistent twice -> 2/3
    repeated = [(2, "i", "0"), (3, "s", "1"), (3, "s", "1")]
    assert consistency(repeated, LOOP_TRACE) == (pytest.approx(2 / 3), [True, True, False])
    # true value at the wrong line (s=1 is written by line 3, not line 2) does not count
    assert consistency([(2, "s", "1")], LOOP_TRACE) == (0.0, [False])


def test_alignment_is_optimal_not_greedy():
    # X = s=3 (last record), then s=0 and i=0 (the first two): greedy would take X and then
    # nothing; the best monotone alignment drops X and keeps the other two -> c = 2/3
    claims = [(3, "s", "3"), (1, "s", "0"), (2, "i", "0")]
    assert consistency(claims, LOOP_TRACE) == (pytest.approx(2 / 3), [False, True, True])
    assert consistency([], LOOP_TRACE) == (0.0, [])


def test_values_compare_after_normalisation():
    trace = [[1, "l", "[1, 2]"], [2, "s", "'ab'"], [3, "f", "True"]]
    assert consistency([(1, "l", "[1,2]"), (2, "s", '"ab"'), (3, "f", "True")], trace)[0] == 1.0
    assert canon_value(" [1,2] ") == "[1, 2]" and canon_value("hello world") == "hello world"
    assert canon_value(6) == "6" and canon_value("007") == "007"  # not a literal: compared as text
    assert normalize_output("[1,2]\n7\n\n") == "[1, 2]\n7"


# ----------------------------------------------------------------------------- parser


def test_parser_reads_several_assignments_and_literals():
    steps = parse_steps("L1 a=1 b='x y' c=[1, 2]\nL3\nO:[1,2]")
    assert [(s.offset, s.line) for s in steps] == [(0, 1), (24, 3)]
    assert steps[0].assertions == ((1, "a", "1"), (1, "b", "'x y'"), (1, "c", "[1, 2]"))
    assert steps[1].assertions == ()
    assert parse_output("L1 a=1\nO:[1,2]") == ("[1,2]", 7)


@pytest.mark.parametrize(
    "text,assertions,output",
    [
        ("L2 y=\nO:7", [(2, None, "y=")], "7"),  # a value is missing
        ("L2 y=[1,2\nO:", [(2, None, "y=[1,2")], ""),  # unbalanced bracket; empty output
        ("L2 y=6 junk\nO:7", [(2, "y", "6"), (2, None, "junk")], "7"),
        ("L2 =6", [(2, None, "=6")], None),
        ("hello\nLx y=1\nL2y=6\nthe output is 7", [], None),  # no step, no output line
        ("", [], None),
        ("O:1\nO:2", [], "1\n2"),  # one O: line per printed line
    ],
)
def test_parser_on_malformed_text(text, assertions, output):
    assert parse_trace(text) == (assertions, output)


def test_worked_values_claim_the_last_part():
    assert parse_trace("L2 b=5+5=10 c=5--3=8\nL3 s='a=b'")[0] == [(2, "b", "10"), (2, "c", "8"), (3, "s", "'a=b'")]
    # the working is not checked: a wrong sum with the right value is consistent, and vice versa
    assert consistency(parse_trace("L1 x=2\nL2 y=2*4=6")[0], SPEC_TRACE)[0] == 1.0
    assert consistency(parse_trace("L1 x=2\nL2 y=2*3=5")[0], SPEC_TRACE)[0] == 0.5


def test_working_uses_module_level_values_only():
    # x=1; def f(): x=7 (a local); y=f(); z=x+1 -> the working of line 6 uses the global x = 1
    code = "x=1\ndef f():\n x=7\n return x\ny=f()\nz=x+1\nprint(z)\n"
    trace = [[1, "x", "1"], [3, "x", "7"], [5, "y", "7"], [6, "z", "2"]]
    assert render_demo(trace, "2\n", code=code) == "L1 x=1\nL3 x=7\nL5 y=7\nL6 z=x+1=1+1=2\nO:2"
    # a non-int operand shows no working
    strings = [[1, "s", "'ab'"], [2, "t", "'abab'"]]
    assert render_demo(strings, "abab", code="s='ab'\nt=s+s\n") == "L1 s='ab'\nL2 t='abab'\nO:abab"


def test_malformed_claims_count_against_consistency():
    # x=2 ok, "y=" malformed (never consistent): c = 1/2
    assert consistency(parse_trace("L1 x=2\nL2 y=\nO:7")[0], SPEC_TRACE) == (0.5, [True, False])


# ----------------------------------------------------------------------------- branching helpers


def test_branch_point_cuts_before_the_first_wrong_step():
    text = "L1 x=2\nL2 y=5\nO:7"
    assert step_boundaries(text) == [0, 7, 14]
    assert first_inconsistent_step(text, SPEC_TRACE) == 1
    cut = branch_point(text, SPEC_TRACE, random.Random(0))
    assert cut == 7 and text[:cut] == "L1 x=2\n"
    assert prefix_consistency(text, SPEC_TRACE) == [1.0, 0.5]
    # wrong first step: cut at 0 (nothing shared)
    assert branch_point("L1 x=3\nL2 y=6\nO:7", SPEC_TRACE, random.Random(0)) == 0


def test_branch_point_prefix_semantics_and_fully_consistent():
    # s=3 (last record) alone is a consistent prefix; adding s=0 breaks the order -> step 1
    text = "L3 s=3\nL1 s=0\nO:3"
    assert first_inconsistent_step(text, LOOP_TRACE) == 1
    assert prefix_consistency(text, LOOP_TRACE) == [1.0, 0.5]
    good = "L1 x=2\nL2 y=6\nO:7"
    assert first_inconsistent_step(good, SPEC_TRACE) is None
    cuts = {branch_point(good, SPEC_TRACE, random.Random(s)) for s in range(40)}
    assert cuts == {7, 14}  # step boundaries after the first (cutting at 0 shares nothing)
    assert branch_point("no steps", SPEC_TRACE, random.Random(0)) == 0


# ----------------------------------------------------------------------------- tracer bootstrap


def _subprocess_runner(code, *, stdin="", timeout=2.0, memory_mb=256):
    """The bootstrap under a plain interpreter, for our own hand-written programs only."""
    p = subprocess.run([sys.executable, "-I", "-c", code], input=stdin, capture_output=True, text=True, timeout=timeout)
    return SimpleNamespace(
        status="ok" if p.returncode == 0 else "error",
        stdout=p.stdout,
        stderr=p.stderr,
        returncode=p.returncode,
        seconds=0.0,
    )


HAND = ("a=int(input())\nb=0\nfor i in range(2):\n b=b+a\nl=[1]\nl.append(b)\nprint(b+1)\n", "4")
# documented trace: targets per line (b=b+a records b), the final for check records nothing,
# the list mutation records l, the print line records nothing
HAND_TRACE = [
    [1, "a", "4"],
    [2, "b", "0"],
    [3, "i", "0"],
    [4, "b", "4"],
    [3, "i", "1"],
    [4, "b", "8"],
    [5, "l", "[1]"],
    [6, "l", "[1, 8]"],
]


def _runners():
    return [pytest.param(_subprocess_runner, id="subprocess"), pytest.param(run_python, id="sandbox")]


@pytest.fixture
def fresh_cache(monkeypatch):
    monkeypatch.setattr(codegen, "_CACHE", codegen.OrderedDict())


@pytest.mark.parametrize("runner", _runners())
def test_tracer_gives_the_documented_trace(runner, fresh_cache):
    spec = ("x = 2\ny = x*3\nprint(y+1)\n", "")
    bad = ("x=1\nprint(x//0)\n", "")
    res = codegen.trace_programs([HAND, spec, bad, HAND], runner=runner, batch=2)
    assert codegen.flat_trace(res[0]["steps"]) == HAND_TRACE and res[0]["output"] == "9\n"
    assert [s[0] for s in res[0]["steps"]] == [1, 2, 3, 4, 3, 4, 3, 5, 6, 7]  # every executed line
    assert codegen.flat_trace(res[1]["steps"]) == SPEC_TRACE and res[1]["output"] == "7\n"
    assert res[2]["error"].startswith("ZeroDivisionError") and res[0]["error"] is None
    assert res[3] is res[0]  # cached per (code, input)


def test_sandbox_failure_is_bisected_to_the_program(fresh_cache):
    calls = []

    def runner(code, *, stdin, timeout, memory_mb):
        jobs = json.loads(stdin)
        calls.append(len(jobs))
        if any("LOOP" in j["code"] for j in jobs):
            return SimpleNamespace(status="timeout", stdout="", stderr="", returncode=None, seconds=timeout)
        res = _subprocess_runner(code, stdin=stdin)
        res.stdout_truncated = any("BIG" in j["code"] for j in jobs)  # as if over the output cap
        return res

    progs = [("print(1)\n", ""), ("# LOOP\nwhile 1:\n pass\n", ""), ("print(2)\n", ""), ("# BIG\n", "")]
    res = codegen.trace_programs(progs, runner=runner, batch=4)
    assert calls == [4, 2, 1, 1, 2, 1, 1]  # whole batch, then halves, then each bad half split again
    assert res[1]["error"].startswith("sandbox status 'timeout'") and res[0]["output"] == "1\n"
    assert res[3]["error"] == "the trace is longer than the sandbox's output cap" and res[2]["output"] == "2\n"
    assert progs[1] not in codegen._CACHE and progs[0] in codegen._CACHE  # timeouts are not cached


# ----------------------------------------------------------------------------- task (pure parts)


def test_render_demo_and_prompt():
    assert render_demo(SPEC_TRACE, "7\n") == "L1 x=2\nL2 y=6\nO:7"
    assert render_demo([[1, "l", "[1, 2]"], [1, "n", "2"]], "[1, 2]\n") == "L1 l=[1,2] n=2\nO:[1,2]"
    assert render_demo(SPEC_TRACE, "7\n", "paper") == "[STEP 1] line 1: x = 2\n[STEP 2] line 2: y = 6\n[OUTPUT] 7"
    # with the code, one-line arithmetic assignments show their working; the claim stays y = 6
    code = "x = 2\ny = x * 3\nprint(y+1)\n"
    worked = render_demo(SPEC_TRACE, "7\n", code=code)
    assert worked == "L1 x=2\nL2 y=x*3=2*3=6\nO:7" and parse_trace(worked) == ([(1, "x", "2"), (2, "y", "6")], "7")
    assert render_demo(SPEC_TRACE, "7\n", code=code, work="values") == "L1 x=2\nL2 y=2*3=6\nO:7"
    assert render_demo(SPEC_TRACE, "7\n", code=code, work="none") == "L1 x=2\nL2 y=6\nO:7"
    assert compact_value("(1, 'a b')") == "(1,'a b')" and compact_value("hi there") == "hi there"
    assert make_prompt("print(1)", "3\n4\n") == "print(1)\nIN:3\nIN:4\n" and make_prompt("x\n", "") == "x\n"
    assert make_prompt("a=1\nif a:\n b=2", "5", numbered=True) == "1|a=1\n2|if a:\n3| b=2\nIN:5\n"


@pytest.mark.parametrize(
    "options,match",
    [
        ({"colour": 1}, "unknown option"),
        ({"constructs": "arith,goto"}, "goto"),
        ({"template": "xml"}, "compact"),
        ({"ops": "/"}, "ops"),
        ({"work": True}, "valid: \\['expr', 'values', 'none'\\]"),
        ({"min_statements": 3, "max_statements": 2}, "min_statements"),
        ({"input_prob": 2}, "input_prob"),
        ({"test_data": "x.jsonl"}, "needs data"),
        ({"max_iters": 0}, "max_iters"),
    ],
)
def test_option_validation(options, match):
    with pytest.raises(ValueError, match=match):
        CodeTask(**options)


def test_generator_is_seeded_and_uses_only_the_chosen_constructs():
    task = CodeTask(constructs="list,str", input_prob=0.0)
    a = [codegen.sample_program(random.Random(5), task.config) for _ in range(3)]
    assert a[0] == a[1] == a[2]
    progs = [codegen.sample_program(random.Random(s), task.config)[0] for s in range(200)]
    assert not any("for " in p or "if " in p or "input" in p for p in progs)
    assert any("l=[" in p for p in progs) and any("s='" in p for p in progs)


def _write(tmp_path, rows, name="d.jsonl"):
    path = tmp_path / name
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return str(path)


def test_user_rows_with_precomputed_trace_need_no_sandbox(tmp_path, monkeypatch):
    monkeypatch.setattr(codegen, "_sandbox_runner", lambda: pytest.fail("the sandbox must not be called"))
    row = {"code": "x = 2\ny = x*3\nprint(y+1)", "output": "7\n", "trace": [[1, "x", 2], [2, "y", "6"]], "id": 7}
    path = _write(tmp_path, [row, {**row, "code": "x = 2\ny = x*3\nprint(y+1)\n#b", "demo": "L2 y=6\nO:7"}])
    task = CodeTask(data=path, test_fraction=0.0)
    items = take_items(task, "train", 2, seed=0)
    first = next(it for it in items if it.meta["id"] == 7 and it.demo.startswith("L1"))
    assert first.meta == {"trace": [[1, "x", "2"], [2, "y", "6"]], "output": "7", "id": 7}
    assert first.demo == "L1 x=2\nL2 y=x*3=2*3=6\nO:7" and first.prompt == "1|x = 2\n2|y = x*3\n3|print(y+1)\n"
    assert first.key == "x = 2\ny = x*3\nprint(y+1)\n"  # the split does not depend on the numbering
    assert task.max_new_tokens == 1 + int(1.5 * len(first.demo) + 0.999)


@pytest.mark.parametrize(
    "bad,match",
    [
        ({"code": ""}, "row 1: field 'code'"),
        ({"code": "print(1)", "inputs": "3"}, "row 1: unknown field\\(s\\) \\['inputs'\\]"),
        ({"code": "print(1)", "output": "1"}, "row 1: give both 'output' and 'trace'"),
        ({"code": "print(1)", "output": "1", "trace": [[1, 2, 3]]}, "row 1: field 'trace' record 0"),
        ({"code": "print(1)", "input": 3}, "row 1: field 'input' must be a string"),
        ({"code": "print(1)", "output": "1\n", "trace": [], "demo": "O:2"}, "row 1: the demo's output '2'"),
    ],
)
def test_malformed_user_row_names_file_and_row(tmp_path, bad, match):
    good = {"code": "print(1)", "output": "1\n", "trace": []}
    path = _write(tmp_path, [good, bad])
    with pytest.raises(ValueError, match=match) as err:
        CodeTask(data=path)
    assert str(err.value).startswith(path)


def test_bad_json_line_names_file_and_line(tmp_path):
    path = _write(tmp_path, ['{"code": "print(1)", "output": "1", "trace": []}', "{not json"])
    with pytest.raises(ValueError, match=r"d\.jsonl:2: not valid JSON"):
        CodeTask(data=path)


# ----------------------------------------------------------------------------- task (through the sandbox)


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"constructs": "arith,list,str", "template": "paper"},
        {"work": "none", "print_op_prob": 1.0, "ops": "+-*", "numbered": False},
    ],
)
def test_demos_verify_and_are_fully_consistent(options):
    task = CodeTask(**options)
    items = take_items(task, "train", 150, seed=1)
    assert any("+" in it.demo.split("O:")[0] for it in items) == (options == {})  # working only when on
    for it in items:
        assert task.verify(it.demo, it.answer, it.meta) == 1.0, it.prompt
        assert consistency(parse_trace(it.demo)[0], it.meta["trace"])[0] == 1.0, it.prompt
        assert len(it.prompt) <= 150 and len(it.demo) + 1 <= task.max_new_tokens
    values = ConsistencyReward()(
        [it.prompt for it in items],
        [it.demo for it in items],
        answer=[it.answer for it in items],
        meta=[it.meta for it in items],
    )
    assert values == pytest.approx([1.5] * len(items))  # o = 1, c = 1: 1 + 0.5


def test_splits_disjoint_and_deterministic():
    task = CodeTask()
    test = {it.key for it in take_items(task, "test", 60, seed=0)}
    train = {it.key for it in take_items(task, "train", 600, seed=0, unique=False)}
    assert not test & train
    again = take_items(CodeTask(), "test", 20, seed=0)
    assert [it.key for it in again] == [it.key for it in take_items(task, "test", 20, seed=0)]
    assert [it.meta for it in again] == [it.meta for it in take_items(task, "test", 20, seed=0)]
    assert [it.key for it in again] != [it.key for it in take_items(task, "test", 20, seed=1)]


def test_user_rows_are_traced_in_the_sandbox(tmp_path):
    path = _write(tmp_path, [{"code": HAND[0], "input": HAND[1]}, {"code": "x = 2\ny = x*3\nprint(y+1)\n"}])
    task = CodeTask(data=path, test_fraction=0.0)
    by_prompt = {it.key: it for it in task.split_items("train")}
    hand = by_prompt[HAND[0] + "IN:4\n"]
    assert hand.meta["trace"] == HAND_TRACE and hand.answer == "9"
    assert hand.demo == "L1 a=4\nL2 b=0\nL3 i=0\nL4 b=b+a=0+4=4\nL3 i=1\nL4 b=b+a=4+4=8\nL5 l=[1]\nL6 l=[1,8]\nO:9"
    crash = _write(tmp_path, [{"code": "print(1)"}, {"code": "print(1/0)"}], "crash.jsonl")
    with pytest.raises(ValueError, match=r"crash\.jsonl: row 1: the program failed in the sandbox: ZeroDivisionError"):
        CodeTask(data=crash)


def test_task_diagnostics_trace_consistency_and_consistent_pass_by_hand():
    meta = {"trace": SPEC_TRACE, "output": "7"}
    texts = [
        "L1 x=2\nL2 y=6\nO:7",  # c = 1, right: a consistent pass
        "L1 x=2\nL2 y=5\nO:7",  # c = 1/2, right: a pass, not a consistent one
        "O:7",  # no claims: c = 0, right
        "L1 x=2\nL2 y=6\nO:8",
    ]  # c = 1, wrong
    scores = [1.0, 1.0, 1.0, 0.0]
    out = CodeTask().diagnostics(texts, [meta] * 4, scores)
    assert out["trace_consistency"] == pytest.approx((1 + 0.5 + 0 + 1) / 4)
    assert out["consistent_pass"] == pytest.approx(1 / 4)
