"""The judge's HTTP transport (issue 41): transient failures retried with exponential backoff under one
deadline per request, permanent ones failing at once, a server that trickles its reply cut at the
deadline, and a request that still fails leaving its row unscored (never a "no"). A local server scripts
each behaviour by a word in the question; a fake clock gives the backoff schedule by hand."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from reasonrl.rewards.judge import JudgeReward, clear_cache


@pytest.fixture(autouse=True)
def fresh():
    clear_cache()
    yield
    clear_cache()


class Scripted(BaseHTTPRequestHandler):
    """A chat endpoint: 'FAIL2' answers 500 to its first two requests, then "yes"; 'ALWAYS500' always 500;
    'DROP1' closes its first connection without a reply; 'AUTH' answers 401; 'SLOW' sleeps 3 s before
    replying; 'TRICKLE' sends its headers, then its body one byte every 0.25 s. Anything else: "yes"."""

    counts: dict = {}
    lock = threading.Lock()

    def do_POST(self):
        prompt = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["messages"][0]["content"]
        key = next((k for k in ("FAIL2", "ALWAYS500", "DROP1", "AUTH", "SLOW", "TRICKLE") if k in prompt), "OK")
        with Scripted.lock:
            Scripted.counts[key] = n = Scripted.counts.get(key, 0) + 1
        body = json.dumps({"choices": [{"message": {"role": "assistant", "content": "yes"}}]}).encode()
        if key == "DROP1" and n == 1:
            self.close_connection = True
            return  # no status line at all: the client sees the connection closed
        status = {"FAIL2": 500 if n <= 2 else 200, "ALWAYS500": 500, "AUTH": 401}.get(key, 200)
        if key == "SLOW":
            time.sleep(3.0)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            if key == "TRICKLE":
                for i in range(len(body)):
                    self.wfile.write(body[i : i + 1])
                    self.wfile.flush()
                    time.sleep(0.25)
            else:
                self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up at its deadline
            pass

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    Scripted.counts = {}
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Scripted)
    srv.daemon_threads = True
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    srv.shutdown()
    srv.server_close()


def ask(server, questions, **options):
    judge = JudgeReward(backend=server, template="{question} A={answer} ", **options)
    return judge.score(
        ["p"] * len(questions),
        ["3"] * len(questions),
        answer=["3"] * len(questions),
        meta=[{"question": q} for q in questions],
    )


def test_transient_failures_are_retried_until_an_answer(server):
    # FAIL2: 500, 500, then yes -> 2 retries; DROP1: a dropped connection, then yes -> 1 retry
    res = ask(server, ["FAIL2", "DROP1"], timeout=20, retries=3, backoff=0.01)
    assert res.values == [1.0, 1.0] and res.failed == [False, False]
    assert Scripted.counts == {"FAIL2": 3, "DROP1": 2}
    assert res.metrics["judge/retries"] == pytest.approx(3 / 2)  # (2 + 1) retries over 2 rows
    assert res.metrics["judge/errors"] == 0


def test_a_request_that_still_fails_is_an_unscored_row_not_a_no(server):
    res = ask(server, ["ALWAYS500", "AUTH", "OK"], timeout=20, retries=2, backoff=0.01)
    assert res.values == [None, None, 1.0] and res.failed == [True, True, False]
    # 500: 1 try + 2 retries; 401 is the request's own fault: no retry
    assert Scripted.counts == {"ALWAYS500": 3, "AUTH": 1, "OK": 1}
    assert res.metrics["judge/errors"] == pytest.approx(2 / 3)


def test_the_deadline_covers_the_whole_request(server):
    # SLOW never answers in time; TRICKLE's body (about 70 bytes at one per 0.25 s) would take ~17 s, each byte
    # well inside a per-socket-operation timeout: only a deadline on the whole request stops it
    res = ask(server, ["SLOW", "TRICKLE"], timeout=1.0, concurrency=2)  # the default retries (3)
    assert res.values == [None, None] and res.failed == [True, True]
    assert res.metrics["judge/timeouts"] == 1.0
    assert Scripted.counts == {"SLOW": 1, "TRICKLE": 1}  # the deadline was spent: no retry started after it


class FakeClock:
    def __init__(self):
        self.now, self.sleeps = 0.0, []

    def __call__(self):
        return self.now

    def sleep(self, s):
        self.sleeps.append(s)
        self.now += s


def test_backoff_doubles_and_never_starts_past_the_deadline():
    from reasonrl.rewards.judge_http import JudgeFailure, JudgeTimeout, Transient, with_retries

    clock, tries = FakeClock(), []

    def attempt(end):
        tries.append(clock.now)
        raise Transient("HTTP 503")

    # deadline 10, backoff 1: waits 1, 2, 4 (at t = 7 the next wait, 8, would end past 10: stop)
    with pytest.raises(JudgeFailure, match="after 3 retries") as err:
        with_retries(attempt, 10.0, retries=5, backoff=1.0, clock=clock, sleep=clock.sleep)
    assert clock.sleeps == [1.0, 2.0, 4.0] and tries == [0.0, 1.0, 3.0, 7.0] and err.value.retries == 3
    # the retry budget ends it first: retries=2 -> waits 1, 2
    clock = FakeClock()
    with pytest.raises(JudgeFailure):
        with_retries(attempt, 100.0, retries=2, backoff=1.0, clock=clock, sleep=clock.sleep)
    assert clock.sleeps == [1.0, 2.0]
    # an attempt that ran out of the deadline: a timeout, no retry
    clock = FakeClock()

    def slow(end):
        clock.now = end
        raise Transient("no reply", timeout=True)

    with pytest.raises(JudgeTimeout):
        with_retries(slow, 5.0, retries=3, backoff=0.5, clock=clock, sleep=clock.sleep)
    assert clock.sleeps == []
    # a success after one failure: (text, 1 retry)
    outcomes = iter([Transient("reset"), "yes"])

    def flaky(end):
        out = next(outcomes)
        if isinstance(out, Exception):
            raise out
        return out

    clock = FakeClock()
    assert with_retries(flaky, 5.0, retries=3, backoff=0.5, clock=clock, sleep=clock.sleep) == ("yes", 1)
    assert clock.sleeps == [0.5]
