import pytest

from reasonrl.models import build_tiny
from reasonrl.loop.sft import SFTConfig, sft
from reasonrl.tasks import get_task


@pytest.fixture(scope="session")
def sharp_tiny():
    """The tiny model after a few seconds of supervised warm-up: outputs differ across prompts and
    some end with EOS (a fresh init gives near-uniform logits and repeats one token everywhere)."""
    model, tok = build_tiny("tiny", seed=0)
    sft(model, tok, get_task("arithmetic"), SFTConfig(steps=100, batch_size=32, lr=3e-3, warmup=5, eval_every=0))
    model.eval()
    return model, tok


@pytest.fixture(scope="session")
def tiny_dir(sharp_tiny, tmp_path_factory):
    """The warmed-up tiny model as an HF directory (what `--model` takes)."""
    from reasonrl.models import save_model

    model, tok = sharp_tiny
    return save_model(model, tok, tmp_path_factory.mktemp("tiny_model"))


@pytest.fixture(scope="session")
def chat_model_dir(tmp_path_factory):
    """A real-format chat model directory (byte-level BPE, Qwen-style specials and template, two end
    ids, a tiny random Qwen2), built in about a second (tests/chat_model.py)."""
    from chat_model import build_chat_model_dir

    return build_chat_model_dir(tmp_path_factory.mktemp("chat_model"))


@pytest.fixture(scope="session")
def sharp_mdlm():
    """The shipped masked-diffusion LM (``builtin:diffusion``: warm-started on arithmetic, a few MB)."""
    from reasonrl.models import load_model

    model, tok = load_model("builtin:diffusion")
    return model.eval(), tok
