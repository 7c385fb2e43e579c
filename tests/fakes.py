"""Shared test fakes: stand-ins for an engine or a generator, scripted batches and draft files that more
than one test module uses (before, test modules imported them from each other). The contexts and
``text_rollouts`` are in helpers.py; ways to drive the real code (CLI processes, a trainer step,
host-read counting) in harness.py."""

import json
import zlib

import torch
from transformers import DynamicCache

from reasonrl.loop.batch import Batch
from reasonrl.rollout import HFEngine, Rollouts
from reasonrl.rollout.hf import _strip_stop, position_ids_from_mask, row_uniforms
from reasonrl.rollout.sampling import next_hidden_grad_norm, sample_next
from reasonrl.tasks import get_task, take_items

from helpers import text_rollouts


# ------------------------------------------------------------- engines and generators (test_batch, test_eval_runner)
def kind(prompt: str) -> int:
    """0: the model gets every sample right, 1: every sample wrong, 2: half and half."""
    return zlib.crc32(prompt.encode()) % 3


class FakeEngine:
    """Answers each group according to ``kind(prompt)``; sample 0 of a 'long' prompt is truncated."""

    device, model = "cpu", None  # the Generator surface the batch maker reads (no model behind this fake)

    class tok:
        pad_token_id = 0

    def __init__(self, task):
        self.task, self.calls = task, 0

    def generate(self, prompts, n, sampling, generator=None, seeds=None):
        self.calls += 1
        texts, reasons = [], []
        for p in prompts:
            answer = str(eval(p.split("=")[0]))  # noqa: S307 - the task's own expressions
            for j in range(n):
                right = kind(p) == 0 or (kind(p) == 2 and j % 2 == 0)
                texts.append(f"A:{answer if right else int(answer) + 1}")
                reasons.append("length" if j == 0 and kind(p) == 2 else "eos")
        return text_rollouts(prompts, texts, n, reasons)


class Scripted:
    """A generator that answers from a script: greedy gives ``greedy(item_index)``; sample ``j`` of
    problem ``i`` gives ``sampled(i, j)``; texts are demonstrations or wrong answers."""

    max_rows = 64

    def __init__(self, items, greedy, sampled):
        self.index = {it.prompt: i for i, it in enumerate(items)}
        self.items, self.greedy, self.sampled = items, greedy, sampled

    def _text(self, i, ok):
        it = self.items[i]
        return it.demo if ok is True else ("garbage" if ok is None else f"x\nA:{int(it.answer) + 1}")

    def generate(self, prompts, n, sampling, seeds=None):
        idx = [self.index[p] for p in prompts]
        if sampling.temperature == 0:
            texts = [self._text(i, self.greedy(i)) for i in idx]
        else:
            texts = [self._text(i, self.sampled(i, j)) for i in idx for j in range(n)]
        return text_rollouts(prompts, texts, n)


# ----------------------------------------------------------- the per-token decode loop before its rewrite (test_decode)
DECODE_PROMPTS = ["12+3=?\n", "5+539=?\n", "1=?\n", "77+8=?\n"]


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
        return Rollouts(
            prompts=[p for p in prompts for _ in range(n)],
            texts=texts,
            prompt_ids=ids.repeat_interleave(n, 0),
            prompt_mask=mask.repeat_interleave(n, 0),
            completion_ids=cids,
            completion_mask=cm,
            logprobs=st.logp[:, :steps] * cm,
            finish_reasons=st.reason,
            n=n,
            entropies=st.ent[:, :steps] * cm,
            sum_p2=st.sum_p2[:, :steps] * cm,
            hidden_grad_norm=st.hidden[:, :steps] * cm if sp.hidden_grad_norm else None,
        )

    def _old_decode(self, ids, mask, n, sp, gen, u):
        cache = DynamicCache()
        pos = position_ids_from_mask(mask)
        out = self.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=pos,
            use_cache=True,
            logits_to_keep=1,
            **{self._cache_arg: cache},
        )
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
                st.alive, token, attn, last_pos, active = (
                    st.alive[keep],
                    token[keep],
                    attn[keep],
                    last_pos[keep],
                    active[keep],
                )
            if t == sp.max_new_tokens - 1:
                break
            attn = torch.cat([attn, torch.ones_like(attn[:, :1])], dim=1)
            last_pos = last_pos + 1
            out = self.model(
                input_ids=token[:, None],
                attention_mask=attn,
                position_ids=last_pos[:, None],
                use_cache=True,
                **{self._cache_arg: cache},
            )
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
                tail = self.tok.decode(st.ids[r, max(0, t + 1 - window) : t + 1], skip_special_tokens=True)
                if any(s in tail for s in stop):
                    st.reason[r], done[i] = "stop", True
        return done


# ------------------------------------------------------------------ selfteach's scripted batch (test_selfteach)
def make_rollouts(tok, prompts, completions, logprobs=None):
    """Rollouts of (prompt, completion) strings with the char tokenizer: prompts left-padded,
    completions right-padded, one row per completion (``prompts`` per row)."""
    p = [tok(x, add_special_tokens=False)["input_ids"] for x in prompts]
    c = [tok(x, add_special_tokens=False)["input_ids"] for x in completions]
    P, T = max(map(len, p)), max(map(len, c))
    pid = torch.tensor([[tok.pad_token_id] * (P - len(x)) + x for x in p])
    pm = torch.tensor([[0] * (P - len(x)) + [1] * len(x) for x in p])
    cid = torch.tensor([x + [tok.pad_token_id] * (T - len(x)) for x in c])
    cm = torch.tensor([[1] * len(x) + [0] * (T - len(x)) for x in c])
    lp = torch.zeros(cid.shape) if logprobs is None else logprobs
    return Rollouts(
        prompts=list(prompts),
        texts=list(completions),
        prompt_ids=pid,
        prompt_mask=pm,
        completion_ids=cid,
        completion_mask=cm,
        logprobs=lp,
        finish_reasons=["eos"] * len(c),
    )


# G = 3. Group 0: correct [1, 0, 0] (p = 1/3, w = 4 (1/3)(2/3) = 8/9); c* = row 0, w* = the longer
# wrong row 2. Group 1: correct [1, 1, 0], rows 3, 4 correct with lengths 5, 3 -> c* = row 4 (the
# shortest), w* = row 5 (the only wrong), w = 8/9. Group 2: all correct, no pair, w = 0. Group 3 is a
# second-round group (kind 1): mixed, but SSOPD reads first-round groups only, so N_x = 3.
SELFTEACH_PROMPTS = ["12+3=?\n"] * 3 + ["7+45=?\n"] * 3 + ["1+1=?\n"] * 3 + ["9+9=?\n"] * 3
SELFTEACH_COMPLETIONS = [
    "15\nA:15",
    "1\nA:9",
    "2+3=5\nA:18",
    "52\nA:52",
    "A:52",
    "4+7\nA:11",
    "A:2",
    "2\nA:2",
    "A:2",
    "A:18",
    "A:17",
    "A:16",
]
SELFTEACH_CORRECT = [[1, 0, 0], [1, 1, 0], [1, 1, 1], [1, 0, 0]]


def selfteach_batch(tok):
    """The batch of the comment above: 4 groups of 3 rows, the last a second-round group (kind 1)."""
    ro = make_rollouts(tok, SELFTEACH_PROMPTS, SELFTEACH_COMPLETIONS)
    correct = torch.tensor(SELFTEACH_CORRECT, dtype=torch.float)
    return Batch(
        items=[None] * 4,
        ro=ro,
        rewards=correct.clone(),
        correct=correct,
        loss_mask=ro.completion_mask.clone(),
        kinds=torch.tensor([0, 0, 0, 1]),
    )


def expected_pair_kl(model, tok, context: str, prompt: str, completion: str, temperature: float) -> float:
    """Token-mean forward KL(p_T || p_S) along ``completion``, each side one unpadded forward and the
    KL written out as sum_v p_T (log p_T - log p_S) (independent of the part's code paths)."""
    comp = tok(completion, add_special_tokens=False)["input_ids"]
    T = len(comp)

    def logprobs(ctx_text):
        ids = tok(ctx_text, add_special_tokens=False)["input_ids"] + comp
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids])).logits[0]  # (L, V)
        return (logits[len(ids) - T - 1 : len(ids) - 1] / temperature).log_softmax(-1)  # (T, V) predicting comp

    lt, ls = logprobs(context), logprobs(prompt)
    return float((lt.exp() * (lt - ls)).sum(-1).mean())


# ------------------------------------------------------------------ STRIDE's hand-made batch (test_stride)
RIGHT = "5+7+0=12,5+8+1=14,0+1+1=2\nA:242"  # the demonstration: 4 steps (3 columns + the answer line)
WRONG2 = "5+7+0=12,5+8+1=15,0+1+1=2\nA:252"  # step 2 is wrong


def stride_batch(tok, item, texts, correct, G):
    """A one-group Batch of ``texts`` (each ended by EOS) for ``item``, with the given correctness."""
    enc = tok([item.prompt] * len(texts), return_tensors="pt", padding=True)
    comp = [tok(t, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for t in texts]
    T = max(len(c) for c in comp)
    ids = torch.full((len(texts), T), tok.pad_token_id)
    mask = torch.zeros(len(texts), T, dtype=torch.long)
    for r, c in enumerate(comp):
        ids[r, : len(c)], mask[r, : len(c)] = torch.tensor(c), 1
    ro = Rollouts(
        prompts=[item.prompt] * len(texts),
        texts=list(texts),
        prompt_ids=enc["input_ids"],
        prompt_mask=enc["attention_mask"],
        completion_ids=ids,
        completion_mask=mask,
        logprobs=torch.zeros(ids.shape),
        finish_reasons=["eos"] * len(texts),
        n=G,
    )
    c = torch.tensor([correct], dtype=torch.float)
    return Batch([item], ro, c.clone(), c)


# ------------------------------------------------------------------ draft files (test_draft_task)
def wrong_draft(it):  # the demonstration with the answer off by one: formatted, definitely wrong
    return it.demo.rsplit("A:", 1)[0] + f"A:{int(it.answer) + 1}"


def write_drafts(path, items=None, flags=False):
    """Per problem a wrong draft and the demonstration (correct), correctness left to the verifier; by
    default for the first 5 arithmetic train items of seed 0 (test_draft_task's ITEMS)."""
    items = take_items(get_task("arithmetic"), "train", 5, seed=0) if items is None else items
    rows = []
    for it in items:
        rows += [{"key": it.key, "draft": wrong_draft(it)}, {"key": it.key, "draft": it.demo}]
        if flags:
            rows[-2]["correct"], rows[-1]["correct"] = False, True
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path
