"""Models: the embedded tiny reasoner, loading/saving any HF causal LM, and token scoring."""

from . import judge_lm  # noqa: F401 - registers the judge reward's hf: backend
from .loading import (
    BASE_DIR,
    DTYPES,
    base_model_path,
    load_model,
    load_tokenizer,
    resolve_device,
    resolve_dtype,
    save_model,
)
from .scoring import logprobs_and_entropy, score_completions
from .tiny import SIZES, build_tiny, n_params, tiny_config
from .tokenizer import build_char_tokenizer

__all__ = [
    "BASE_DIR",
    "DTYPES",
    "resolve_device",
    "resolve_dtype",
    "SIZES",
    "base_model_path",
    "build_char_tokenizer",
    "build_tiny",
    "load_model",
    "load_tokenizer",
    "logprobs_and_entropy",
    "n_params",
    "save_model",
    "score_completions",
    "tiny_config",
]
