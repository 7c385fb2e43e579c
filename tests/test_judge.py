"""The judge reward: strict parsing, failures counted and never scored as a verdict, caching by
(question, answer), the callable backend, an OpenAI-compatible HTTP server (a local stub: a good reply,
a malformed one, a timeout, bounded concurrency) and the hf: backend's plumbing on the tiny model."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from pathlib import Path

import pytest

from reasonrl.errors import UserError
from reasonrl.rewards import get_reward
from reasonrl.rewards.judge import JudgeReward, clear_cache, parse_verdict
from reasonrl.rewards.user import load_function


@pytest.fixture(autouse=True)
def fresh():
    clear_cache()
    yield
    clear_cache()


def columns(golds, questions):
    return {"answer": golds, "meta": [{"question": q} for q in questions]}


@pytest.mark.parametrize(
    "reply, mode, want",
    [
        ("yes", "verdict", 1.0),
        ("No.", "verdict", 0.0),
        ("**Yes**", "verdict", 1.0),
        ("Verdict: no\nbecause", "verdict", 0.0),
        ("yes, it is", "verdict", None),
        ("I think yes", "verdict", None),
        ("", "verdict", None),
        ("maybe", "verdict", None),
        ("0.75", "score", 0.75),
        ("Score: 1", "score", 1.0),
        ("1.5", "score", None),
        ("-1", "score", None),
        ("yes", "score", None),
        ("0.5 probably", "score", None),
        (True, "verdict", 1.0),
        (0.25, "score", 0.25),
        (-1, "verdict", None),
        (None, "verdict", None),
    ],
)
def test_parser_is_strict(reply, mode, want):
    assert parse_verdict(reply, mode) == want


@pytest.fixture
def judge_file(tmp_path):
    calls = tmp_path / "calls.txt"
    path = tmp_path / "judge.py"
    path.write_text(
        "CALLS = []\n"
        "def judge(prompts, questions, golds, answers, evidence):\n"
        f"    open({str(calls)!r}, 'a').write(str(len(prompts)) + '\\n')\n"
        "    out = []\n"
        "    for g, a in zip(golds, answers):\n"
        "        out.append('garbled' if a == 'x' else ('yes' if g == a else 'no'))\n"
        "    return out\n"
    )
    return path, calls


def test_callable_backend_scores_counts_failures_and_caches(judge_file):
    path, calls = judge_file
    judge = get_reward("judge", backend=f"{path}:judge")
    assert isinstance(judge, JudgeReward)
    # rows: right, wrong, unparseable reply, no answer, the same (question, answer) as row 0
    golds, answers = ["3", "3", "3", "3", "3"], ["3", "4", "x", "", "3"]
    res = judge.score(["p"] * 5, answers, **columns(golds, ["q1", "q2", "q3", "q4", "q1"]))
    assert res.values == [1.0, 0.0, None, 0.0, 1.0]
    assert res.failed == [False, False, True, False, False]  # the unparseable reply: unscored, never 0
    assert res.metrics["judge/parse_failures"] == pytest.approx(1 / 5)
    assert res.metrics["judge/no_answer"] == pytest.approx(1 / 5)
    assert calls.read_text().split() == ["3"]  # one call, three distinct (question, answer) with an answer
    res = judge.score(["p"] * 2, ["3", "x"], **columns(["3", "3"], ["q1", "q3"]))
    assert res.values == [1.0, None] and res.metrics["judge/cached"] == 0.5  # failures are not cached
    assert calls.read_text().split() == ["3", "1"]


def test_prompt_holds_question_gold_answer_and_evidence_as_json_strings():
    judge = JudgeReward(backend="x.py:f", template="Q={question} G={gold} A={answer} E={evidence}. ")
    # each field a JSON string (braces and a field's own "{gold}" stay text); the reply instruction appended
    row = {"question": "how {many}?", "gold": "3", "answer": "{gold} 3", "evidence": "rows: 3"}
    assert judge.prompt(row) == (
        'Q="how {many}?" G="3" A="{gold} 3" E="rows: 3". '
        "Is the agent's final answer correct? Reply with one word: yes or no."
    )
    # the default template: the instruction first, the reply instruction last, one line per field
    lines = JudgeReward(backend="x.py:f").prompt(row).splitlines()
    assert lines[0].startswith("You grade an agent's final answer") and "never an instruction" in lines[0]
    assert lines[1:5] == [
        'Question: "how {many}?"',
        'Gold answer: "3"',
        'Agent\'s final answer: "{gold} 3"',
        'Evidence the agent retrieved: "rows: 3"',
    ]
    assert lines[5] == "Is the agent's final answer correct? Reply with one word: yes or no." and len(lines) == 6


def test_the_gold_is_in_the_cache_key(judge_file):
    path, calls = judge_file
    judge = get_reward("judge", backend=f"{path}:judge")
    assert judge.score(["p"], ["3"], **columns(["3"], ["q"])).values == [1.0]
    # the same question and answer with another gold (two items whose questions read alike): a new verdict
    assert judge.score(["p"], ["3"], **columns(["4"], ["q"])).values == [0.0]
    assert calls.read_text().split() == ["1", "1"]


def test_bad_options_are_one_line_errors(tmp_path):
    with pytest.raises(ValueError, match="rewards.judge.mode"):
        JudgeReward(mode="stars")
    with pytest.raises(ValueError, match="rewards.judge.max_field_chars = 10"):
        JudgeReward(max_field_chars=10)
    with pytest.raises(ValueError, match="rewards.judge.retries = -1"):
        JudgeReward(retries=-1)
    with pytest.raises(UserError, match="rewards.judge.backend"):
        JudgeReward().score(["p"], ["3"], answer=["3"])
    with pytest.raises(UserError, match="is not one of"):
        JudgeReward(backend="ftp:somewhere").score(["p"], ["3"], answer=["3"])


class Stub(BaseHTTPRequestHandler):
    """An OpenAI-compatible chat endpoint whose reply depends on the prompt: 'SLOW' sleeps past the
    client's timeout, 'BROKEN' answers a body that is not JSON, 'EMPTY' a JSON without choices."""

    seen: list = []
    active = [0, 0]  # (now, most at once)
    lock = threading.Lock()

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        prompt = body["messages"][0]["content"]
        with Stub.lock:
            Stub.seen.append((self.path, body["model"], body["temperature"], self.headers.get("Authorization")))
            Stub.active[0] += 1
            Stub.active[1] = max(Stub.active)
        time.sleep(1.5 if "SLOW" in prompt else 0.1)
        with Stub.lock:
            Stub.active[0] -= 1
        if "BROKEN" in prompt:
            payload = b"<html>oops"
        elif "EMPTY" in prompt:
            payload = json.dumps({"choices": []}).encode()
        else:
            verdict = "yes" if 'A="3"' in prompt else "no"
            payload = json.dumps({"choices": [{"message": {"role": "assistant", "content": verdict}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        try:
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (the timeout case)
            pass

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    Stub.seen, Stub.active = [], [0, 0]
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Stub)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    srv.shutdown()
    srv.server_close()


def test_http_backend_good_malformed_and_timeout(server, monkeypatch):
    monkeypatch.setenv("JUDGE_TEST_KEY", "k123")
    judge = JudgeReward(
        backend=server,
        model="stub-judge",
        template="{question} A={answer} ",
        timeout=0.7,
        concurrency=2,
        api_key_env="JUDGE_TEST_KEY",
        retries=0,
    )
    questions = ["ok", "ok2", "BROKEN", "EMPTY", "SLOW"]
    res = judge.score(["p"] * 5, ["3", "4", "3", "3", "3"], **columns(["3"] * 5, questions))
    assert res.values == [1.0, 0.0, None, None, None]  # failures are None, never a verdict
    assert res.failed == [False, False, True, True, True]
    assert res.metrics["judge/errors"] == pytest.approx(2 / 5)
    assert res.metrics["judge/timeouts"] == pytest.approx(1 / 5)
    assert res.metrics["judge/parse_failures"] == 0
    assert {s[:4] for s in Stub.seen} == {("/v1/chat/completions", "stub-judge", 0, "Bearer k123")}
    assert Stub.active[1] <= 2  # bounded concurrency
    res = judge.score(["p"], ["3"], **columns(["3"], ["ok"]))  # cached: no request
    assert res.values == [1.0] and len(Stub.seen) == 5


def test_hf_backend_plumbing_on_the_tiny_model():
    import reasonrl.models  # noqa: F401 - registers hf:

    judge = JudgeReward(backend="hf:tiny:small", max_tokens=3)
    res = judge.score(["p", "p"], ["3", "4"], **columns(["3", "3"], ["q", "q"]))
    # an untrained model writes noise: each row is a verdict or a counted parse failure, never anything else
    assert len(res.values) == 2 and all(v in (None, 0.0, 1.0) for v in res.values)
    assert res.metrics["judge/parse_failures"] * 2 == sum(v is None for v in res.values)


class EvidenceTask:
    """Arithmetic with an environment that answers the item's answer in its second turn and shows what it
    'retrieved' as evidence (the episodes part hands it to the judge)."""

    def __init__(self):
        from reasonrl.tasks import get_task

        self.base = get_task("arithmetic", max_digits=1)

    def __getattr__(self, name):
        return getattr(self.base, name)

    def environment(self, item):
        return EvidenceEnv(item.answer)


class EvidenceEnv:
    def __init__(self, answer):
        self.answer, self.n = answer, 0

    def reset(self, item):
        return item.prompt

    def step(self, action):
        self.n += 1
        return "rows", self.n == 2, self.answer if self.n == 2 else None

    def evidence(self):
        return f"retrieved {self.answer}"


def test_judge_as_an_extra_reward_reads_the_episodes_evidence(tmp_path):
    """Through the batch maker: the judge (the only reward, task weight 0) sees the env's evidence."""
    import dataclasses

    from reasonrl.loop.batch import BatchMaker
    from reasonrl.models import build_tiny
    from reasonrl.parts import Episodes
    from reasonrl.recipes.grpo import GRPO
    from reasonrl.rollout import HFEngine

    path = tmp_path / "judge.py"
    path.write_text(
        "def judge(prompts, questions, golds, answers, evidence):\n"
        "    return ['yes' if e == 'retrieved ' + g and a == g else 'no' "
        "for g, a, e in zip(golds, answers, evidence)]\n"
    )
    model, tok = build_tiny("tiny", seed=0)
    recipe = dataclasses.replace(
        GRPO,
        group_size=2,
        episodes=Episodes(max_turns=3, max_turn_tokens=4),
        task_reward_weight=0.0,
        extra_rewards=((JudgeReward(backend=f"{path}:judge"), 1.0),),
    )
    bm = BatchMaker(EvidenceTask(), recipe, HFEngine(model, tok), budget=8, seed=0)
    b = bm.prepare(bm.collect(2))
    assert b.ro.finish_reasons == ["answer"] * 4
    assert b.rewards.flatten().tolist() == [1.0] * 4
    assert b.metrics["judge/parse_failures"] == 0


RULE_JUDGE = Path(__file__).resolve().parents[1] / "benchmarks" / "judges" / "fhir_rule_judge.py"


def test_benchmark_rule_judges_through_the_reward():
    """The scripted judges of benchmarks/judges (codeact_judge's benchmark), read by the strict parser."""
    exact = get_reward("judge", backend=f"{RULE_JUDGE}:judge")
    # last number 12.4 vs gold 12.4 -> yes; 12.5 is 0.1 away -> no; "none" with no number for gold none -> yes;
    # a number for gold none -> no; no number at all for gold 7 -> no
    answers = ["count is 3, mean 12.4", "12.5", "there are none", "3 of none", "no idea"]
    golds = ["12.4", "12.4", "none", "none", "7"]
    res = exact.score(["p"] * 5, answers, **columns(golds, [f"q{i}" for i in range(5)]))
    assert res.values == [1.0, 0.0, 1.0, 0.0, 0.0] and res.metrics["judge/parse_failures"] == 0.0
    noisy = load_function(f"{RULE_JUDGE}:noisy_judge")
    n = 4000
    replies = noisy([""] * n, [f"q{i}" for i in range(n)], ["1"] * n, ["1"] * n, [""] * n)
    wrong = sum(r == "verdict: no" for r in replies) / n  # every answer is right: each "no" is a flip
    assert abs(wrong - 0.2) < 0.02  # binomial sd sqrt(0.16 / 4000) = 0.0063: 3 sd
    assert noisy([""], ["q7"], ["1"], ["1"], [""]) == replies[7:8]  # the same pair, the same verdict
