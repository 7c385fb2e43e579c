"""Drafts reaching training: DraftTask (data/draft_task.py), the Drafts part, the drafter, the config keys."""

import dataclasses
import json

import pytest

from helpers import batch_context
from reasonrl.config.train import TrainConfig, apply_overrides
from reasonrl.data.draft_task import DraftTask, draft_metrics, find_universe, problem_text
from reasonrl.data.drafter import DraftSample, draft_lines, drafter_summary, make_drafts, quasi_correct
from reasonrl.data.drafts import MODES, derangement, draft_prompt
from reasonrl.errors import UserError
from reasonrl.parts import Drafts
from reasonrl.parts.protocol import TaskSetup
from reasonrl.recipes import get_recipe
from reasonrl.tasks import Item, get_task, take_items
from reasonrl.config.validate import problems

from fakes import wrong_draft, write_drafts

TASK = get_task("arithmetic")
ITEMS = take_items(TASK, "train", 5, seed=0)  # 55+187, 53+601, 33+34, 37+800, 997+5


def first_epoch(task, n):
    stream = task.iter_items("train", 0)
    return [next(stream) for _ in range(n)]


def test_mismatched_wrong_train_items_carry_another_problems_wrong_draft(tmp_path):
    task = DraftTask(TASK, write_drafts(tmp_path / "d.jsonl"), "mismatched_wrong")
    perm = derangement(5, 0)  # [2, 0, 1, 4, 3]: problem 0 shows problem 2's draft, ...
    by_key = {it.key: it for it in first_epoch(task, 5)}
    assert sorted(by_key) == sorted(it.key for it in ITEMS)  # one epoch is the universe, once each
    for i, it in enumerate(ITEMS):
        got = by_key[it.key]
        src = ITEMS[perm[i]]
        # the verifier judged the unflagged drafts: the wrong one (tier 1) is chosen
        assert got.prompt == draft_prompt(problem_text(it), wrong_draft(src))
        assert got.meta["draft"] == {
            "mode": "mismatched_wrong",
            "source": src.key,
            "tier": 1,
            "correct": False,
            "answer": str(int(src.answer) + 1),
        }
        assert got.answer == it.answer and got.demo == it.demo  # the problem's own reference stays
    assert problem_text(ITEMS[0]) == "55+187=?"  # the prompt's trailing newline is not part of {problem}


def test_other_modes_and_the_na_test_items(tmp_path):
    path = write_drafts(tmp_path / "d.jsonl", flags=True)
    matched = {it.key: it for it in first_epoch(DraftTask(TASK, path, "matched_wrong"), 5)}
    assert all(matched[it.key].prompt == draft_prompt(problem_text(it), wrong_draft(it)) for it in ITEMS)
    right = {it.key: it for it in first_epoch(DraftTask(TASK, path, "mismatched_correct"), 5)}
    perm = derangement(5, 0)
    assert all(
        right[it.key].prompt == draft_prompt(problem_text(it), ITEMS[perm[i]].demo) for i, it in enumerate(ITEMS)
    )
    none = {it.key: it for it in first_epoch(DraftTask(TASK, path, "no_draft"), 5)}
    assert all(none[it.key].prompt == draft_prompt(problem_text(it), None) for it in ITEMS)
    test = next(DraftTask(TASK, path, "mismatched_wrong").iter_items("test", 0))
    plain = next(TASK.iter_items("test", 0))
    assert (
        test.key == plain.key
        and test.prompt
        == f"Problem: {plain.prompt.rstrip()}\n\nThinking: N/A\n\n"
        + draft_prompt("", None).split("Thinking: N/A\n\n", 1)[1]
    )


def test_no_file_no_draft_uses_the_tasks_stream_and_other_modes_need_a_file():
    task = DraftTask(TASK, None, "no_draft")
    got, plain = next(task.iter_items("train", 3)), next(TASK.iter_items("train", 3))
    assert got.key == plain.key and got.prompt == draft_prompt(plain.prompt.rstrip(), None)
    with pytest.raises(UserError, match="need a drafts file"):
        DraftTask(TASK, None, "mismatched_wrong")
    with pytest.raises(UserError, match="unknown draft mode"):
        DraftTask(TASK, None, "wrong")


def test_a_draft_for_an_unknown_problem_is_named(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text(
        json.dumps({"key": ITEMS[0].key, "draft": "x"}) + "\n" + json.dumps({"key": "1+1", "draft": "y"}) + "\n"
    )
    with pytest.raises(UserError, match=r"'1\+1'.*not among the first 5040 train problems"):
        DraftTask(TASK, path, "mismatched_wrong")  # limit 20 x 2 keys + 5000
    assert [it.key for it in find_universe(TASK, [ITEMS[3].key, ITEMS[1].prompt], "f")] == [ITEMS[3].key, ITEMS[1].key]


def test_warm_start_mix_spreads_problems_over_the_modes(tmp_path):
    items = take_items(TASK, "train", 40, seed=0)
    task = DraftTask(TASK, write_drafts(tmp_path / "d.jsonl", items), modes=MODES)
    modes = [it.meta["draft"]["mode"] for it in first_epoch(task, 40)]
    assert set(modes) == set(MODES)  # 40 problems hashed into 4 modes: every mode is met


def test_draft_metrics_hand_computed():
    def item(key, source, correct=None, answer=None):
        return Item(key, "p", "0", meta={"draft": {"source": source, "correct": correct, "answer": answer}})

    items = [item("a", "b", False, "5"), item("b", "c", False, "9"), item("c", "c", True, "7"), item("d", None)]
    answers = [["5", "3"], ["1", None], ["7", "7"], ["2", "2"]]
    m = draft_metrics(items, answers)
    # 3 of 4 prompts show a draft, 2 of them another problem's, 2 wrong ones; of the 6 completions under
    # a draft, 3 copy its answer ("5", "7", "7")
    assert m == {
        "drafts/with_draft_frac": 0.75,
        "drafts/mismatched_frac": 0.5,
        "drafts/wrong_draft_frac": 0.5,
        "drafts/copy_frac": 0.5,
    }


def test_drafts_part_wraps_with_a_tokenizer_cap_and_reports_the_batch_drafts(tmp_path):
    from reasonrl.models import build_char_tokenizer

    path = write_drafts(tmp_path / "d.jsonl", flags=True)
    tok = build_char_tokenizer()
    cap = len(draft_prompt("55+187=?", None)) + 5  # characters = tokens for the char tokenizer
    task, _ = Drafts(mode="matched_wrong", file=str(path), max_prompt_tokens=cap).wrap_task(TaskSetup(TASK, tok, 0))
    first = next(it for it in first_epoch(task, 5) if it.key == "55+187")
    # the draft "5+7+0=12,5+8+1=14,0+1+1=2\nA:243" is cut to 5 + 3 (the N/A's room) = 8 characters
    assert first.prompt == draft_prompt("55+187=?", "5+7+0=12")
    _, m = Drafts().score_batch(batch_context(items=[first], answers=[["242", "243"]]))
    assert m["drafts/with_draft_frac"] == 1.0 and m["drafts/mismatched_frac"] == 0.0
    assert get_recipe("dr_grpo").wrap_task(TASK) == (TASK, {})  # no part with wrap_task: the task itself


def test_config_keys_and_their_checks(tmp_path):
    recipe = get_recipe("drafts")
    assert recipe.drafts == Drafts() and recipe.advantage.estimator == "dr_grpo"
    assert problems(TrainConfig(), recipe) == []
    # without drafts.file the built-in drafter's drafts (made in memory): `reasonrl train --recipe drafts` runs alone
    first = next(recipe.wrap_task(TASK)[0].iter_items("train", 0))
    info = first.meta["draft"]
    assert info["mode"] == "mismatched_wrong" and info["source"] != first.key and info["correct"] is False
    bad = apply_overrides(recipe, {"drafts": {"file": "f.jsonl", "max_prompt_tokens": 0, "seed": -1}})
    found = problems(TrainConfig(), bad)
    assert any("'drafts.max_prompt_tokens' = 0" in p for p in found) and any("'drafts.seed' = -1" in p for p in found)
    found = problems(TrainConfig(), apply_overrides(recipe, {"drafts": {"mode": "nope", "template": "{problem}"}}))
    assert any("'drafts.mode' = 'nope'" in p for p in found)
    assert any(
        p.startswith("config key 'drafts.template' = '{problem}'") and "needs the field(s) ['draft']" in p
        for p in found
    )
    assert recipe.describe()["drafts"]["mode"] == "mismatched_wrong"


def test_quasi_correct_and_summary_hand_computed():
    assert quasi_correct("1+2+0=3\n3", "3") and quasi_correct("A:3", "3")
    assert not quasi_correct("1+2+0=3\nA:4", "3") and not quasi_correct("no number", "3")
    assert not quasi_correct("3", "x")  # a non-numeric answer is never quasi-correct by number
    drafts = [
        DraftSample("a", "", True, True),
        DraftSample("a", "", False, False),
        DraftSample("b", "", False, True),
        DraftSample("b", "", True, True),
    ]
    # 2 of 4 correct; 1 quasi only; problem a has a definitely wrong draft, b not; neither is all-correct
    assert drafter_summary(drafts) == {
        "problems": 2.0,
        "drafts": 4.0,
        "draft_accuracy": 0.5,
        "quasi_only_frac": 0.25,
        "problems_with_wrong_draft": 0.5,
        "problems_all_correct": 0.0,
    }


def test_make_drafts_with_a_tiny_drafter_round_trips_through_the_loader(sharp_tiny, tmp_path):
    model, tok = sharp_tiny
    drafts = make_drafts(model, tok, TASK, 3, 2, seed=0)
    assert [d.key for d in drafts] == [ITEMS[0].key] * 2 + [ITEMS[1].key] * 2 + [ITEMS[2].key] * 2
    for d, it in zip(drafts, [ITEMS[i // 2] for i in range(6)]):
        assert d.correct == (TASK.verify(d.text, it.answer, it.meta) == 1.0) and (d.quasi or not d.correct)
    path = tmp_path / "d.jsonl"
    path.write_text(draft_lines(drafts))
    task = DraftTask(TASK, path, "mismatched_wrong")
    assert sorted(it.key for it in first_epoch(task, 3)) == sorted(it.key for it in ITEMS[:3])
    assert drafts == make_drafts(model, tok, TASK, 3, 2, seed=0)  # seeded per problem: reproducible


def _metrics(run):
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def fresh_tiny_dir(tmp_path_factory):
    """A freshly initialised tiny model (seconds to build): the wiring, not the learning, is under test."""
    from reasonrl.models import build_tiny, save_model

    model, tok = build_tiny("tiny", seed=0)
    return save_model(model, tok, tmp_path_factory.mktemp("fresh_tiny"))


@pytest.mark.slow
def test_drafts_recipe_trains_end_to_end(fresh_tiny_dir, tmp_path):
    import yaml

    from reasonrl.loop.run import train_run

    tiny_dir = fresh_tiny_dir

    path = write_drafts(tmp_path / "d.jsonl", take_items(TASK, "train", 8, seed=0), flags=True)
    recipe = apply_overrides(get_recipe("drafts"), {"group_size": 4, "drafts": {"file": str(path)}})
    cfg = TrainConfig(
        model=str(tiny_dir),
        out=str(tmp_path / "run"),
        recipe="drafts",
        steps=3,
        prompts_per_step=2,
        eval_every=0,
        final_eval_problems=2,
        final_eval_k=0,
        save_every=0,
    )
    summary = train_run(cfg, recipe)
    rows = _metrics(tmp_path / "run")
    assert [r["step"] for r in rows] == [1, 2, 3]
    for r in rows:  # every train prompt shows another problem's draft, and each problem has a wrong one (tier 1)
        assert r["drafts/with_draft_frac"] == 1.0 and r["drafts/mismatched_frac"] == 1.0
        assert r["drafts/wrong_draft_frac"] == 1.0 and 0.0 <= r["drafts/copy_frac"] <= 1.0
    assert yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["drafts"]["mode"] == "mismatched_wrong"
    samples = [json.loads(line) for line in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    assert samples and all("\n\nThinking: N/A\n\n" in s["prompt"] for s in samples)  # evaluation: the N/A template
    assert summary["recipe"] == "drafts" and 0.0 <= summary["after"]["pass@1"] <= 1.0
    # the no-draft ablation on the same file: the same problems, no draft shown
    none = dataclasses.replace(recipe, drafts=dataclasses.replace(recipe.drafts, mode="no_draft"))
    train_run(dataclasses.replace(cfg, out=str(tmp_path / "none"), steps=1, final_eval_problems=0), none)
    row = _metrics(tmp_path / "none")[0]
    assert row["drafts/with_draft_frac"] == 0.0 and row["drafts/mismatched_frac"] == 0.0


def test_builtin_drafter_by_hand():
    # the first train problem of the universe stream is 55+187 (demo "5+7+0=12,5+8+1=14,0+1+1=2\nA:242");
    # each draft changes digits of its steps one at a time until the verifier rejects it, so every
    # draft differs from the demo, keeps its format (the step shapes and an "A:" line) and is wrong
    # unless 8 changes all left the answer right
    from reasonrl.data.drafter import MAX_EDITS, builtin_drafts, draft_table

    drafts = builtin_drafts(TASK, n_problems=3, samples=2, seed=0)
    assert [d.key for d in drafts][:2] == ["55+187", "55+187"] and len(drafts) == 6
    demo = next(TASK.iter_items("train", 0)).demo
    for d in drafts[:2]:
        assert d.text != demo and len(d.text) == len(demo) and d.text.count(",") == 2 and "\nA:" in d.text
        changed = sum(a != b for a, b in zip(d.text, demo))
        assert 1 <= changed <= MAX_EDITS
        assert d.correct is (d.text.split("A:")[1] == "242") and d.correct is False
    assert builtin_drafts(TASK, n_problems=3, samples=2, seed=0) == drafts  # the same on every call
    assert builtin_drafts(TASK, n_problems=3, samples=2, seed=1) != drafts
    table = draft_table(drafts)
    assert list(table) == [d.key for d in drafts][::2] and [e.row for e in table["55+187"]] == [1, 2]


def test_plain_share_mixes_plain_train_draws_and_keeps_na_test_items(tmp_path):
    """drafts warmstart --plain-rate: a share of train draws are the plain task's own items."""
    from reasonrl.data.draft_task import PlainShare

    drafts = DraftTask(TASK, write_drafts(tmp_path / "d.jsonl"), modes=MODES)
    mixed = PlainShare(drafts, 0.5, seed=0)
    stream = mixed.iter_items("train", 0)
    draws = [next(stream) for _ in range(400)]
    plain = [it for it in draws if "Thinking:" not in it.prompt]
    # every plain draw is exactly the task's prompt "a+b=?\n" and its demonstration targets it
    assert all(it.prompt.endswith("=?\n") and it.prompt.count("\n") == 1 for it in plain)
    # a fair coin per draw: 400 draws give 200 +- 10 (one std); 150..250 is 5 std
    assert 150 <= len(plain) <= 250
    # templated draws come only from the drafts universe (5 problems); plain ones from the open stream
    assert {it.key for it in draws if it not in plain} <= {it.key for it in ITEMS}
    assert len({it.key for it in plain}) > 100
    # held-out items stay in the N/A template, and rate 0 is the template alone
    test_item = next(mixed.iter_items("test", 0))
    assert "Thinking: N/A" in test_item.prompt
    zero = PlainShare(drafts, 0.0).iter_items("train", 0)
    assert all("Thinking:" in next(zero).prompt for _ in range(20))
    # the same seed draws the same mix (the warm start is reproducible)
    again = PlainShare(drafts, 0.5, seed=0).iter_items("train", 0)
    assert [next(again).prompt for _ in range(400)] == [it.prompt for it in draws]
    with pytest.raises(UserError, match="plain-rate 1.0"):
        PlainShare(drafts, 1.0)
