"""SSPO (CardioThink, arXiv 2605.17308): the set reward, its parsers, and the ``diagnosis`` task."""

import json

import pytest

from reasonrl.rewards.base import score_rewards
from reasonrl.rewards.sets import SetReward, answer_block, canonical_set, parse_label_set, set_score, structure_ok
from reasonrl.tasks.base import take_items
from reasonrl.tasks.diagnosis import DiagnosisTask, stage_sizes


def completion(answer, order=("R:", "C:", "M:", "I:")):
    body = {"R:": "sinus", "C:": "slow", "M:": "wide", "I:": "collected"}
    return "\n".join(m + body[m] for m in order) + f"\nD:{answer}"


# ----- pure functions ------------------------------------------------------------------------


def test_spec_example_set_scores():
    # spec 10(d): Gt={AF,LBBB}, P={AF,RBBB,LVH}: |P n G| = 1, |P u G| = 4 -> Jaccard 1/4;
    # F1 = 2*1 / (3 + 2) = 0.4; exact 0
    gold, pred = frozenset({"AF", "LBBB"}), frozenset({"AF", "RBBB", "LVH"})
    assert set_score(pred, gold) == pytest.approx(0.25)
    assert set_score(pred, gold, "f1") == pytest.approx(0.4)
    assert set_score(pred, gold, "exact") == 0.0
    assert set_score(gold, gold, "jaccard") == set_score(gold, gold, "f1") == set_score(gold, gold, "exact") == 1.0


def test_own_set_scores_and_edge_cases():
    # Gt={AH,CL,DH}, P={AH,DH,EL,FH}: n = {AH,DH} (2), u = 5 labels -> Jaccard 2/5 = 0.4;
    # F1 = 2*2 / (4 + 3) = 4/7
    gold, pred = {"AH", "CL", "DH"}, {"AH", "DH", "EL", "FH"}
    assert set_score(pred, gold) == pytest.approx(0.4)
    assert set_score(pred, gold, "f1") == pytest.approx(4 / 7)
    for metric in ("jaccard", "f1", "exact"):
        assert set_score(frozenset(), frozenset(), metric) == 1.0  # both empty
        assert set_score(None, frozenset(), metric) == 0.0  # unparsable
        assert set_score(frozenset(), {"AH"}, metric) == 0.0
    with pytest.raises(ValueError, match="valid: \\['jaccard', 'f1', 'exact'\\]"):
        set_score(set(), set(), "dice")


def test_parse_label_set_normaliser_synonyms_vocab():
    vocab, syn = ["AF", "LBBB", "Sinus"], {"atrial fibrillation": "AF", "left bundle branch block": "LBBB"}
    assert parse_label_set(" af , lbbb ") == {"AF", "LBBB"}
    assert parse_label_set("Atrial  Fibrillation,LBBB,AF", vocab, syn) == {"AF", "LBBB"}
    assert parse_label_set("sinus", vocab) == {"Sinus"}  # the vocabulary's own spelling
    assert parse_label_set("None") == frozenset()
    assert parse_label_set("AF,RBBB", vocab) is None  # out of vocabulary: strict by default
    assert parse_label_set("AF,RBBB", vocab, strict=False) == {"AF", "RBBB"}
    for bad in ("", "  ", None, "AF,,LBBB", "AF,none", "AF,"):
        assert parse_label_set(bad) is None, bad
    assert canonical_set({"LBBB", "AF"}) == "AF,LBBB" and canonical_set([]) == "none"
    assert answer_block("I:x\nD:AF\nD: lbbb \nmore") == " lbbb "
    assert answer_block("no tag") is None


def test_structure_ok():
    assert structure_ok(completion("AF,LBBB"))
    assert structure_ok(completion("none") + "\n\n")  # trailing blank lines are fine
    assert not structure_ok(completion("AF", order=("C:", "R:", "M:", "I:")))  # out of order
    assert not structure_ok(completion("AF", order=("R:", "C:", "I:")))  # a section is missing
    assert not structure_ok("R:a\nC:\nM:c\nI:d\nD:AF")  # empty section
    assert not structure_ok("R:a\nC:b\nM:c\nI:d\nD:AF\nextra")  # answer line is not the last
    assert not structure_ok("R:a\nC:b\nR:x\nM:c\nI:d\nD:AF")  # a section twice
    assert not structure_ok("R:a\nC:b\nM:c\nI:d\nD:AF,,X")  # answer does not parse
    assert not structure_ok(completion("RBBB"), vocab=["AF", "LBBB"])
    tags = ("<rhythm>", "<conduction>", "<morphology>", "<impression>")
    assert structure_ok(
        "<rhythm>sr<conduction>ok<morphology>lvh<impression>LVH\n<answer>LVH", sections=tags, answer_tag="<answer>"
    )


# ----- the SSPO reward -----------------------------------------------------------------------


def test_sspo_spec_example():
    r = SetReward()
    # well formatted, Jaccard 0.25 -> R = 1*1 + 1*0.25 = 1.25; with F1: 1 + 0.4 = 1.4
    assert r([""], [completion("AF,RBBB,LVH")], answer=["AF,LBBB"]) == [pytest.approx(1.25)]
    assert SetReward(metric="f1")([""], [completion("AF,RBBB,LVH")], answer=["AF,LBBB"]) == [pytest.approx(1.4)]
    # P = Gt -> R_set = 1 (R = 2); sections out of order -> R_fmt = 0; gated -> R = 0
    assert r([""], [completion("LBBB,AF")], answer=["AF,LBBB"]) == [2.0]
    swapped = completion("AF,LBBB", order=("R:", "M:", "C:", "I:"))
    assert r([""], [swapped], answer=["AF,LBBB"]) == [1.0]
    assert SetReward(gate=True)([""], [swapped], answer=["AF,LBBB"]) == [0.0]


def test_sspo_own_example_weights_and_metrics():
    # Gt={AH,CL,DH}; w_fmt=0.5, w_set=2, Jaccard:
    #  row 0: P={AH,DH,EL,FH}, formatted: 0.5*1 + 2*0.4 = 1.3
    #  row 1: P=Gt but no I: section:     0.5*0 + 2*1.0 = 2.0 (not gated)
    #  row 2: no answer tag (unparsed):   0.5*0 + 2*0   = 0.0
    #  row 3: "none" against Gt={} well formatted: 0.5*1 + 2*1 = 2.5
    r = SetReward(w_fmt=0.5, w_set=2.0)
    texts = [completion("AH,DH,EL,FH"), "R:a\nC:b\nM:c\nD:AH,CL,DH", "R:a\nC:b\nM:c\nI:d", completion("none")]
    res = score_rewards(r, [""] * 4, texts, {"answer": ["AH,CL,DH"] * 3 + ["none"], "meta": [{}] * 4})
    assert res.values == [pytest.approx(1.3), 2.0, 0.0, 2.5]
    m = res.metrics
    assert m["reward/sspo/format_rate"] == pytest.approx(2 / 4)  # rows 0 and 3
    assert m["reward/sspo/set_score"] == pytest.approx((0.4 + 1 + 0 + 1) / 4)
    assert m["reward/sspo/exact_rate"] == pytest.approx(2 / 4)  # rows 1 and 3
    assert m["reward/sspo/unparsed_frac"] == pytest.approx(1 / 4)


def test_sspo_label_space_from_meta_and_bad_gold():
    space = {"vocab": ["AH", "CL"], "synonyms": {"A+": "AH"}}
    r = SetReward()
    # "a+" -> AH via the row's synonyms: exact -> 1 + 1 = 2; "XX" is out of vocabulary -> unparsable -> 0
    assert r(
        ["", ""], [completion("a+"), completion("AH,XX")], answer=["AH"] * 2, meta=[{"label_space": space}] * 2
    ) == [2.0, 0.0]
    with pytest.raises(ValueError, match="row 1: gold answer 'QQ'"):
        r(["", ""], [completion("AH")] * 2, answer=["AH", "QQ"], meta=[{"label_space": space}] * 2)
    with pytest.raises(ValueError, match="unknown metric 'dice'"):
        SetReward(metric="dice")
    with pytest.raises(ValueError, match="answer_tag"):
        SetReward(answer_tag="R:")


# ----- the diagnosis task --------------------------------------------------------------------


def test_demo_by_hand_with_combos():
    task = DiagnosisTask(aspects=6, combos=2)
    task.rules = [(30, 60)] * 6  # every reading: < 30 low, >= 60 high
    # a72 high, b40 ok | c15 low, d88 high | e33 ok, f50 ok -> findings in R and C only:
    # Z1 (R and C) yes, Z2 (C and M) no
    demo, labels = task.solve([72, 40, 15, 88, 33, 50])
    assert demo == "R:a72=AH b40=ok\nC:c15=CL d88=DH\nM:e33=ok f50=ok\nI:AH,CL,DH,Z1\nD:AH,CL,DH,Z1"
    assert labels == ["AH", "CL", "DH", "Z1"]
    assert task.solve([30, 59, 45, 50, 33, 50]) == (
        "R:a30=ok b59=ok\nC:c45=ok d50=ok\nM:e33=ok f50=ok\nI:none\nD:none",
        [],
    )
    assert [task.finding(0, v) for v in (29, 30, 59, 60)] == ["AL", None, None, "AH"]
    assert DiagnosisTask(labels_per_aspect=1).finding(0, 10) is None
    assert DiagnosisTask().vocab[:3] == ("AH", "AL", "BH") and len(DiagnosisTask().vocab) == 9 * 2
    assert stage_sizes(7) == [3, 2, 2]


@pytest.mark.parametrize("options", [{}, {"aspects": 9, "combos": 3, "max_labels": 6}, {"labels_per_aspect": 1}])
def test_demos_verify_and_are_well_formed(options):
    task = DiagnosisTask(**options)
    sizes = set()
    for it in take_items(task, "train", 300, seed=1):
        assert task.verify(it.demo, it.answer, it.meta) == 1.0
        assert structure_ok(it.demo, vocab=task.vocab, synonyms=task.synonyms)
        assert SetReward()([it.prompt], [it.demo], answer=[it.answer], meta=[it.meta]) == [2.0]
        assert len(it.demo) + 1 <= task.max_new_tokens and it.prompt.isascii()
        assert it.meta["n_labels"] <= task.config.max_labels
        sizes.add(it.meta["n_labels"])
    assert 0 in sizes and max(sizes) >= 3  # variable size, empty included


def test_near_readings_sit_next_to_a_threshold():
    # near=1: every reading is within 5 of the threshold on its side, i.e. in lo-5..lo+4 or hi-5..hi+4
    task = DiagnosisTask(near=1.0)
    for it in take_items(task, "train", 100, seed=0):
        for (lo, hi), reading in zip(task.rules, it.key.split()):
            v = int(reading[1:])
            assert lo - 5 <= v <= lo + 4 or hi - 5 <= v <= hi + 4, (lo, hi, v)
    plain = [int(r[1:]) for it in take_items(DiagnosisTask(near=0.0), "train", 100, seed=0) for r in it.key.split()]
    assert min(plain) < 20 and max(plain) > 90  # without `near` readings span the whole range


def test_extract_answer_and_verify():
    task = DiagnosisTask()
    assert task.extract_answer("I:x\nD: dh , a+ ,low c") == "AH,CL,DH"
    assert task.extract_answer("D:NONE") == "none"
    for bad in ("D:", "D:QQ", "D:AH,none", "no tag", "D:AH,,CL"):
        assert task.extract_answer(bad) is None, bad
    assert task.verify("D:AH,CL", "AH,CL", {}) == 1.0
    assert task.verify("D:AH", "AH,CL", {}) == 0.0  # a subset is not exact
    assert task.verify("D:AH,CL\nD:AH", "AH,CL", {}) == 0.0  # the last answer line counts


def test_diagnostics_format_rate_and_jaccard():
    task = DiagnosisTask()
    metas = [{"labels": ["AH", "CL"]}, {"labels": []}, {"labels": ["BH"]}]
    texts = [
        "R:a\nC:b\nM:c\nI:d\nD:AH,DL",  # well formed; Jaccard |{AH}| / |{AH,CL,DL}| = 1/3
        "R:a\nC:b\nM:c\nI:none\nD:none",  # well formed; both empty -> 1
        "D:BH",
    ]  # no sections (format 0), but the set is right -> 1
    out = task.diagnostics(texts, metas, [0.0, 1.0, 1.0])
    assert out["format_rate"] == pytest.approx(2 / 3)
    assert out["set_jaccard"] == pytest.approx((1 / 3 + 1 + 1) / 3)


def test_splits_disjoint_and_deterministic():
    task = DiagnosisTask()
    test = {it.key for it in take_items(task, "test", 300, seed=0)}
    train = {it.key for s in (0, 1) for it in take_items(task, "train", 2000, seed=s, unique=False)}
    assert len(test) == 300 and not test & train
    first = [it.key for it in take_items(task, "train", 20, seed=5)]
    assert first == [it.key for it in take_items(DiagnosisTask(), "train", 20, seed=5)]
    assert first != [it.key for it in take_items(task, "train", 20, seed=6)]
    assert DiagnosisTask(rule_seed=1).rules != task.rules


def test_options_are_validated():
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['labels'\].*valid: \[.*'aspects'"):
        DiagnosisTask(labels=3)
    for bad in (
        {"aspects": 2},
        {"labels_per_aspect": 3},
        {"combos": 4},
        {"max_labels": 10},
        {"near": 1.5},
        {"test_data": "x.jsonl"},
        {"test_fraction": 0.0},
    ):
        with pytest.raises(ValueError, match=next(iter(bad))):
            DiagnosisTask(**bad)
    with pytest.raises(ValueError, match="split"):
        next(DiagnosisTask().iter_items("dev", 0))


def write(path, rows):
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return str(path)


def test_user_data_rows(tmp_path):
    demo = "R:hr 150 fast=AF\nC:qrs wide=LBBB\nM:ok\nI:AF,LBBB\nD:lbbb, af"
    train = write(
        tmp_path / "train.jsonl",
        [
            {"case": "hr150 qrs130", "labels": ["AF", "lbbb"], "demo": demo},
            {"case": "hr70 qrs90", "labels": []},
            {"case": "hr80 qrs140", "labels": ["RBBB"]},
        ],
    )
    test = write(tmp_path / "test.jsonl", [{"case": "hr40 qrs90", "labels": ["brady"]}])
    task = DiagnosisTask(data=train, test_data=test, synonyms={"afib": "AF"})
    assert task.vocab == ("AF", "BRADY", "LBBB", "RBBB")  # union of train and test labels
    items = take_items(task, "train", 3, seed=0)
    assert sorted(it.answer for it in items) == ["AF,LBBB", "RBBB", "none"]
    assert {it.prompt for it in items} == {"hr150 qrs130\n", "hr70 qrs90\n", "hr80 qrs140\n"}
    assert take_items(task, "test", 1)[0].answer == "BRADY"
    assert task.extract_answer("D:afib,rbbb") == "AF,RBBB" and task.extract_answer("D:LVH") is None
    assert task.max_new_tokens == int(1.5 * len(demo)) + 8
    # no demos: longest of prompt + 2 * answer + 16 = "hr150 qrs130\n" (13) + 2 * "AF,LBBB" (7) + 16 = 43
    assert (
        DiagnosisTask(
            data=write(
                tmp_path / "nodemo.jsonl",
                [{"case": "hr150 qrs130", "labels": ["AF", "LBBB"]}, {"case": "x", "labels": []}],
            )
        ).max_new_tokens
        == 72
    )
    epoch = [it.key for it in take_items(task, "train", 6, seed=2, unique=False)]
    assert sorted(epoch[:3]) == sorted(epoch[3:])  # each epoch visits every row once


@pytest.mark.parametrize(
    "row,message",
    [
        ({"case": "x", "labels": "AF"}, "row 1: field 'labels' must be a list"),
        ({"case": "", "labels": []}, "row 1: field 'case' must be a non-empty string"),
        ({"case": "x", "labels": ["AF", "none"]}, "row 1: field 'labels' has an empty or 'none' label"),
        ({"case": "x", "labels": [], "extra": 1}, r"row 1: unknown field\(s\) \['extra'\]"),
        ({"case": "x", "labels": ["A,F"]}, "row 1: field 'labels' must be a list of strings without commas"),
        ({"case": "x", "labels": ["AF"], "demo": "R:a\nD:LBBB"}, "row 1: field 'demo' is not sections R: C: M: I:"),
        ({"case": "x", "labels": ["AF"], "demo": "R:a\nC:b\nM:c\nI:d\nD:LBBB"}, "row 1: field 'demo' answers 'LBBB'"),
    ],
)
def test_user_data_malformed_row_names_file_and_row(tmp_path, row, message):
    path = write(tmp_path / "bad.jsonl", [{"case": "ok", "labels": ["LBBB"]}, row])
    with pytest.raises(ValueError, match=message) as err:
        DiagnosisTask(data=path)
    assert str(err.value).startswith(path)


def test_user_data_bad_json_names_line(tmp_path):
    path = write(tmp_path / "bad.jsonl", [{"case": "ok", "labels": []}, "{not json"])
    with pytest.raises(ValueError, match=r"bad.jsonl:2: not valid JSON"):
        DiagnosisTask(data=path)
