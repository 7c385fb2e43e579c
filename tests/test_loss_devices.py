"""Tensors that losses/ allocates itself live on the inputs' device. The "meta" device (shapes
without data) stands in for a GPU on a CPU-only machine: a tensor made on the default (CPU) device
meets a meta input and torch refuses the mix, as it would for a CUDA input."""

import pytest
import torch

from reasonrl.losses import corr_po_bonus, lookahead_entropy
from reasonrl.losses.balance import sequence_weight
from reasonrl.losses.corr import spearman_per_row

META = torch.device("meta")


def test_sequence_weight_one_on_the_inputs_device():
    lp = torch.zeros(2, 3, device=META)
    w = sequence_weight(lp, lp, lp, mode="one")
    assert w.device == META and w.shape == (2,)


def test_lookahead_entropy_on_the_inputs_device():
    # the successor ranks (arange over K and T) must be made on the entropy's device
    out = lookahead_entropy(torch.zeros(2, 5, device=META), torch.ones(2, 5, device=META), window=2)
    assert out.device == META and out.shape == (2, 5)


def test_spearman_ranks_on_the_inputs_device():
    # an empty batch skips the per-row ranking (which reads values); the rank buffers still meet the mask
    x = torch.zeros(0, 4, device=META)
    c = spearman_per_row(x, x, x)
    assert c.device == META and c.shape == (0,)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a second device: CUDA")
def test_corr_po_correct_mask_moves_to_the_bonus_device():
    # entropies on the GPU, the verifier's 0/1 on the CPU: correct_only still works.
    # [1, 2, 3] vs [3, 2, 1] -> c = -1, bonus = 0.1 kept for the correct row, 0 for the wrong one
    x = torch.tensor([[1.0, 2.0, 3.0]] * 2, device="cuda")
    y = torch.tensor([[3.0, 2.0, 1.0]] * 2, device="cuda")
    _, bonus, _ = corr_po_bonus(x, y, torch.ones_like(x), correct=torch.tensor([1, 0]), correct_only=True)
    assert bonus.cpu().tolist() == pytest.approx([0.1, 0.0])
