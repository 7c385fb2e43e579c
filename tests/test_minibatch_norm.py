"""Terms normalised by a batch-level count (SSOPD's prompts N_x, FEST's pairs P) keep their weight
relative to the policy loss whatever ``optim.minibatches`` M is (issue #26). The policy loss divides
by the *minibatch's* rows (``n_seqs``), so a term that divided by the whole batch's count lost a
factor M. Checked by reintroducing the cause: with ``n_x = N_x`` (no ``minibatch_share``) in
``SSOPD.loss_term`` and ``n_pairs = pairs.n_pairs`` in ``FEST.loss_term``, the M=2 assertions below
fail (0.09637 and 0.34657, half the values)."""

import math
from types import SimpleNamespace

import pytest
import torch

from helpers import loss_context
from reasonrl.loop.batch import Batch
from reasonrl.parts import fest as fest_module
from reasonrl.parts.fest import FEST, FestPairs, Tokens
from reasonrl.parts.protocol import Channel
from reasonrl.parts.selfteach import SSOPD

from fakes import make_rollouts

FWD_KL = 0.8 * math.log(0.8 / 0.5) + 0.2 * math.log(0.2 / 0.5)  # spec 1 (d): KL((0.8, 0.2) || (0.5, 0.5)) = 0.19274


def test_minibatch_share_by_hand():
    # 8 rows, rows 6 and 7 have no loss token: 6 trained rows; a minibatch with 3 of them has share 1/2
    mask = torch.ones(8, 2)
    mask[6:] = 0
    ctx = loss_context(logp=None, batch=SimpleNamespace(loss_mask=mask), rows=torch.arange(4), n_seqs=3)
    assert ctx.minibatch_share() == pytest.approx(0.5)
    assert (
        loss_context(logp=None, batch=SimpleNamespace(loss_mask=mask), rows=torch.arange(8), n_seqs=6).minibatch_share()
        == 1.0
    )


class FixedSSOPD(SSOPD):
    """Teacher (0.8, 0.2) and student (0.5, 0.5) at every distilled token: D_t = 0.19274 per pair."""

    def teacher_student(self, batch, c_rows, w_rows, model, tok, temperature, teacher_model=None, formatter=None):
        n = len(w_rows)
        teacher = torch.log(torch.tensor([0.8, 0.2])).expand(n, 1, 2)
        student = torch.zeros(n, 1, 2, requires_grad=True)
        return teacher, student, torch.ones(n, 1)


def _ssopd_batch():
    # G = 4, two first-round groups, each [1, 1, 0, 0] (p = 1/2, w = 1); w* = the longer wrong row:
    # group 0 rows 2 ("aaaa") and 3 ("aa") -> row 2; group 1 rows 6 ("b"), 7 ("bbb") -> row 7
    tok = SimpleNamespace(eos_token_id=0)
    texts = ["a", "aa", "aaaa", "aa", "b", "bb", "b", "bbb"]
    ro = make_rollouts(_CharTok(), ["x"] * 8, texts)
    correct = torch.tensor([[1.0, 1, 0, 0], [1, 1, 0, 0]])
    return Batch(
        items=[None] * 2,
        ro=ro,
        rewards=correct.clone(),
        correct=correct,
        loss_mask=ro.completion_mask.clone(),
        kinds=torch.tensor([0, 0]),
    ), tok


class _CharTok:
    pad_token_id = 0

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [ord(c) for c in text]}


def test_ssopd_weight_against_the_policy_loss_does_not_depend_on_minibatches():
    b, tok = _ssopd_batch()
    part = FixedSSOPD(coef=1.0)
    assert part.pairs(b)["w_rows"].tolist() == [2, 7]
    # M = 1: all 8 rows; lambda (1/N_x) sum_x w(x) D_x = (1/2)(0.19274 + 0.19274) = 0.19274;
    # per pair 1/2, per GRPO row (seq-mean over n_seqs = 8) 1/8: ratio 4
    whole, _ = part.loss_term(loss_context(logp=torch.zeros(1), batch=b, rows=torch.arange(8), tok=tok, n_seqs=8))
    assert float(whole.detach()) == pytest.approx(FWD_KL, rel=1e-5)
    # M = 2, minibatch rows 0-3 (n_seqs 4, share 1/2) holds w* row 2: N_x * share = 1, so 1 * 0.19274;
    # per pair 1, per GRPO row 1/4: ratio 4 again (the old N_x = 2 gave 0.09637 and ratio 2)
    half, _ = part.loss_term(loss_context(logp=torch.zeros(1), batch=b, rows=torch.arange(4), tok=tok, n_seqs=4))
    assert float(half.detach()) == pytest.approx(FWD_KL, rel=1e-5)
    ratio = {m: (float(v) / FWD_KL / pairs) / (1 / n) for m, v, pairs, n in ((1, whole, 2, 8), (2, half, 1, 4))}
    assert ratio == pytest.approx({1: 4.0, 2: 4.0})


def test_fest_weight_against_the_policy_loss_does_not_depend_on_minibatches(monkeypatch):
    # every token's log-prob log(1/2) -> the SFT NLL of a pair is ln 2 = 0.693147; two pairs, alpha 1
    def logp(model, t, temperature, chunk_rows):
        return torch.full(t.completion_ids.shape, math.log(0.5), requires_grad=True), torch.ones(t.completion_ids.shape)

    monkeypatch.setattr(fest_module, "_logp", logp)
    toks = Tokens(
        torch.ones(2, 1, dtype=torch.long), torch.ones(2, 1), torch.ones(2, 3, dtype=torch.long), torch.ones(2, 3)
    )
    pairs = FestPairs(chosen=toks, alpha=torch.ones(2), demo=torch.arange(2))
    batch = SimpleNamespace(loss_mask=torch.ones(8, 2))  # 8 trained rows: anchors rows 0 and 4
    model = torch.nn.Linear(1, 1)
    kw = dict(logp=None, batch=batch, model=model, data=Channel(values={"pairs": pairs}))
    part = FEST(sup_loss="sft")
    # M = 1: (ln 2 + ln 2) / 2 = 0.693147
    whole, _ = part.loss_term(loss_context(rows=torch.arange(8), n_seqs=8, **kw))
    assert float(whole) == pytest.approx(math.log(2), rel=1e-6)
    # M = 2, rows 0-3 (share 1/2) hold anchor 0: ln 2 / (2 * 1/2) = 0.693147 (the old P = 2 gave 0.346574)
    half, _ = part.loss_term(loss_context(rows=torch.arange(4), n_seqs=4, **kw))
    assert float(half) == pytest.approx(math.log(2), rel=1e-6)
