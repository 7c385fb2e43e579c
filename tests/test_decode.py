"""The device-resident decode loop (rollout/decode.py): equal to the per-token loop it replaced.

``OldEngine`` below is a frozen copy of the per-token loop as it was before the rewrite (commit
3817aa4, rollout/hf.py): every host copy, text check and row drop at each token. The new loop
must give the same ids, masks, finish reasons and texts, and the same log-probs, entropies and
sum p^2, for every way rows draw their randomness and every stop-string path.
"""
import pytest
import torch
from transformers import DynamicCache

from reasonrl.rollout import HFEngine, SamplingParams
from reasonrl.rollout import decode as dec
from reasonrl.rollout.base import Rollouts
from reasonrl.rollout.decode import device_stop_seqs, first_text_stop, suffix_hits
from reasonrl.rollout.hf import _strip_stop, position_ids_from_mask, row_uniforms
from reasonrl.rollout.sampling import next_hidden_grad_norm, sample_next

PROMPTS = ["12+3=?\n", "5+539=?\n", "1=?\n", "77+8=?\n"]


class _OldState:
    def __init__(self, rows, max_new, pad):
        self.alive = torch.arange(rows)
        self.ids = torch.full((rows, max_new), pad, dtype=torch.long)
        self.logp, self.ent, self.sum_p2, self.hidden = (torch.zeros(rows, max_new) for _ in range(4))
        self.length = torch.zeros(rows, dtype=torch.long)
        self.reason = ["length"] * rows


class OldEngine(HFEngine):
    """The per-token loop before the rewrite (frozen copy; only ``_chunk``/``_decode``/``_newly_done``)."""

    @torch.inference_mode()
    def _chunk(self, prompts, n, sp, gen, seeds):
        ids, mask = self.encode_prompts(prompts)
        was_training = self.model.training
        self.model.eval()
        u = None if seeds is None else row_uniforms(seeds, n, sp.max_new_tokens)
        try:
            st = self._old_decode(ids, mask, n, sp, gen, u)
        finally:
            self.model.train(was_training)
        steps = int(st.length.max()) if len(st.length) else 0
        cm = (torch.arange(steps)[None, :] < st.length[:, None]).long()
        cids = st.ids[:, :steps]
        texts = [_strip_stop(t, sp.stop) for t in self.tok.batch_decode(cids, skip_special_tokens=True)]
        return Rollouts(prompts=[p for p in prompts for _ in range(n)], texts=texts,
                        prompt_ids=ids.repeat_interleave(n, 0), prompt_mask=mask.repeat_interleave(n, 0),
                        completion_ids=cids, completion_mask=cm, logprobs=st.logp[:, :steps] * cm,
                        finish_reasons=st.reason, n=n, entropies=st.ent[:, :steps] * cm,
                        sum_p2=st.sum_p2[:, :steps] * cm,
                        hidden_grad_norm=st.hidden[:, :steps] * cm if sp.hidden_grad_norm else None)

    def _old_decode(self, ids, mask, n, sp, gen, u):
        cache = DynamicCache()
        pos = position_ids_from_mask(mask)
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, logits_to_keep=1,
                         **{self._cache_arg: cache})
        cache.batch_repeat_interleave(n)
        logits = out.logits[:, -1].repeat_interleave(n, 0)
        attn, last_pos = mask.repeat_interleave(n, 0), pos[:, -1].repeat_interleave(n, 0)
        st = _OldState(len(logits), sp.max_new_tokens, self.tok.pad_token_id)
        active = torch.ones(len(logits), dtype=torch.bool)
        unembed = self.model.get_output_embeddings().weight if sp.hidden_grad_norm else None
        for t in range(sp.max_new_tokens):
            draw = None if u is None else u[st.alive, t]
            out = sample_next(logits, sp.temperature, sp.top_k, sp.top_p, gen, min_p=sp.min_p, uniform=draw)
            token = out.token.masked_fill(~active, self.tok.pad_token_id)
            rows = st.alive[active]
            st.ids[rows, t], st.logp[rows, t], st.length[rows] = token[active], out.logprob[active], t + 1
            st.ent[rows, t], st.sum_p2[rows, t] = out.entropy[active], out.sum_p2[active]
            if unembed is not None:
                st.hidden[rows, t] = next_hidden_grad_norm(logits, out.token, sp.temperature, unembed)[active]
            active &= ~self._old_newly_done(st, token, active, t, sp.stop)
            if not active.any():
                break
            if active.sum() < self.compact_below * len(active):
                keep = active.nonzero().squeeze(-1)
                cache.batch_select_indices(keep)
                st.alive, token, attn, last_pos, active = st.alive[keep], token[keep], attn[keep], last_pos[keep], active[keep]
            if t == sp.max_new_tokens - 1:
                break
            attn = torch.cat([attn, torch.ones_like(attn[:, :1])], dim=1)
            last_pos = last_pos + 1
            out = self.model(input_ids=token[:, None], attention_mask=attn, position_ids=last_pos[:, None],
                             use_cache=True, **{self._cache_arg: cache})
            logits = out.logits[:, -1]
        return st

    def _old_newly_done(self, st, token, active, t, stop):
        done = active & (token == self.tok.eos_token_id)
        for i in done.nonzero().squeeze(-1).tolist():
            st.reason[int(st.alive[i])] = "eos"
        if stop:
            window = max(len(s) for s in stop) + 4
            for i in (active & ~done).nonzero().squeeze(-1).tolist():
                r = int(st.alive[i])
                tail = self.tok.decode(st.ids[r, max(0, t + 1 - window):t + 1], skip_special_tokens=True)
                if any(s in tail for s in stop):
                    st.reason[r], done[i] = "stop", True
        return done


def assert_same(a, b, exact=True):
    assert a.completion_ids.tolist() == b.completion_ids.tolist()
    assert torch.equal(a.completion_mask, b.completion_mask)
    assert a.finish_reasons == b.finish_reasons and a.texts == b.texts
    for name in ("logprobs", "entropies", "sum_p2", "hidden_grad_norm"):
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None), name
        if x is not None:
            assert torch.equal(x, y) if exact else torch.allclose(x, y, atol=1e-5, rtol=0), name


def _run(engine_cls, model, tok, sp, mode, **kw):
    engine = engine_cls(model, tok, **kw)
    if mode == "seeds":
        return engine.generate(PROMPTS, 3, sp, seeds=[11, 12, 13, 14])
    if mode == "generator":
        return engine.generate(PROMPTS, 3, sp, generator=torch.Generator().manual_seed(5))
    return engine.generate(PROMPTS, 3, sp)  # sampling.seed, or greedy


CASES = {  # name: (sampling params, randomness, engine kwargs)
    "seeds": (SamplingParams(temperature=1.0, max_new_tokens=24), "seeds", {}),
    "seeds-stop": (SamplingParams(temperature=1.0, max_new_tokens=24, stop=("\nA:", "=1")), "seeds", {}),
    "seeds-stop-chunks": (SamplingParams(temperature=0.8, top_p=0.9, max_new_tokens=24, stop=(",",)), "seeds",
                          {"max_rows": 5}),
    "generator": (SamplingParams(temperature=1.0, max_new_tokens=24), "generator", {}),
    "generator-stop-chunks": (SamplingParams(temperature=1.0, top_k=20, max_new_tokens=24, stop=("=1", ",")),
                              "generator", {"max_rows": 4}),
    "sampling-seed-hidden": (SamplingParams(temperature=0.7, max_new_tokens=16, seed=3, hidden_grad_norm=True,
                                            stop=("\n",)), "plain", {}),
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
    assert_same(_run(HFEngine, model, tok, sp, "generator", max_rows=5),
                _run(OldEngine, model, tok, sp, "generator", max_rows=5))


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
