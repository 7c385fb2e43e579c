"""TEMPO (arXiv 2605.18843): the leakage checker, the two-mode reward and the ``temporal`` task."""

import json
import re
import statistics

import pytest

from reasonrl.rewards.base import RewardError, score_rewards
from reasonrl.rewards.temporal import (
    CachedChecker,
    TempoReward,
    count_claims,
    extract_claims,
    extract_final_answer,
    normalize_statement,
    tempo_rewards,
)
from reasonrl.tasks import take_items
from reasonrl.tasks.temporal import TemporalTask

# cutoff day 10; x=4 is restated after the cutoff (d20), the coincidence case
META = {
    "cutoff": 10,
    "facts": [
        {"date": 3, "stmt": "x=7"},
        {"date": 8, "stmt": "x=4"},
        {"date": 14, "stmt": "x=9"},
        {"date": 16, "stmt": "y=2"},
        {"date": 20, "stmt": "x=4"},
        {"date": 10, "stmt": "y=5"},
    ],
}


# ---------------------------------------------------------------- leakage checker


@pytest.mark.parametrize(
    "claim,leaks",
    [
        ("use d3 x=7", False),
        ("use d10 y=5", False),  # dated on the cutoff day: known
        ("use d14 x=9", True),  # stated date after the cutoff
        ("use x=9", True),  # date omitted, but x=9 exists only after the cutoff
        ("use d5 x=9", True),  # misstated date: the fact is still post-cutoff
        ("use x = 09", True),  # same statement after normalisation
        ("use d20 x=4", True),  # stated date after the cutoff, even though x=4 is also known on d8
        ("use x=4", False),  # supported by the d8 fact
        ("use d9 x=4", False),  # misdated but supported before the cutoff
        ("use d12 z=1", True),  # hallucinated fact with a post-cutoff date
        ("use d9 z=1", False),  # hallucinated, pre-cutoff date: not a leak
        ("use 2020-01-01 x=9", True),  # a date of the other kind counts as omitted; x=9 is post-cutoff only
    ],
)
def test_single_claim_leak_rules(claim, leaks):
    assert count_claims(claim + "\nA:4", META) == (int(leaks), 1)


def test_claims_are_counted_per_use_line_only():
    text = "I peeked at d14 x=9\nuse d3 x=7\n  use d8 x=4\nuse d14 x=9\nuse nothing\nA:4"
    # 4 claim lines (the first line is no claim); only d14 x=9 leaks
    assert count_claims(text, META) == (1, 4)
    assert count_claims("A:4", META) == (0, 0)
    assert [c.stmt for c in extract_claims(text)] == ["x=7", "x=4", "x=9", "nothing"]


def test_statement_normalisation():
    assert normalize_statement(" X  =  007 ") == "x=7"
    assert normalize_statement("Fed  raised Rates") == "fed raised rates"


def test_iso_dates_compare_as_dates():
    meta = {
        "cutoff": "2020-03-01",
        "facts": [{"date": "2020-02-15", "stmt": "price=10"}, {"date": "2020-03-05", "stmt": "price=12"}],
    }
    text = "\n".join(
        [
            "use 2020-02-15 price=10",
            "use 2020-02-29 price=10",  # leap day, before the cutoff
            "use 2020-03-05 price=12",
            "use price=12",  # two leaks
            "use 2020-02-30 price=10",  # invalid date -> omitted, fact is pre
            "use 2020-12-01 Price = 10",
        ]
    )  # stated after the cutoff: leak
    assert count_claims(text, meta) == (3, 6)


def test_checker_rejects_bad_meta_naming_the_field():
    with pytest.raises(ValueError, match="cutoff"):
        count_claims("use d1 x=1", {"facts": []})
    with pytest.raises(ValueError, match="same kind"):
        count_claims("use d1 x=1", {"cutoff": 5, "facts": [{"date": "2020-01-01", "stmt": "x=1"}]})
    with pytest.raises(ValueError, match=r"facts'\]\[0\]"):
        count_claims("", {"cutoff": 5, "facts": [{"day": 1, "stmt": "x=1"}]})


def test_cached_checker_calls_the_judge_once_per_input():
    calls = []

    def judge(completion, meta):
        calls.append(completion)
        return (1, 2)

    cached = CachedChecker(judge)
    assert cached("a", META) == cached("a", META) == (1, 2)
    assert cached("b", META) == (1, 2)
    assert calls == ["a", "b"] and (cached.hits, cached.misses) == (1, 2)


# ---------------------------------------------------------------- TEMPO reward


def _claims(pre: int, post: int) -> str:
    return "\n".join(["use d3 x=7"] * pre + ["use d14 x=9"] * post)


# The spec's four rollouts (answer 4): 2 of 10 claims leak + correct, clean + correct, clean + wrong,
# 1 of 5 leaks + wrong.
SPEC_ROLLOUTS = [_claims(8, 2) + "\nA:4", _claims(3, 0) + "\nA:4", _claims(2, 0) + "\nA:5", _claims(4, 1) + "\nA:9"]


def _score(reward, completions, answer="4", meta=META):
    n = len(completions)
    return score_rewards(reward, [""] * n, completions, {"answer": [answer] * n, "meta": [meta] * n})


def test_spec_example_rewards_and_grpo_advantages():
    result = _score(TempoReward(), SPEC_ROLLOUTS)
    assert result.values == pytest.approx([-0.2, 1.0, 0.0, -0.2])
    r = result.values
    mean, std = statistics.mean(r), statistics.stdev(r)  # unbiased (N-1), as the spec
    assert mean == pytest.approx(0.15) and std == pytest.approx(0.574456, abs=1e-6)
    adv = [(x - mean) / (std + 1e-6) for x in r]
    assert adv == pytest.approx([-0.60927, 1.47966, -0.26112, -0.60927], abs=1e-5)
    m = result.metrics
    # leaky rows 0 and 3; lf = [0.2, 0, 0, 0.2]; task = [1, 1, 0, 0]; rows 1, 2 in performance mode
    assert m["reward/tempo/leak_rate"] == 0.5
    assert m["reward/tempo/leak_frac_mean"] == pytest.approx(0.1)
    assert m["reward/tempo/task_score"] == 0.5
    assert m["reward/tempo/performance_mode_frac"] == 0.5


def test_both_components_per_row():
    rows = TempoReward().components(SPEC_ROLLOUTS, answer=["4"] * 4, meta=[META] * 4)
    assert (rows.k, rows.n, rows.task) == ([2, 0, 0, 1], [10, 3, 2, 5], [1.0, 1.0, 0.0, 0.0])
    assert rows.performance == [False, True, True, False]
    assert rows.leak_frac == pytest.approx([0.2, 0.0, 0.0, 0.2])


def test_no_performance_credit_while_leaking():
    # a single leaky claim with the right answer vs clean wrong / clean right / clean unparsed
    leaky_right = "use d3 x=7\nuse x=9\nA:4"
    clean = ["use d8 x=4\nA:5", "use d8 x=4\nA:4", "use d8 x=4"]
    values = TempoReward()([""] * 4, [leaky_right] + clean, answer=["4"] * 4, meta=[META] * 4)
    assert values[0] == pytest.approx(-0.5) and values[0] <= 0  # 1 of 2 claims leaks; correctness ignored
    assert all(values[0] < v for v in values[1:])
    assert values[1:] == [0.0, 1.0, 0.0]


def test_count_penalty_by_hand():
    # k_cap=5: k=2 -> -2/5 = -0.4; k=7 -> -min(7,5)/5 = -1; k=0 -> task score
    k, n, task = [2, 7, 0], [10, 7, 3], [1.0, 1.0, 1.0]
    values, perf = tempo_rewards(k, n, task, leak_penalty="count", k_cap=5)
    assert values == pytest.approx([-0.4, -1.0, 1.0]) and perf == [False, False, True]
    # k_cap=2: k=2 -> -1; the spec rollouts via the reward object: k = [2,0,0,1] -> [-1, 1, 0, -0.5]
    assert _score(TempoReward(leak_penalty="count", k_cap=2), SPEC_ROLLOUTS).values == pytest.approx([-1, 1, 0, -0.5])


def test_min_claims_withholds_task_credit_from_uncited_answers():
    # min_claims=1: (k=0, n=0, right) -> 0, not performance mode; (k=0, n=2, right) -> 1;
    # (k=1, n=2) -> -1/2 as before; (k=0, n=0, wrong) -> 0. With the default 0 the first row scores 1.
    k, n, task = [0, 0, 1, 0], [0, 2, 2, 0], [1.0, 1.0, 1.0, 0.0]
    values, perf = tempo_rewards(k, n, task, min_claims=1)
    assert values == pytest.approx([0.0, 1.0, -0.5, 0.0]) and perf == [False, True, False, False]
    assert tempo_rewards(k, n, task)[0] == pytest.approx([1.0, 1.0, -0.5, 0.0])
    # through the reward object: "A:4" cites nothing, "use d8 x=4\nA:4" cites a known fact (META: cutoff d10)
    res = _score(TempoReward(min_claims=1), ["A:4", "use d8 x=4\nA:4"])
    assert res.values == pytest.approx([0.0, 1.0])


def test_global_schedule_switches_on_batch_leak_rate():
    reward = TempoReward(mode_schedule="global")  # tau = 0.01
    # 2 of 4 leak (rate 0.5 > tau): leakage-only for the whole batch; clean rows get 0, not their task score
    first = _score(reward, SPEC_ROLLOUTS)
    assert first.values == pytest.approx([-0.2, 0.0, 0.0, -0.2])
    assert first.metrics["reward/tempo/performance_mode_frac"] == 0.0
    # no leaks (rate 0 <= tau): per-response rule, i.e. the task scores [1, 0]
    assert _score(reward, SPEC_ROLLOUTS[1:3]).values == [1.0, 0.0]
    # tau = 0.5: a rate of exactly 0.5 already switches to per-response (spec example values)
    assert _score(TempoReward(mode_schedule="global", tau=0.5), SPEC_ROLLOUTS).values == pytest.approx(
        [-0.2, 1, 0, -0.2]
    )
    # per batch (latch=False): leakage-only again once the leak rate rises
    assert _score(reward, SPEC_ROLLOUTS).values == pytest.approx([-0.2, 0.0, 0.0, -0.2])


def test_global_schedule_latch_keeps_per_response_mode():
    reward = TempoReward(mode_schedule="global", latch=True)
    assert _score(reward, SPEC_ROLLOUTS).values == pytest.approx([-0.2, 0.0, 0.0, -0.2])
    _score(reward, SPEC_ROLLOUTS[1:3])  # a leak-free batch flips the latch
    assert reward.switched
    assert _score(reward, SPEC_ROLLOUTS).values == pytest.approx([-0.2, 1.0, 0.0, -0.2])


def test_pluggable_checker_and_task_score():
    # a judge that says every response leaks 1 of 4 claims; a task score of 0.5 for everything
    judge = TempoReward(checker=lambda c, m: (1 if "bad" in c else 0, 4), task_score=lambda c, a, m: 0.5)
    assert judge([""] * 2, ["bad", "good"], answer=["4", "4"], meta=[{}, {}]) == [-0.25, 0.5]


def test_bad_checker_or_task_score_output_fails_loudly():
    with pytest.raises(RewardError, match=r"returned \(3, 2\).*0 <= k <= n"):
        _score(TempoReward(checker=lambda c, m: (3, 2)), ["A:4"])
    with pytest.raises(RewardError, match=r"not in \[0, 1\]"):
        _score(TempoReward(task_score=lambda c, a, m: 2.0), ["A:4"])
    with pytest.raises(RewardError, match="row 1.*cutoff"):
        score_rewards(TempoReward(), ["", ""], ["A:4", "A:4"], {"answer": ["4", "4"], "meta": [META, {"facts": []}]})


@pytest.mark.parametrize(
    "options,needle",
    [
        ({"leak_penalty": "abs"}, "fraction"),
        ({"mode_schedule": "x"}, "global"),
        ({"k_cap": 0}, "k_cap"),
        ({"tau": 2.0}, "tau"),
        ({"checker": "llm"}, "valid: \\['claims'\\]"),
        ({"min_claims": -1}, "min_claims"),
        ({"min_claims": True}, "min_claims"),
    ],
)
def test_reward_option_validation(options, needle):
    with pytest.raises(ValueError, match=needle):
        TempoReward(**options)


def test_extract_final_answer():
    assert extract_final_answer("use d3 x=7\nA: 07") == "7"
    assert extract_final_answer("A:1\nA:2") == "2"
    assert extract_final_answer("A:  Rates   up ") == "Rates up"
    assert extract_final_answer("A:") is None and extract_final_answer("use d3 x=7") is None


# ---------------------------------------------------------------- the temporal task

LINE = re.compile(r"d(\d+) ([a-z])=(\d+)")


def _parse_prompt(prompt):
    """Independent re-reading of a synthetic prompt: target, cutoff, facts (day, entity, value)."""
    head, *facts = prompt.strip().split("\n")
    target, cutoff = head.split(" @d")
    return target, int(cutoff), [(int(d), e, int(v)) for d, e, v in (LINE.fullmatch(f).groups() for f in facts)]


@pytest.mark.parametrize(
    "options",
    [{}, {"n_facts": 9, "n_entities": 3, "shuffle_facts": True, "max_day": 60}, {"n_entities": 1, "tempt_prob": 1.0}],
)
def test_demos_verify_answers_rederived_and_only_leaky_demos_leak(options):
    task = TemporalTask(**options)
    for it in take_items(task, "train", 300, seed=1):
        target, cutoff, facts = _parse_prompt(it.prompt)
        known = sorted((d, v) for d, e, v in facts if e == target and d <= cutoff)
        assert it.answer == str(known[-1][1])  # the latest value on/before the cutoff
        assert task.verify(it.demo, it.answer, it.meta) == 1.0
        k, n = count_claims(it.demo, it.meta)
        assert n >= 1 and (k > 0) == it.meta["leaky_demo"]
        assert len(it.demo) + 1 <= task.max_new_tokens and len(it.prompt) <= 150


def test_clean_demos_have_zero_leaks_when_leaky_demo_frac_is_zero():
    task = TemporalTask(leaky_demo_frac=0.0)
    assert all(count_claims(it.demo, it.meta)[0] == 0 for it in take_items(task, "train", 300, seed=0))


def test_tempting_evidence_at_the_configured_rates():
    task = TemporalTask(leaky_demo_frac=0.0, tempt_prob=0.6, coincide_prob=0.5, post_frac=0.5)
    items = take_items(task, "train", 2000, seed=0)
    lures = coincide = 0
    for it in items:
        target, cutoff, facts = _parse_prompt(it.prompt)
        assert sum(d > cutoff for d, _, _ in facts) == 3  # round(0.5 * 6) post-cutoff facts in every prompt
        late = [v for d, e, v in sorted(facts) if e == target and d > cutoff]
        lures += bool(late)
        coincide += bool(late) and late[-1] == int(it.answer)
    # binomial standard errors: sqrt(.6*.4/2000) ~ 0.011, sqrt(.25/1200) ~ 0.014; allow ~3.5 sigma
    assert abs(lures / 2000 - 0.6) < 0.04
    assert abs(coincide / lures - 0.5) < 0.05


def test_leaky_demo_fraction_and_they_are_lure_and_coincide():
    items = take_items(TemporalTask(leaky_demo_frac=0.3), "train", 2000, seed=0)
    leaky = [it for it in items if it.meta["leaky_demo"]]
    assert abs(len(leaky) / 2000 - 0.3) < 0.035
    assert all(it.meta["lure"] and it.meta["coincide"] for it in leaky)


def test_splits_disjoint_and_deterministic_by_seed():
    task = TemporalTask()
    test = {it.key for it in take_items(task, "test", 300, seed=0)}
    train = {it.key for s in (0, 1) for it in take_items(task, "train", 2000, seed=s, unique=False)}
    assert len(test) == 300 and not test & train
    a = [(it.prompt, it.demo) for it in take_items(task, "test", 30, seed=0)]
    assert a == [(it.prompt, it.demo) for it in take_items(TemporalTask(), "test", 30, seed=0)]
    assert a != [(it.prompt, it.demo) for it in take_items(task, "test", 30, seed=1)]


def test_verify_checks_the_answer_only():
    task = TemporalTask()
    assert task.verify("use d14 x=9\nA:4", "4", META) == 1.0  # leaky but right: still 1.0 here
    assert task.verify("use d8 x=4\nA:5", "4", META) == 0.0
    assert task.verify("use d8 x=4", "4", META) == 0.0
    assert task.extract_answer("use d8 x=4\nA:04") == "4"


@pytest.mark.parametrize(
    "options,needle",
    [
        ({"colour": 1}, "unknown option"),
        ({"post_frac": 1.0}, "all 6 facts"),
        ({"post_frac": 0.0}, "tempt_prob"),
        ({"n_entities": 1}, "n_entities=1"),
        ({"n_entities": 9}, "n_entities"),
        ({"max_day": 3}, "max_day"),
        ({"coincide_prob": 1.5}, "coincide_prob"),
        ({"test_data": "x.jsonl"}, "needs data"),
    ],
)
def test_task_option_validation(options, needle):
    with pytest.raises(ValueError, match=needle):
        TemporalTask(**options)


# ---------------------------------------------------------------- user data (JSONL)

ROWS = [
    {
        "question": "x",
        "cutoff": 10,
        "answer": 4,
        "target": "x",
        "facts": [
            {"date": 3, "key": "x", "value": 7},
            {"date": 8, "key": "x", "value": 4},
            {"date": 14, "key": "x", "value": 9},
        ],
    },
    {
        "question": "rate",
        "cutoff": "2020-03-01",
        "answer": "up",
        "demo": "use 2020-02-15 fed raised rates\nA:up",
        "facts": [{"date": "2020-02-15", "text": "fed raised rates"}, {"date": "2020-03-05", "text": "fed cut rates"}],
    },
    {"question": "y", "cutoff": 5, "answer": "2", "facts": [{"date": 1, "key": "y", "value": "2"}]},
]


def _write(tmp_path, rows, name="rows.jsonl"):
    path = tmp_path / name
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(path)


def test_jsonl_rows_become_items(tmp_path):
    task = TemporalTask(data=_write(tmp_path, ROWS), test_data=_write(tmp_path, ROWS[:1], "test.jsonl"))
    items = task.split_items("train")
    assert items[0].prompt == "x @d10\nd3 x=7\nd8 x=4\nd14 x=9\n"
    assert items[0].demo == "use d3 x=7\nuse d8 x=4\nA:4"  # made from the target's pre-cutoff facts
    assert items[1].prompt == "rate @2020-03-01\n2020-02-15 fed raised rates\n2020-03-05 fed cut rates\n"
    assert items[2].demo is None
    for it, n_claims in zip(items[:2], (2, 1)):
        assert task.verify(it.demo, it.answer, it.meta) == 1.0 and count_claims(it.demo, it.meta) == (0, n_claims)
    assert count_claims("use fed cut rates\nA:down", items[1].meta) == (1, 1)
    stream = task.iter_items("train", seed=0)
    assert sorted(next(stream).key for _ in range(3)) == sorted(it.key for it in items)  # one epoch = every row
    assert [it.key for it in take_items(task, "test", 1)] == [items[0].key]
    assert task.max_new_tokens >= max(len(it.demo) for it in items if it.demo)


@pytest.mark.parametrize(
    "bad,needle",
    [
        ({"question": "x", "cutoff": 10, "answer": 1}, r"missing field\(s\) \['facts'\]"),
        ({**ROWS[0], "when": 3}, r"unknown field\(s\) \['when'\]"),
        ({**ROWS[0], "cutoff": "10/03/2020"}, "'cutoff'"),
        ({**ROWS[0], "cutoff": "2020-03-01"}, "same kind"),
        ({**ROWS[0], "facts": [{"date": 3, "value": 1}]}, r"facts\[0\]"),
        ({**ROWS[0], "demo": "use d3 x=7\nA:7"}, "'demo'"),
        ({**ROWS[0], "target": "q"}, "no key/value fact with key 'q'"),
        ({**ROWS[0], "question": "two\nlines"}, "'question'"),
    ],
)
def test_malformed_row_error_names_file_and_row(tmp_path, bad, needle):
    path = _write(tmp_path, [ROWS[0], ROWS[2], bad])
    with pytest.raises(ValueError, match=needle) as err:
        TemporalTask(data=path)
    assert f"{path}: row 2" in str(err.value)


def test_bad_json_line_is_reported_with_file_and_line(tmp_path):
    path = _write(tmp_path, [ROWS[0], "{not json"])
    with pytest.raises(ValueError, match=re.escape(f"{path}:2")):
        TemporalTask(data=path)


def test_task_and_tempo_reward_together():
    # the task verifier as R_task; one item's demo and a leaky variant of it
    task = TemporalTask(leaky_demo_frac=0.0)
    it = next(i for i in take_items(task, "train", 200, seed=0) if i.meta["lure"] and i.meta["coincide"])
    target, cutoff, facts = _parse_prompt(it.prompt)
    late = [d for d, e, v in facts if e == target and d > cutoff][-1]
    leaky = it.demo.replace("\nA:", f"\nuse d{late} {target}={it.answer}\nA:")  # right answer, one leaked claim
    reward = TempoReward(task_score=task.verify)
    n = it.demo.count("use ") + 1
    assert reward([""] * 2, [it.demo, leaky], answer=[it.answer] * 2, meta=[it.meta] * 2) == pytest.approx(
        [1.0, -1 / n]
    )


def test_diagnostics_clean_pass_and_grounding_by_hand():
    # cutoff d10; facts d2 x=5 (known), d8 x=3 (known), d12 x=4 (post-cutoff); answer 3
    meta = {
        "cutoff": 10,
        "facts": [{"date": 2, "stmt": "x=5"}, {"date": 8, "stmt": "x=3"}, {"date": 12, "stmt": "x=4"}],
    }
    texts = [
        "use d2 x=5\nuse d8 x=3\nA:3",  # right, leak-free, grounded
        "use d8 x=3\nuse d12 x=4\nA:3",  # right but leaks 1 of 2: not clean, not grounded
        "use d4 x=3\nA:3",  # right, leak-free, misdated (x=3 is known only at d8): not grounded
        "use x=5\nA:5",  # wrong, undated known fact: grounded, not clean (wrong)
        "A:3",
    ]  # right, no claims: clean, but grounding needs at least one claim
    scores = [1.0, 1.0, 1.0, 0.0, 1.0]
    out = TemporalTask().diagnostics(texts, [meta] * 5, scores)
    assert out["leak_rate"] == pytest.approx(1 / 5)
    assert out["leak_frac"] == pytest.approx(0.5 / 5)
    assert out["clean_pass"] == pytest.approx(3 / 5)  # rows 0, 2, 4
    assert out["grounded_rate"] == pytest.approx(2 / 5)  # rows 0, 3
    assert out["claims_per_answer"] == pytest.approx((2 + 2 + 1 + 1 + 0) / 5)
