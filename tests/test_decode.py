"""The device-resident decode loop (rollout/decode.py): equal to the per-token loop it replaced.

``OldEngine`` (tests/fakes.py) is a frozen copy of the per-token loop as it was before the rewrite (commit
3817aa4, rollout/hf.py): every host copy, text check and row drop at each token. The new loop
must give the same ids, masks, finish reasons and texts, and the same log-probs, entropies and
sum p^2, for every way rows draw their randomness and every stop-string path.
"""

import pytest
import torch

from reasonrl.rollout import HFEngine, SamplingParams
from reasonrl.rollout import decode as dec
from reasonrl.rollout.decode import device_stop_seqs, first_text_stop, suffix_hits

from fakes import DECODE_PROMPTS, OldEngine
from harness import assert_same


def _run(engine_cls, model, tok, sp, mode, **kw):
    engine = engine_cls(model, tok, **kw)
    if mode == "seeds":
        return engine.generate(DECODE_PROMPTS, 3, sp, seeds=[11, 12, 13, 14])
    if mode == "generator":
        return engine.generate(DECODE_PROMPTS, 3, sp, generator=torch.Generator().manual_seed(5))
    return engine.generate(DECODE_PROMPTS, 3, sp)  # sampling.seed, or greedy


CASES = {  # name: (sampling params, randomness, engine kwargs)
    "seeds": (SamplingParams(temperature=1.0, max_new_tokens=24), "seeds", {}),
    "seeds-stop": (SamplingParams(temperature=1.0, max_new_tokens=24, stop=("\nA:", "=1")), "seeds", {}),
    "seeds-stop-chunks": (
        SamplingParams(temperature=0.8, top_p=0.9, max_new_tokens=24, stop=(",",)),
        "seeds",
        {"max_rows": 5},
    ),
    "generator": (SamplingParams(temperature=1.0, max_new_tokens=24), "generator", {}),
    "generator-stop-chunks": (
        SamplingParams(temperature=1.0, top_k=20, max_new_tokens=24, stop=("=1", ",")),
        "generator",
        {"max_rows": 4},
    ),
    "sampling-seed-hidden": (
        SamplingParams(temperature=0.7, max_new_tokens=16, seed=3, hidden_grad_norm=True, stop=("\n",)),
        "plain",
        {},
    ),
    "greedy-stop": (SamplingParams(temperature=0, max_new_tokens=24, stop=("\nA:", "0+")), "plain", {}),
    "greedy-chunks": (SamplingParams(temperature=0, max_new_tokens=24), "plain", {"max_rows": 3}),
}


@pytest.mark.parametrize("check_every", [1, 3, 8])
@pytest.mark.parametrize("case", list(CASES))
def test_the_device_loop_equals_the_per_token_loop(sharp_tiny, case, check_every):
    model, tok = sharp_tiny
    sp, mode, kw = CASES[case]
    old = _run(OldEngine, model, tok, sp, mode, **kw)
    new = _run(HFEngine, model, tok, sp, mode, check_every=check_every, **kw)
    # rows dropped at the looks, not at the step the per-token loop dropped them: the batch's
    # shape differs, so CPU matmuls may round differently (in the last bits); every 1 step: bit-equal
    assert_same(new, old, exact=check_every == 1)
    if sp.stop:
        assert "stop" in old.finish_reasons  # the case really exercises the stop path


def test_host_text_check_alone_equals_the_per_token_loop(sharp_tiny, monkeypatch):
    # no stop string matched on the device: the host look every 5 steps must cut rows where the
    # per-token loop did (rows ran up to 4 steps past their stop before the look)
    model, tok = sharp_tiny
    sp = SamplingParams(temperature=1.0, max_new_tokens=24, stop=("\nA:", "=1"))
    monkeypatch.setattr(dec, "device_stop_seqs", lambda *a: None)
    new, old = _run(HFEngine, model, tok, sp, "seeds", check_every=5), _run(OldEngine, model, tok, sp, "seeds")
    assert_same(new, old, exact=False)  # rows dropped at other steps: last-bit rounding (see above)
    assert "stop" in old.finish_reasons


def test_the_device_loop_equals_the_per_token_loop_with_lora(sharp_tiny):
    from reasonrl.config.train import Lora
    from reasonrl.models.lora import apply_lora
    from reasonrl.models import build_tiny

    model, tok = build_tiny("tiny", seed=0)
    model.load_state_dict(sharp_tiny[0].state_dict())
    model = apply_lora(model, Lora(r=4, alpha=8.0), seed=1)
    with torch.no_grad():  # peft starts B at 0: move it so the adapters change the outputs
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05, generator=torch.Generator().manual_seed(hash(name) % 1000))
    sp = SamplingParams(temperature=1.0, max_new_tokens=20, stop=("\nA:",))
    assert_same(_run(HFEngine, model, tok, sp, "seeds"), _run(OldEngine, model, tok, sp, "seeds"), exact=False)
    assert_same(
        _run(HFEngine, model, tok, sp, "generator", max_rows=5),
        _run(OldEngine, model, tok, sp, "generator", max_rows=5),
    )


def test_suffix_hits_by_hand():
    # sequences [7, 8] and [9] right-aligned in width 2: [[7, 8], [0, 9]] with validity
    # [[T, T], [F, T]]. Histories up to step t=2: row0 ..., 7, 8 ends with [7, 8]; row1 ends with 9;
    # row2 ends with 8 after 5 (no); row3 ends with [8, 7] (no: order matters).
    seqs, valid = torch.tensor([[7, 8], [0, 9]]), torch.tensor([[True, True], [False, True]])
    hist = torch.tensor([[3, 7, 8, 0], [1, 2, 9, 0], [0, 5, 8, 0], [1, 8, 7, 0]])
    assert suffix_hits(hist, 2, seqs, valid).tolist() == [True, True, False, False]
    # at t=0 only one token exists: [7, 8] cannot fit; row with 9 first matches [9]
    hist0 = torch.tensor([[8, 0], [9, 0]])
    assert suffix_hits(hist0, 0, seqs, valid).tolist() == [False, True]


def test_device_stop_seqs_right_align_the_char_encodings(sharp_tiny):
    _, tok = sharp_tiny
    seqs, valid = device_stop_seqs(tok, ("\nA:", "=1"), "cpu")
    nl, a, colon, eq, one = (tok.convert_tokens_to_ids(c) for c in ("\n", "A", ":", "=", "1"))
    assert seqs.tolist() == [[nl, a, colon], [0, eq, one]]
    assert valid.tolist() == [[True, True, True], [False, True, True]]


def test_first_text_stop_by_hand(sharp_tiny):
    _, tok = sharp_tiny
    # stop "ab": window = 2 + 4 = 6 tokens. Row 0 "xxab.." holds "ab" first at step 3 (tail "xxab");
    # row 1 "ab" appears at steps 1-2 but only steps 2..5 are searched, and step 2's tail "xab"
    # holds it; row 2 "xyxyxy" never does; row 3's range is empty (start 2 > end 1).
    rows = [tok.encode(s, add_special_tokens=False) for s in ("xxabab", "xabxxx", "xyxyxy", "abxxxx")]
    found = first_text_stop(tok, rows, [0, 2, 0, 2], [5, 5, 5, 1], 0, ("ab",))
    assert found == [3, 2, None, None]
    # an offset: searching steps 10..13, the ids given start at step 5 (= 10 + 1 - 6, the first
    # step step 10's tail needs), so step s is ids[s - 5]; "xxxxab.." has "ab" at steps 9-10 -> 10
    assert first_text_stop(tok, [tok.encode("xxxxabxxx", add_special_tokens=False)], [10], [13], 5, ("ab",)) == [10]


@pytest.mark.parametrize("mode", ["seeds", "plain"])
def test_static_cache_gives_the_dynamic_cache_s_tokens(sharp_tiny, mode):
    model, tok = sharp_tiny
    temp = 1.0 if mode == "seeds" else 0.0
    sp = SamplingParams(temperature=temp, max_new_tokens=20, stop=("\nA:",))
    dynamic = _run(HFEngine, model, tok, sp, mode)
    static = _run(HFEngine, model, tok, sp, mode, static_cache=True)
    assert_same(static, dynamic, exact=False)  # attention over the masked full width: sums may round differently


def test_compile_needs_a_static_cache_and_check_every_is_positive(sharp_tiny):
    model, tok = sharp_tiny
    with pytest.raises(ValueError, match="static_cache"):
        HFEngine(model, tok, compile=True)
    with pytest.raises(ValueError, match="check_every"):
        HFEngine(model, tok, check_every=0)


def test_on_a_cpu_finished_rows_leave_at_once_and_the_samples_stay_the_same(sharp_tiny):
    # a CPU's decode step costs in proportion to its rows: the engine drops a finished row at the next
    # look (compact_below 1.0); the rows' tokens are those of keeping every row to the end (0.0)
    model, tok = sharp_tiny
    assert HFEngine(model, tok).compact_below == 1.0
    sp = SamplingParams(temperature=1.0, max_new_tokens=24, stop=("\nA:",))
    at_once, kept = _run(HFEngine, model, tok, sp, "seeds"), _run(HFEngine, model, tok, sp, "seeds", compact_below=0.0)
    assert len(set(at_once.lengths.tolist())) > 2  # rows end at different steps: rows really leave early
    assert_same(at_once, kept, exact=False)
