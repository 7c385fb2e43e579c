"""The contamination audit (spec envs-selfplay-eval.md section 7): similarity maths, loaders, the
auditor's outputs, the judge parser and the command."""

import json
import math
import random

import numpy as np
import pytest
from typer.testing import CliRunner

from reasonrl.cli import app
from reasonrl.errors import UserError
from reasonrl.eval.audit import ContaminationAuditor, EmbeddingStage, JaccardStage, JudgeStage
from reasonrl.eval.audit_io import load_items
from reasonrl.eval.audit_models import LABELS, parse_verdict
from reasonrl.eval.audit_sim import cosine_pairs, jaccard, jaccard_pairs, minhash_pairs, normalize_text, shingles

SCHEMA_KEYS = {"train", "eval", "stages", "thresholds", "counts", "seconds", "pairs_file", "cleaned_file"}


def test_normalize_keeps_operators_and_drops_other_punctuation():
    assert normalize_text("9-34=?") == "9-34="
    assert normalize_text("9-34") != normalize_text("9+34")  # operators kept: different problems
    assert normalize_text("  Hello,\tWORLD!! (x^2 * y / z) ") == "hello world x^2 * y / z"
    assert normalize_text("ＦＵＬＬ ﬁne") == "full fine"  # NFKC: full-width letters and the fi ligature
    assert normalize_text(r"Find $\frac{1}{2}$ of \textbf{ten}") == "find 1 2 of ten"  # LaTeX commands out


def test_shingles_are_word_5grams_and_short_texts_one_shingle():
    assert shingles("a b c d e f g") == {"a b c d e", "b c d e f", "c d e f g"}  # 7 words -> 3 grams
    assert shingles("a b c d e") == {"a b c d e"}  # exactly 5 words -> one 5-gram
    assert shingles("The cat, sat.") == {"the cat sat"}  # 3 < 5 words: the whole tuple is one shingle
    assert shingles(" ?! ") == frozenset()
    with pytest.raises(UserError, match="k must be"):
        shingles("a", k=0)


def test_jaccard_by_hand():
    a, b, c = "a b c d e f", "a b c d e g", "a b c d e f g"
    # A = {abcde, bcdef}, B = {abcde, bcdeg}: |A&B| = 1, |A|B| = 3 -> 1/3 (< 0.4: not flagged)
    assert jaccard(shingles(a), shingles(b)) == pytest.approx(1 / 3)
    # A vs C = {abcde, bcdef, cdefg}: |A&C| = 2, |A|C| = 3 -> 2/3;  B vs C: 1 / 4 = 0.25
    assert jaccard(shingles(a), shingles(c)) == pytest.approx(2 / 3)
    assert jaccard(shingles(b), shingles(c)) == pytest.approx(0.25)
    assert jaccard(set(), set()) == 0.0
    assert jaccard_pairs([a, b], [c], threshold=0.4) == [(0, 0, pytest.approx(2 / 3))]
    # two short texts: one shingle each -> 1 when equal after normalisation, else 0
    assert jaccard_pairs(["What is 9+34?", "9-34"], ["what is 9+34"], threshold=0.4) == [(0, 0, 1.0)]


def _random_texts(rng, n, vocab, lo=3, hi=14):
    return [" ".join(rng.choice(vocab) for _ in range(rng.randint(lo, hi))) for _ in range(n)]


def _brute(train, evals, t):
    out = []
    for i, x in enumerate(train):
        for j, y in enumerate(evals):
            s = jaccard(shingles(x), shingles(y))
            if s >= t:
                out.append((i, j, s))
    return out


def same_pairs(got, want) -> bool:
    """(train index, eval index, score) triples: the same pairs in the same order, scores within 1e-6
    (pytest.approx compares flat sequences only, from pytest 9 on)."""
    return [(i, j) for i, j, _ in got] == [(i, j) for i, j, _ in want] and [s for *_, s in got] == pytest.approx(
        [s for *_, s in want]
    )


def test_inverted_index_equals_brute_force_across_blocks():
    rng = random.Random(3)
    vocab = ["x", "y"]  # 2^5 = 32 possible 5-grams: many shared shingles, many partial overlaps
    evals = _random_texts(rng, 40, vocab)  # 3 to 14 words: short texts (one shingle) among them
    train = _random_texts(rng, 150, vocab)
    brute = sorted(_brute(train, evals, 0.2))
    assert len(brute) > 50 and len({round(s, 3) for _, _, s in brute}) > 5  # many pairs, many distinct J
    for block, max_hits in ((1, 10**9), (7, 10**9), (512, 5)):  # tiny hit budget: a block per item
        got = sorted(jaccard_pairs(train, evals, 0.2, block=block, max_hits=max_hits))
        assert same_pairs(got, brute)


def test_minhash_finds_planted_pairs_and_no_false_positive():
    pytest.importorskip("datasketch")
    rng = random.Random(5)
    vocab = [f"w{i}" for i in range(3000)]
    evals = _random_texts(rng, 200, vocab, 25, 35)
    train = _random_texts(rng, 400, vocab, 25, 35)
    planted = {}
    for j in range(0, 200, 10):  # 20 near-duplicates: one word replaced
        words = evals[j].split()
        words[len(words) // 2] = "edited"
        planted[len(train)] = j
        train.append(" ".join(words))
    exact = {(i, j): s for i, j, s in jaccard_pairs(train, evals, 0.4)}
    approx = {(i, j): s for i, j, s in minhash_pairs(train, evals, 0.4)}
    assert set(planted.items()) <= set(exact)  # one edit in ~30 words leaves J >= 0.6
    recall = len(set(planted.items()) & set(approx)) / len(planted)
    assert recall == 1.0
    assert set(approx) <= set(exact)  # re-scored exactly: an LSH false positive cannot survive
    assert all(approx[p] == pytest.approx(exact[p]) for p in approx)


def test_cosine_pairs_by_hand_in_blocks():
    train = np.array([[1.0, 0.0], [1.0, 1.0]])
    evals = np.array([[2.0, 0.0], [0.0, 3.0]])
    # cos: (0,0) = 1, (0,1) = 0, (1,0) = (1,1) = 1/sqrt(2) = 0.7071
    got = cosine_pairs(train, evals, 0.7, block=1)
    assert same_pairs(sorted(got), [(0, 0, 1.0), (1, 0, 1 / math.sqrt(2)), (1, 1, 1 / math.sqrt(2))])
    assert cosine_pairs(train, evals, 0.8) == [(0, 0, pytest.approx(1.0))]
    assert same_pairs(
        sorted(cosine_pairs(train, evals, 0.7, exclude={(0, 0)})), [(1, 0, 1 / math.sqrt(2)), (1, 1, 1 / math.sqrt(2))]
    )
    with pytest.raises(UserError, match="train embedding of item 1"):
        cosine_pairs(np.array([[1.0, 0.0], [0.0, 0.0]]), evals, 0.5)


def test_parse_verdict_accepts_only_the_three_labels():
    assert parse_verdict(" Paraphrase.\n", "pair x") == "paraphrase"
    assert parse_verdict('"near-duplicate"', "pair x") == "near-duplicate"
    assert parse_verdict("same-topic-only", "pair x") == "same-topic-only"
    for bad in ("maybe", "paraphrase, or near-duplicate", "", "near duplicate", None):
        with pytest.raises(UserError, match="pair x"):
            parse_verdict(bad, "pair x")


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


TRAIN = [
    {"id": "t0", "prompt": "A train travels 60 km in 1.5 hours. What is its average speed?", "answer": "40"},
    {"id": "t1", "prompt": "Compute the derivative of x^3 + 2x with respect to x.", "answer": "3x^2+2"},
    {"id": "t2", "prompt": "A train travels 60 km in 1.5 hours. What is its mean speed?", "answer": "40"},
    {"id": "t3", "prompt": "Name the capital of France.", "answer": "Paris"},
    {"id": "t4", "prompt": "How fast on average is a train covering 60 km within 90 minutes?", "answer": "40"},
]
EVAL = [
    {"id": "e0", "prompt": "A train travels 60 km in 1.5 hours. What is its average speed?"},
    {"id": "e1", "prompt": "What is the integral of 2x from 0 to 1?"},
]


def _fake_embed(texts):
    # bag of two hand-picked words: "train" and "integral"; anything else only a small constant
    return np.array([[("train" in t) * 1.0, ("integral" in t) * 1.0, 0.1] for t in texts])


def test_auditor_links_and_cleans_exactly_the_linked_ids_jsonl(tmp_path):
    _write_jsonl(tmp_path / "train.jsonl", TRAIN)
    _write_jsonl(tmp_path / "eval.jsonl", EVAL)
    verdicts = {"t0": "near-duplicate", "t2": "near-duplicate", "t4": "same-topic-only"}
    judge = lambda tr, ev: verdicts[next(r["id"] for r in TRAIN if r["prompt"] == tr)]  # noqa: E731
    aud = ContaminationAuditor([JaccardStage(0.4), EmbeddingStage(_fake_embed, 0.85), JudgeStage(judge)])
    res = aud.audit(str(tmp_path / "train.jsonl"), str(tmp_path / "eval.jsonl"), tmp_path / "out")
    # jaccard: t0 == e0 (J = 1); t2 differs from e0 in one word: J = 8/12 (test_t2_jaccard_value_by_hand)
    by_stage = {(p["stage"], p["train_id"], p["eval_id"]) for p in res.pairs}
    assert ("jaccard", "t0", "e0") in by_stage and ("jaccard", "t2", "e0") in by_stage
    # embed: t4 and e0 both embed to [1, 0, 0.1] (cos = 1); t1, t3 are [0, 0, 0.1]: cos with e0 or e1 =
    # 0.01 / (0.1 * sqrt(1.01)) = 0.0995; t0/t2 x e0 are excluded (stage 1 flagged them)
    assert {(s, t) for s, t, e in by_stage if s == "embed"} == {("embed", "t4")}
    assert res.linked_train == {"t0", "t2"}  # the judge cleared t4 (same topic only)
    kept = [json.loads(line)["id"] for line in (tmp_path / "out" / "train_clean.jsonl").read_text().splitlines()]
    assert kept == ["t1", "t3", "t4"]  # exactly the unlinked ids, in input order
    lines = (tmp_path / "train.jsonl").read_text().splitlines()
    assert (tmp_path / "out" / "train_clean.jsonl").read_text().splitlines() == [lines[1], lines[3], lines[4]]
    summary = json.loads((tmp_path / "out" / "audit.json").read_text())
    assert set(summary) == SCHEMA_KEYS and summary["stages"] == ["jaccard", "embed", "judge"]
    assert summary["counts"] == {"jaccard": 2, "embed": 1, "judge": 2, "linked_train": 2, "kept_train": 3}
    assert summary["thresholds"] == {"jaccard": 0.4, "embed": 0.85}
    assert set(summary["seconds"]) == {"jaccard", "embed", "judge", "total"}
    assert summary["train"] == {"source": str(tmp_path / "train.jsonl"), "n": 5}
    pairs = [json.loads(line) for line in (tmp_path / "out" / summary["pairs_file"]).read_text().splitlines()]
    assert {p["train_id"]: p["label"] for p in pairs} == verdicts


def test_t2_jaccard_value_by_hand():
    # e0 has 14 words -> 10 five-grams; t2 swaps word 13 ("average" -> "mean"): the grams covering word 13
    # are grams 9 and 10 (of words 9-13 and 10-14), so 8 shared, union 8 + 2 + 2 = 12 -> J = 2/3
    assert jaccard(shingles(TRAIN[2]["prompt"]), shingles(EVAL[0]["prompt"])) == pytest.approx(8 / 12)


def test_cleaned_parquet_keeps_schema_and_order(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(TRAIN), tmp_path / "train.parquet")
    _write_jsonl(tmp_path / "eval.jsonl", EVAL)
    aud = ContaminationAuditor(["jaccard"])
    res = aud.audit(str(tmp_path / "train.parquet"), str(tmp_path / "eval.jsonl"), tmp_path / "o")
    assert res.linked_train == {"t0", "t2"}
    table = pq.read_table(tmp_path / "o" / "train_clean.parquet")
    assert table.schema == pq.read_table(tmp_path / "train.parquet").schema
    assert table.column("id").to_pylist() == ["t1", "t3", "t4"]
    assert json.loads((tmp_path / "o" / "audit.json").read_text())["cleaned_file"] == "train_clean.parquet"


def test_judge_malformed_verdict_names_the_pair(tmp_path):
    aud = ContaminationAuditor([JaccardStage(), JudgeStage(lambda a, b: "I think it is a paraphrase")])
    with pytest.raises(UserError, match="train id 't0' / eval id 'e0'"):
        aud.run([(r["id"], r["prompt"]) for r in TRAIN], [(r["id"], r["prompt"]) for r in EVAL])


def test_stage_order_and_names_are_checked():
    for stages in ([], ["judge"], ["embed", "jaccard"], ["jaccard", "jaccard"], ["ngram"]):
        with pytest.raises(UserError):
            ContaminationAuditor(stages)
    with pytest.raises(UserError, match="needs a judge"):
        ContaminationAuditor(["jaccard", "judge"])


def test_bad_rows_are_named(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "prompt": "ok"}\n{"id": "b", "prompt": ""}\n')
    with pytest.raises(UserError, match=r"bad.jsonl:2: column 'prompt'"):
        load_items(str(bad))
    bad.write_text('{"id": "a", "prompt": "ok"}\nnot json\n')
    with pytest.raises(UserError, match=r"bad.jsonl:2"):
        load_items(str(bad))
    bad.write_text('{"id": "a", "prompt": "x"}\n{"id": "a", "prompt": "y"}\n')
    with pytest.raises(UserError, match=r"bad.jsonl:2: id 'a' repeats .*bad.jsonl:1"):
        load_items(str(bad))
    bad.write_text('{"body": "x"}\n')
    with pytest.raises(UserError, match="--text-field"):
        load_items(str(bad))
    with pytest.raises(UserError, match="task split"):
        load_items("no-such-thing")


def test_task_split_source_is_disjoint():
    tr, ev = load_items("arithmetic:train", n=50), load_items("arithmetic:test", n=20)
    assert len(tr) == 50 and len(ev) == 20 and not set(tr.ids) & set(ev.ids)
    assert ContaminationAuditor(["jaccard"]).run(tr, ev).counts["jaccard"] == 0  # disjoint by construction


def test_cli_on_small_jsonl(tmp_path):
    _write_jsonl(tmp_path / "train.jsonl", TRAIN)
    _write_jsonl(tmp_path / "eval.jsonl", EVAL)
    out = tmp_path / "audit"
    args = [
        "audit",
        "--train",
        str(tmp_path / "train.jsonl"),
        "--eval",
        str(tmp_path / "eval.jsonl"),
        "--stages",
        "jaccard",
        "--out",
        str(out),
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "linked train items" in result.output
    assert json.loads((out / "audit.json").read_text())["counts"] == {"jaccard": 2, "linked_train": 2, "kept_train": 3}
    again = CliRunner().invoke(app, args)  # the folder already has an audit: refused, not overwritten
    assert isinstance(again.exception, UserError) and "exists" in str(again.exception)


def test_real_minilm_embeds_paraphrases_closer_than_unrelated():
    pytest.importorskip("sentence_transformers", reason="the audit extra (sentence-transformers) is not installed")
    from reasonrl.eval.audit_models import SentenceEmbedder, minilm_dir

    try:
        minilm_dir()
    except UserError as err:
        pytest.skip(f"packaged MiniLM not installed: {err}")
    emb = SentenceEmbedder()([TRAIN[0]["prompt"], TRAIN[4]["prompt"], TRAIN[3]["prompt"]])
    assert emb.shape == (3, 384)  # all-MiniLM-L6-v2 width
    assert np.allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
    para, unrelated = float(emb[0] @ emb[1]), float(emb[0] @ emb[2])
    assert para > unrelated + 0.3, (para, unrelated)


def test_labels_are_the_spec_labels():
    assert LABELS == ("near-duplicate", "paraphrase", "same-topic-only")


def test_hf_dir_and_task_sources_are_cleaned_in_their_format(tmp_path):
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_list(TRAIN).save_to_disk(str(tmp_path / "hf"))
    _write_jsonl(tmp_path / "eval.jsonl", EVAL)
    res = ContaminationAuditor(["jaccard"]).audit(str(tmp_path / "hf"), str(tmp_path / "eval.jsonl"), tmp_path / "o1")
    assert res.linked_train == {"t0", "t2"}
    assert datasets.load_from_disk(str(tmp_path / "o1" / "train_clean"))["id"] == ["t1", "t3", "t4"]
    train = load_items("arithmetic:train", n=30)
    # the eval set holds train item 3's prompt verbatim (a short text: one shingle, J = 1) and an unrelated one
    res = ContaminationAuditor(["jaccard"]).audit(train, [("x", train.texts[3]), ("y", "1000+1000=?")], tmp_path / "o2")
    assert res.linked_train == {train.ids[3]}
    rows = [json.loads(line) for line in (tmp_path / "o2" / "train_clean.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == train.ids[:3] + train.ids[4:]
    assert set(rows[0]) == {"id", "prompt", "answer"}


def test_local_causal_lm_judge_that_answers_off_label_stops_the_audit():
    # the shipped tiny base model knows arithmetic only: its answer is not one of the three labels
    from pathlib import Path

    import reasonrl

    base = Path(reasonrl.__file__).parent / "models" / "base"
    aud = ContaminationAuditor([JaccardStage(), JudgeStage(base)])
    with pytest.raises(UserError, match=r"judge verdict for train id 't0' / eval id 'e0' is .*expected exactly one of"):
        aud.run([(r["id"], r["prompt"]) for r in TRAIN], [(r["id"], r["prompt"]) for r in EVAL])
