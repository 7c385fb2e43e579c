"""Weight sync into the vLLM engine (issue 43): after a training step and its push, vLLM scores a fixed
completion as the updated model does and samples from the updated model even for a prompt it had cached;
full weights, a tied output head and LoRA (merged); ``rollout.sync_every`` and the staleness it logs; the
mismatch metrics and the trainer's own old log-probs. Run in the vLLM environment (``pytest -m vllm``)."""

import dataclasses

import pytest
import torch

from reasonrl.config.train import TrainConfig
from reasonrl.models import load_model
from reasonrl.recipes import get_recipe
from reasonrl.rollout import SamplingParams
from reasonrl.config.sections import Lora, RolloutOpts, VLLMOpts
from reasonrl.tasks import get_task
from vllm_helpers import NEEDS_VLLM, gap, needs_real_model, real_model_dir

pytestmark = NEEDS_VLLM
FIXED_PROMPT, FIXED_COMPLETION = "12+7=", "12+7+0=19\nA:19"


def _trainer(
    tmp_path, model, tok, *, lora: int = 0, sync_every: int = 1, minibatches: int = 1, steps: int = 3, kv: float = 0.25
):
    """A grpo trainer on arithmetic with the vLLM engine; lr 1e-3 and an entropy bonus, so every step moves
    the weights (an entropy term has a gradient even when every group's rewards are equal)."""
    from reasonrl.loop.trainer import Trainer

    r = get_recipe("grpo")
    recipe = dataclasses.replace(
        r,
        group_size=4,
        entropy_coef=0.01,
        optim=dataclasses.replace(r.optim, lr=1e-3, warmup_steps=0, minibatches=minibatches),
        sampling=dataclasses.replace(r.sampling, max_new_tokens=24),
    )
    cfg = TrainConfig(
        steps=steps,
        prompts_per_step=2,
        eval_every=0,
        save_every=0,
        max_rows=64,
        micro_batch_size=8,
        lora=Lora(r=lora),
        rollout=RolloutOpts(engine="vllm", sync_every=sync_every, vllm=VLLMOpts(kv_cache_gib=kv)),
    )
    return Trainer(model, tok, get_task("arithmetic"), recipe, cfg, tmp_path)


def _vllm_scores(engine, prompt: list[int], completion: list[int]) -> torch.Tensor:  # -> (len(completion),)
    """vLLM's log-probs of a fixed completion after a prompt (``prompt_logprobs``: temperature 1)."""
    sp = engine.vllm.SamplingParams(max_tokens=1, temperature=0, prompt_logprobs=0)
    out = engine.llm.generate([engine.tokens_prompt(prompt_token_ids=prompt + completion)], sp, use_tqdm=False)[0]
    return torch.tensor([out.prompt_logprobs[len(prompt) + i][t].logprob for i, t in enumerate(completion)])


@torch.no_grad()
def _model_scores(model, prompt: list[int], completion: list[int]) -> torch.Tensor:
    was = model.training
    model.eval()
    logits = model(input_ids=torch.tensor([prompt + completion])).logits[0, len(prompt) - 1 : -1]
    model.train(was)
    return logits.log_softmax(-1).gather(-1, torch.tensor(completion)[:, None]).squeeze(-1)


def _fixed(tok):
    return tok(FIXED_PROMPT)["input_ids"], tok(FIXED_COMPLETION, add_special_tokens=False)["input_ids"]


# long enough to fill whole KV blocks (only those are cached: 128 tokens a block on the CPU backend)
LONG_PROMPT = "".join(f"{a}+{a + 1}={2 * a + 1}\n" for a in range(10, 40)) + "12+7="


def _cached_rows(engine):
    """Rows of a long prompt: the second call after a push finds its blocks in the prefix cache."""
    return engine.generate([LONG_PROMPT], 4, SamplingParams(temperature=1.0, max_new_tokens=16), seeds=[9])


def test_after_a_step_and_a_push_vllm_scores_a_fixed_completion_as_the_updated_model(tmp_path):
    model, tok = load_model(None)  # a tied output head: pushed under its own name too
    trainer = _trainer(tmp_path, model, tok)
    engine, (prompt, completion) = trainer.engine, _fixed(tok)
    try:
        before = _vllm_scores(engine, prompt, completion)
        assert torch.allclose(before, _model_scores(model, prompt, completion), atol=1e-4)
        _cached_rows(engine)  # the fixed prompt's blocks now in the prefix cache, from the old weights
        m = trainer.train_step()  # one optimiser step, then the push
        after, want = _vllm_scores(engine, prompt, completion), _model_scores(model, prompt, completion)
        assert float((want - before).abs().max()) > 1e-2  # the step moved the model: the check below means something
        assert torch.allclose(after, want, atol=1e-4)
        ro = _cached_rows(engine)
        assert gap(model, ro, 1.0) < 1e-4  # the prefix cache was reset with the push
        assert ro.extras["metrics"]["time/vllm_sync"] > 0  # the push's seconds, logged with the next generation
        assert engine.version == 1 and m["rollout/weight_version"] == 0.0 and m["rollout/staleness"] == 0.0
        m = trainer.train_step()
        assert m["rollout/weight_version"] == 1.0
        assert m["mismatch/dlogp_abs_max"] < 1e-4 and m["mismatch/capped_frac"] == 0.0  # fp32: no gap to correct
        assert m["loss/ratio_mean"] == pytest.approx(1.0, abs=1e-6)  # old policy: the trainer's own log-probs
    finally:
        engine.close()


def test_a_lora_policy_is_pushed_with_its_adapters_merged(tmp_path):
    model, tok = load_model(None)
    trainer = _trainer(tmp_path, model, tok, lora=4)
    engine, (prompt, completion) = trainer.engine, _fixed(tok)
    try:
        before = _vllm_scores(engine, prompt, completion)
        trainer.train_step()
        trainer.train_step()  # B = 0 at init: the first step moves B, the second moves the product
        want = _model_scores(trainer.model, prompt, completion)
        assert float((want - before).abs().max()) > 1e-4
        assert torch.allclose(_vllm_scores(engine, prompt, completion), want, atol=1e-4)
    finally:
        engine.close()


def test_sync_every_two_steps_leaves_the_engine_a_step_stale_and_logs_it(tmp_path):
    model, tok = load_model(None)
    trainer = _trainer(tmp_path, model, tok, sync_every=2, minibatches=2, steps=4)
    engine, (prompt, completion) = trainer.engine, _fixed(tok)
    try:
        first = _vllm_scores(engine, prompt, completion)
        m1 = trainer.train_step()  # two optimiser steps: version 2 >= sync_every, pushed
        assert engine.version == 2 and m1["rollout/weight_version"] == 0.0
        assert torch.allclose(
            _vllm_scores(engine, prompt, completion), _model_scores(model, prompt, completion), atol=1e-4
        )
        assert float((first - _model_scores(model, prompt, completion)).abs().max()) > 1e-2
        # minibatches=2: the old log-probs are the trainer's at sampling, computed before the first update, so
        # the second minibatch's ratio is not 1
        m2 = trainer.train_step()
        assert m2["rollout/weight_version"] == 2.0 and m2["rollout/staleness"] == 0.0
        assert m2["loss/ratio_max"] > 1.0 + 1e-6 or m2["loss/ratio_mean"] != pytest.approx(1.0, abs=1e-7)

        trainer.engine.sync_every = 4  # four optimiser steps between pushes: the next update does not push
        trainer.train_step()
        assert engine.version == 4
        m4 = trainer.train_step()
        assert m4["rollout/weight_version"] == 4.0 and m4["rollout/staleness"] == 2.0  # sampled 2 steps behind
    finally:
        engine.close()


@pytest.mark.slow
@needs_real_model()
def test_the_real_model_after_a_step_and_a_push(tmp_path):
    """SmolLM2-135M-Instruct: a real training step, its push, the fixed completion scored alike."""
    model, tok = load_model(real_model_dir())
    trainer = _trainer(tmp_path, model, tok, kv=0.5)
    engine = trainer.engine
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "What is 12+7?"}], add_generation_prompt=True, tokenize=False
    )
    prompt, completion = tok(prompt)["input_ids"], tok("12 + 7 = 19.<|im_end|>", add_special_tokens=False)["input_ids"]
    try:
        before = _vllm_scores(engine, prompt, completion)
        assert torch.allclose(before, _model_scores(model, prompt, completion), atol=1e-4)
        trainer.train_step()
        want = _model_scores(model, prompt, completion)
        assert float((want - before).abs().max()) > 1e-3
        assert torch.allclose(_vllm_scores(engine, prompt, completion), want, atol=1e-4)
    finally:
        engine.close()
