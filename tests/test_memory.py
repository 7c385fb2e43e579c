"""Memory knobs (models.memory): rows per pass from free memory (`auto`), activation checkpointing,
the sliced float32 log-softmax of the update, and bf16 compute over float32 master weights."""

import copy
import json

import pytest
import torch
import yaml

from reasonrl.config.train import Lora, TrainConfig, split_config
from reasonrl.errors import UserError
from reasonrl.models import build_tiny, load_model, score_completions
from reasonrl.models import scoring
from reasonrl.models.lora import base_model
from reasonrl.models.memory import (
    CPU_DEFAULTS,
    PROMPT_SAMPLE,
    Shape,
    compute_dtype,
    decode_bytes_per_row,
    kv_cache_bytes,
    plan_rows,
    prepare_for_training,
    prompt_tokens_estimate,
    rows_that_fit,
    training_state_bytes,
    update_bytes_per_row,
)
from reasonrl.models.scoring import chunked_logprobs_and_entropy, logprobs_and_entropy
from reasonrl.recipes import get_recipe
from reasonrl.loop.run import train_run
from reasonrl.tasks import get_task
from reasonrl.tasks.base import Item
from reasonrl.loop.trainer import Trainer
from reasonrl.config.validate import check_run

from harness import one_step

S = Shape(layers=2, hidden=8, kv=4, intermediate=16, vocab=10)  # the small shape of the hand computations


# ------------------------------------------------------------------ estimates (hand-computed)
def test_rows_that_fit():
    assert rows_that_fit(1000, 30, 0.6) == 20  # 600 / 30
    assert rows_that_fit(1000, 31, 0.6) == 19  # 600 / 31 = 19.35
    assert rows_that_fit(1000, 600, 0.6) == 1
    assert rows_that_fit(100, 200, 0.6) == 0  # 60 bytes: not one row
    assert rows_that_fit(-5, 10, 0.6) == 0  # less free than the training state needs
    with pytest.raises(ValueError, match="bytes_per_row"):
        rows_that_fit(1000, 0)


def test_shape_of_hf_configs():
    # tiny: hidden 128, 4 heads of 32, 4 KV heads -> kv = 128; MLP 384; 2 layers; 100 symbols
    assert Shape.of(build_tiny("tiny")[0].config) == Shape(layers=2, hidden=128, kv=128, intermediate=384, vocab=100)
    from transformers import Qwen2Config  # the GPU benchmark's 0.5B shape: 14 heads of 64, 2 KV heads -> kv = 128

    qwen = Qwen2Config(
        vocab_size=100,
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
    )
    assert Shape.of(qwen) == Shape(layers=24, hidden=896, kv=128, intermediate=4864, vocab=100)


def test_decode_estimates():
    assert kv_cache_bytes(S, 5, 2) == 160  # 2 layers x (K, V) x 4 x 5 tokens x 2 bytes
    # KV over 3 + 2 tokens = 160; prefill 3 x (2*16 + 4*8) x 2 = 384; sampler 48 x 10 = 480
    assert decode_bytes_per_row(S, 3, 2, 2) == 160 + 384 + 480


def test_update_estimates():
    # ACT = 8*8 + 4*4 + 4*16 = 144 values per token and layer; S = 5 tokens; logits 2 x 10 x 12 = 240
    assert update_bytes_per_row(S, 3, 2, 2, checkpointing=False) == 2 * 5 * 144 * 2 + 240  # 3120
    # checkpointing: layer inputs 2 x 5 x 8 x 2 = 160, one layer recomputed 5 x 144 x 2 = 1440
    assert update_bytes_per_row(S, 3, 2, 2, checkpointing=True) == 160 + 1440 + 240  # 1840
    # mixed precision: + 4h float32 per token and layer: one layer 5 x (288 + 128) = 2080
    assert update_bytes_per_row(S, 3, 2, 2, checkpointing=False, mixed=True) == 2 * 2080 + 240  # 4400
    assert update_bytes_per_row(S, 3, 2, 2, checkpointing=True, mixed=True) == 2 * 5 * 8 * 4 + 2080 + 240  # 2640


def test_plan_rows():
    both = ("max_rows", "micro_batch_size")
    # 0.6 x 10000 = 6000 bytes: 6000 // 1024 = 5 decode rows, 6000 // 3120 = 1 update row
    assert plan_rows(both, S, 10_000, 2, 3, 2, checkpointing=False) == {"max_rows": 5, "micro_batch_size": 1}
    # checkpointing: 6000 // 1840 = 3 update rows
    assert plan_rows(both, S, 10_000, 2, 3, 2, checkpointing=True) == {"max_rows": 5, "micro_batch_size": 3}
    assert plan_rows(("max_rows",), S, 5_000, 2, 3, 2, checkpointing=False) == {"max_rows": 2}  # 3000 // 1024
    with pytest.raises(UserError, match=r"micro_batch_size=auto: not one row fits.*gradient_checkpointing"):
        plan_rows(both, S, 5_000, 2, 3, 2, checkpointing=False)  # 3000 < 3120


def test_training_state_bytes():
    lin = torch.nn.Linear(3, 2)  # 8 float32 values = 32 bytes
    assert training_state_bytes(lin, needs_reference=False) == 96  # gradient + 2 AdamW moments
    assert training_state_bytes(lin, needs_reference=True) == 128  # + a reference copy
    assert training_state_bytes(lin, needs_reference=True, autocast_bytes=2) == 144  # + 8 bf16 weight copies
    lin.bias.requires_grad_(False)  # 6 trainable values = 24 bytes
    assert training_state_bytes(lin, needs_reference=True) == 3 * 24 + 32


class _Prompts:
    def __init__(self, prompts):
        self.prompts, self.drawn = prompts, 0

    def iter_items(self, split, seed):
        while True:
            for p in self.prompts:
                self.drawn += 1
                yield Item(key=p, prompt=p, answer="")


def test_prompt_tokens_estimate():
    task, tok = _Prompts(["ab", "abcd", "abc"]), build_tiny("tiny")[1]  # one token per character
    assert prompt_tokens_estimate(task, tok, 0) == 5  # ceil(4 x 1.25)
    assert task.drawn == PROMPT_SAMPLE


def test_auto_off_cuda_is_the_documented_default_and_numbers_pass_through():
    model, tok = build_tiny("tiny")
    from reasonrl.models.memory import resolve_rows

    cfg = resolve_rows(TrainConfig(), model, tok, get_task("arithmetic"), new_tokens=8, needs_reference=False)
    assert (
        (cfg.max_rows, cfg.micro_batch_size)
        == (CPU_DEFAULTS["max_rows"], CPU_DEFAULTS["micro_batch_size"])
        == (512, 64)
    )
    cfg = resolve_rows(
        TrainConfig(max_rows=7, micro_batch_size=3), model, tok, None, new_tokens=8, needs_reference=False
    )
    assert (cfg.max_rows, cfg.micro_batch_size) == (7, 3)


def test_auto_in_the_config_and_its_validation():
    cfg, _ = split_config({"micro_batch_size": "auto", "max_rows": "256", "master_fp32": False})
    assert (cfg.micro_batch_size, cfg.max_rows, cfg.master_fp32) == ("auto", 256, False)
    assert TrainConfig().micro_batch_size == TrainConfig().max_rows == "auto"
    recipe = get_recipe("grpo")
    check_run(cfg, recipe)
    with pytest.raises(UserError, match=r"'max_rows' = 'lots' is out of range: must be auto .* or an integer >= 1"):
        check_run(split_config({"max_rows": "lots"})[0], recipe)


# ------------------------------------------------------------------ activations (measured)
def _saved_bytes(model, fn) -> int:
    """Bytes autograd keeps for the backward during ``fn()``, each storage once, weights excluded."""
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen = {}

    def pack(t):
        st = t.untyped_storage()
        if st.data_ptr() not in weights:
            seen[st.data_ptr()] = st.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(seen.values())


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_activation_estimate_matches_what_autograd_keeps(dtype):
    # per-token growth (40 more completion tokens on 4 rows), so constants (bf16 weight copies) cancel
    model, _ = build_tiny("tiny")
    model.train()
    prepare_for_training(model, dtype, master_fp32=True, checkpointing=False)
    b, g = (2 if dtype == "bfloat16" else 4), torch.Generator().manual_seed(0)
    ids = torch.randint(3, 90, (4, 12), generator=g)
    kept, est = [], []
    for ckpt in (False, True):
        if ckpt:
            prepare_for_training(model, "float32", master_fp32=False, checkpointing=True)
        for T in (20, 60):
            c = torch.randint(3, 90, (4, T), generator=g)
            kept.append(
                _saved_bytes(
                    model,
                    lambda: score_completions(model, ids, torch.ones_like(ids), c, torch.ones_like(c), chunk_rows=4),  # noqa: B023 - called at once
                )
            )
            est.append(4 * update_bytes_per_row(Shape.of(model.config), 12, T, b, ckpt, mixed=dtype == "bfloat16"))
    plain, checkpointed = kept[1] - kept[0], kept[3] - kept[2]
    assert 0.9 < (est[1] - est[0]) / plain < 1.15  # measured 1.02 (float32), 1.00 (bfloat16 autocast)
    assert checkpointed < plain / 4 < est[3] - est[2]  # checkpointing keeps layer inputs only; the estimate bounds it


# ------------------------------------------------------------------ sliced log-softmax
def test_sliced_log_softmax_equals_the_whole_and_keeps_less():
    g = torch.Generator().manual_seed(0)
    logits = (3 * torch.randn(2, 7, 5, generator=g)).requires_grad_()
    targets = torch.randint(0, 5, (2, 7), generator=g)
    w1, w2 = torch.randn(2, 7, generator=g), torch.randn(2, 7, generator=g)
    whole = logprobs_and_entropy(logits, targets, 0.7)
    sliced = chunked_logprobs_and_entropy(logits, targets, 0.7, max_elements=10)  # 10 // (2 x 5) = 1 step a slice
    for a, b in zip(whole, sliced):
        assert torch.allclose(a, b, atol=1e-6, rtol=0)
    (ga,) = torch.autograd.grad((whole[0] * w1 + whole[1] * w2).sum(), logits)
    (gb,) = torch.autograd.grad((sliced[0] * w1 + sliced[1] * w2).sum(), logits)
    assert torch.allclose(ga, gb, atol=1e-6, rtol=0) and ga.abs().max() > 0.1
    leaf = logits.untyped_storage().data_ptr()
    kept = {}
    for name, fn in (
        ("whole", lambda: logprobs_and_entropy(logits, targets)),
        ("sliced", lambda: chunked_logprobs_and_entropy(logits, targets, max_elements=10)),
    ):
        seen = {}
        pack = lambda t: seen.__setitem__(t.untyped_storage().data_ptr(), t.untyped_storage().nbytes()) or t  # noqa: E731, B023 - hooks of this iteration only
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            fn()
        kept[name] = sum(n for ptr, n in seen.items() if ptr != leaf)
    assert kept["whole"] >= 2 * 2 * 7 * 5 * 4  # at least the float32 log-softmax and its exp
    assert kept["sliced"] < 2 * 7 * 5 * 4  # not even one float32 copy of the logits


def test_the_update_path_slices_and_its_gradient_is_exact(monkeypatch):
    model, _ = build_tiny("tiny")
    g = torch.Generator().manual_seed(1)
    ids, c = torch.randint(3, 90, (3, 6), generator=g), torch.randint(3, 90, (3, 9), generator=g)
    grads = []
    for limit in (2**26, 100):  # one slice; 100 // (3 x 100) -> one time step a slice
        monkeypatch.setattr(scoring, "LOGIT_CHUNK_ELEMENTS", limit)
        model.zero_grad()
        lp, ent = score_completions(model, ids, torch.ones_like(ids), c, torch.ones_like(c), chunk_rows=3)
        (lp.sum() + 0.1 * ent.sum()).backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    for a, b in zip(*grads):
        assert torch.allclose(a, b, atol=1e-6, rtol=0)


@pytest.mark.parametrize("lora", [Lora(), Lora(r=4, alpha=8.0)], ids=["full", "lora"])
def test_gradient_checkpointing_changes_no_gradient(tiny_dir, lora, monkeypatch):
    # a checkpointed forward keeps no KV cache, so it scores every row with its own prompt; the plain
    # run is made to do the same (no prompt sharing, models.scoring), so that only the recompute differs
    monkeypatch.setattr("reasonrl.models.scoring.shared_prefix_logits", lambda *a, **k: None)
    (plain, b0, _, g0), (ckpt, b1, _, g1) = (one_step(tiny_dir, lora=lora, ckpt=c) for c in (False, True))
    assert any(getattr(m, "gradient_checkpointing", False) for m in ckpt.model.modules())
    assert not any(getattr(m, "gradient_checkpointing", False) for m in plain.model.modules())
    assert torch.equal(b0.ro.completion_ids, b1.ro.completion_ids)  # generation (eval mode, KV cache) unchanged
    assert len(g0) == len(g1) and any(g.abs().max() > 1e-4 for g in g0)
    for a, b in zip(g0, g1):
        assert torch.allclose(a, b, atol=1e-6, rtol=0)
    for p, q in zip(plain.params, ckpt.params):  # and so the optimiser step
        assert torch.allclose(p, q, atol=1e-6, rtol=0)


def test_bf16_master_weights_keep_an_update_below_bf16_resolution(tiny_dir):
    # AdamW's first step moves each weight by lr * g / (|g| + eps) = lr * sign(g) when |g| >> eps; at
    # lr 1e-6 that is far below bf16's spacing at |w| >= 2^-7 (2^-7 * 2^-7 = 6.1e-5)
    lr = 1e-6
    tr, _, before, grads = one_step(tiny_dir, dtype="bfloat16", master=True, lr=lr)
    assert next(tr.model.parameters()).dtype == torch.float32 and compute_dtype(tr.model) == torch.bfloat16
    moved = 0
    for p0, p1, g in zip(before, tr.params, grads):
        big = g.abs() > 1e-5  # eps = 1e-8 is then < 0.1% of |g|
        # float32 rounds p - lr to within half its spacing: <= 6e-8 below 1, 1.2e-7 just above
        assert torch.allclose((p1 - p0)[big], -lr * g.sign()[big], atol=1.3e-7, rtol=0)
        moved += int(((p1 != p0) & big & (p0.abs() >= 2**-7)).sum())
    assert moved > 1000
    pure, _, before, grads = one_step(tiny_dir, dtype="bfloat16", master=False, lr=lr, weights=torch.bfloat16)
    assert next(pure.model.parameters()).dtype == torch.bfloat16
    lost = [(p1 == p0)[(g.abs() > 1e-5) & (p0.abs() >= 2**-7)] for p0, p1, g in zip(before, pure.params, grads)]
    assert sum(x.numel() for x in lost) > 1000 and all(x.all() for x in lost)  # pure bf16: every such update lost


def test_behaviour_logprobs_equal_a_rescoring_pass_to_bf16_tolerance(tiny_dir):
    # bf16 keeps 8 significant bits; the KV-cache decode and the full forward round differently, so
    # per-token log-probs differ by ~3e-4 on average; measured max 0.015-0.027 over three batches of
    # 128 rows (~3.3k tokens each), so 0.05; float32 agrees to 4e-6
    worst = {}
    for dtype in ("float32", "bfloat16"):
        tr, b, _, _ = one_step(tiny_dir, dtype=dtype, lr=0.0)
        ro, mask = b.ro, b.ro.completion_mask.bool()
        with torch.no_grad():
            lp, _ = score_completions(
                tr.model,
                ro.prompt_ids,
                ro.prompt_mask,
                ro.completion_ids,
                ro.completion_mask,
                temperature=tr.recipe.sampling.temperature,
            )
        worst[dtype] = float((lp - ro.logprobs)[mask].abs().max())
        worst[dtype + "/mean"] = float((lp - ro.logprobs)[mask].abs().mean())
    assert worst["float32"] < 1e-5
    assert worst["bfloat16"] < 0.05 and worst["bfloat16/mean"] < 5e-3
    assert worst["bfloat16"] > 10 * worst["float32"]  # the bf16 path did compute in bf16


def test_autocast_hooks_survive_deepcopy_and_peft_and_never_leak(tiny_dir):
    model, _ = load_model(tiny_dir)
    tr = Trainer(
        model,
        build_tiny("tiny")[1],
        get_task("arithmetic"),
        get_recipe("grpo"),
        TrainConfig(model=str(tiny_dir), dtype="bfloat16", lora=Lora(r=4), eval_every=0),
        "/nonexistent",
    )
    ids = torch.tensor([[13, 14, 15]])
    for m in (tr.model, copy.deepcopy(tr.model)):  # the LoRA policy, and a copy (as the KL reference makes)
        seen = []
        layer = next(x for x in m.modules() if type(x).__name__ == "LlamaMLP")
        h = layer.register_forward_hook(lambda mod, a, out: seen.append(out.dtype))  # noqa: B023 - removed below
        logits = m(input_ids=ids).logits
        h.remove()
        assert seen == [torch.bfloat16] and logits.dtype == torch.float32  # decoder bf16, output head float32
        assert not torch.is_autocast_enabled("cpu")
    decoder = base_model(tr.model).get_decoder()
    with pytest.raises(RuntimeError):  # the pre-hook entered autocast, then the embedding refuses float ids
        decoder(input_ids=torch.tensor([[1.5]]))
    assert not torch.is_autocast_enabled("cpu")  # the context was left although the forward raised


def test_a_run_logs_the_rows_it_chose(tiny_dir, tmp_path):
    cfg = TrainConfig(
        model=str(tiny_dir),
        steps=1,
        prompts_per_step=2,
        eval_every=0,
        save_every=0,
        final_eval_problems=0,
        out=str(tmp_path / "run"),
    )
    train_run(cfg, get_recipe("grpo"))
    start = json.loads((tmp_path / "run" / "events.jsonl").read_text().splitlines()[0])
    assert (start["max_rows"], start["micro_batch_size"]) == (512, 64)  # auto, off CUDA
    config = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert config["max_rows"] == config["micro_batch_size"] == "auto"  # a rerun resolves again
