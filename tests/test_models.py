import json
import subprocess
import sys

import pytest
import torch

from reasonrl.models import base_model_path, build_char_tokenizer, build_tiny, load_model, n_params, save_model
from reasonrl.models import loading


def test_char_tokenizer_round_trips_every_printable_character():
    tok = build_char_tokenizer()
    text = "Q: 12+ 7=?\n\tx{y}\\boxed{-3} <answer>ok</answer>"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert len(ids) == len(text)  # one token per character
    assert tok.decode(ids) == text
    assert tok.unk_token_id not in ids
    assert (tok.pad_token_id, tok.eos_token_id) == (0, 1)


@pytest.mark.parametrize("size,low,high", [("tiny", 0.35e6, 0.5e6), ("small", 3.2e6, 3.7e6)])
def test_tiny_sizes(size, low, high):
    model, _ = build_tiny(size)
    assert low < n_params(model) < high
    assert model.config.model_type == "llama"


def test_shipped_base_loads_with_plain_transformers_and_fits_8mb():
    path = base_model_path()
    assert (path / "model.safetensors").stat().st_size <= 8 * 2**20
    code = (
        "import sys, transformers\n"
        f"m = transformers.AutoModelForCausalLM.from_pretrained({str(path)!r})\n"
        f"t = transformers.AutoTokenizer.from_pretrained({str(path)!r})\n"
        "assert 'reasonrl' not in sys.modules\n"
        "ids = t('12+3=?\\n', return_tensors='pt')\n"
        "print(m(**ids).logits.shape[-1], len(t))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-2:] == ["100", "100"]


def test_save_half_and_load_back_as_float32(tmp_path):
    model, tok = build_tiny("tiny")
    save_model(model, tok, tmp_path, dtype=torch.float16)
    loaded, tok2 = load_model(tmp_path)
    assert next(loaded.parameters()).dtype == torch.float32
    assert json.loads((tmp_path / "config.json").read_text())["dtype"] == "float16"
    w, w2 = model.model.embed_tokens.weight, loaded.model.embed_tokens.weight
    assert torch.allclose(w, w2, atol=1e-3) and not torch.equal(w, w2)  # fp16 rounding, nothing more
    assert tok2.padding_side == "left"


def test_bad_model_names_fail_clearly(monkeypatch):
    with pytest.raises(FileNotFoundError, match="neither a local directory nor a hub id"):
        load_model("./no/such/dir")
    with pytest.raises(ValueError, match="unknown tiny-model size 'huge'"):
        load_model("tiny:huge")

    def offline(*args, **kwargs):
        raise OSError("We couldn't connect to the hub")

    monkeypatch.setattr(loading.AutoModelForCausalLM, "from_pretrained", offline)
    with pytest.raises(OSError, match="hub id needs network access.*local HF model directory"):
        load_model("someone/some-model")
