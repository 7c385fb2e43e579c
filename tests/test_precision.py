"""Mixed precision under torch.compile, and the TF32 output head (issue 27, models/memory.py)."""

import pytest
import torch
from torch._dynamo.utils import counters

from reasonrl.models import build_tiny, memory
from reasonrl.models.memory import install_tf32_head, prepare_for_training, tf32_matmuls


def fresh_compile():
    torch._dynamo.reset()
    counters.clear()


def test_a_mixed_precision_forward_compiles_as_one_graph():
    # the forward hooks that entered and left autocast failed here: "'autocast' object has no
    # attribute 'prev'" (dynamo kept the enter's effect, not the context's state)
    model, _ = build_tiny("tiny")
    prepare_for_training(model, "bfloat16", master_fp32=True, checkpointing=False)
    install_tf32_head(model)  # the plain head off CUDA: traced through, no graph break
    ids = torch.tensor([[13, 14, 15]])
    fresh_compile()
    with torch.no_grad():
        eager = model(input_ids=ids).logits
        compiled = torch.compile(lambda x: model(input_ids=x).logits, backend="aot_eager")(ids)
    assert counters["stats"]["unique_graphs"] == 1 and not counters["graph_break"]
    assert compiled.dtype == eager.dtype == torch.float32  # the head float32, the decoder bf16
    assert torch.equal(compiled, eager)
    assert not torch.is_autocast_enabled("cpu")


@torch.library.custom_op("reasonrl_tests::tf32_in_effect", mutates_args=())
def tf32_in_effect(x: torch.Tensor) -> torch.Tensor:
    """x + 1 where CUDA float32 matmuls are TF32 when this op runs, else x."""
    return x + (1.0 if torch.backends.cuda.matmul.fp32_precision == "tf32" else 0.0)


@tf32_in_effect.register_fake
def _(x):
    return torch.empty_like(x)


class Probe(torch.nn.Module):
    def forward(self, x):
        return tf32_in_effect(x)


def test_tf32_matmuls_sets_the_flag_and_restores_it_on_error():
    before = torch.backends.cuda.matmul.fp32_precision
    with pytest.raises(KeyError):
        with tf32_matmuls():
            assert torch.backends.cuda.matmul.fp32_precision == "tf32"
            raise KeyError("inside")
    assert torch.backends.cuda.matmul.fp32_precision == before


def test_the_tf32_head_runs_outside_a_compiled_graph():
    # why install_tf32_head keeps the head's call out of a compiled graph: dynamo drops a flag set
    # inside a compiled region (torch's legacy allow_tf32, set there, is not in effect when the
    # graph runs: the probe op reads it then; the newer fp32_precision getter breaks the graph)
    def legacy_inside(x):
        torch.backends.cuda.matmul.allow_tf32 = True
        out = tf32_in_effect(x)
        torch.backends.cuda.matmul.allow_tf32 = False
        return out

    zero, before = torch.zeros(1), torch.backends.cuda.matmul.fp32_precision
    fresh_compile()
    try:
        assert legacy_inside(zero).item() == 1.0  # eager: in effect
        assert torch.compile(legacy_inside, backend="aot_eager")(zero).item() == 0.0  # compiled: silently not
    finally:
        torch.backends.cuda.matmul.fp32_precision = before
    # the head's TF32 call, inside a compiled function, runs eagerly with the flag on, then restores it
    fresh_compile()
    assert torch.compile(lambda x: memory._tf32_call(Probe(), x), backend="aot_eager")(zero).item() == 1.0
    assert torch.backends.cuda.matmul.fp32_precision == before
