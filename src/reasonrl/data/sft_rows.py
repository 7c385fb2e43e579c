"""Supervised rows: (prompt, demonstration) items as padded ``input_ids`` / ``labels`` with the prompt
ignored. A pure collation, below the parts, so a part's warm start (VPD's teacher) and ``reasonrl sft``
share it."""

from __future__ import annotations

import torch

from ..tasks import Item

IGNORE = -100  # the label Hugging Face's loss skips


def sft_batch(items: list[Item], tokenizer) -> dict[str, torch.Tensor]:
    """Right-padded ``input_ids``, ``attention_mask`` and ``labels`` (prompt tokens ignored)."""
    rows = []
    for it in items:
        if it.demo is None:
            raise ValueError(f"item {it.key!r} has no demonstration; pretraining needs a task that provides them")
        p = tokenizer(it.prompt, add_special_tokens=False)["input_ids"]
        c = tokenizer(it.demo, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        rows.append((p + c, [IGNORE] * len(p) + c))
    width = max(len(ids) for ids, _ in rows)
    pad = tokenizer.pad_token_id
    ids = torch.tensor([r + [pad] * (width - len(r)) for r, _ in rows])
    labels = torch.tensor([lab + [IGNORE] * (width - len(lab)) for _, lab in rows])
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r, _ in rows])
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}
