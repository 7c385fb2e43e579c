"""Bradley-Terry reward-model training (``reasonrl rm train``), beside :mod:`reasonrl.loop.sft`.

A causal LM (the shipped base, ``tiny:<size>``, any HF directory) becomes an HF sequence-classification
model with one label: its decoder's weights, a fresh score head (seeded). Each step draws
``batch_size`` preference pairs, scores the chosen and the rejected completion in one forward, and
minimises :func:`reasonrl.losses.value.bt_loss` (``-log sigmoid(r_c - r_r - margin)`` plus the
optional centring term; TRL's ``RewardTrainer`` loss). Pairs are split by a hash of their prompt,
so the held-out pairwise accuracy (the share of held-out pairs scored the right way round) is read
on prompts never trained on; it is reported before and after training and written to
``rm_metrics.json`` beside the model. The output directory loads as a reward
(:class:`reasonrl.models.reward_model.RMReward`, ``rewards.rm.model=DIR``).
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from .checkpoint import atomic_write_text
from ..data.preferences import split_pairs
from ..errors import UserError
from ..losses.value import bt_loss
from ..models import load_model
from ..models.lora import base_model
from ..models.reward_model import HFRewardModel, encode_pairs
from .schedule import lr_lambda


@dataclass(frozen=True)
class RMConfig:
    model: str | None = None  # the causal LM to start from (None: the shipped base)
    steps: int = 300
    batch_size: int = 32  # pairs per step
    lr: float = 1e-4
    weight_decay: float = 0.0
    warmup: int = 10
    eval_frac: float = 0.1  # share of prompts held out
    margin: float = 0.0  # added to each pair's own margin column
    center_coef: float = 0.0  # TRL's center_rewards_coefficient (0.01 suggested there); 0: off
    max_length: int = 1024
    seed: int = 0


def new_reward_model(name: str | None, seed: int) -> HFRewardModel:
    """A one-label sequence classifier with the decoder weights of causal LM ``name`` and a seeded head."""
    from transformers import AutoModelForSequenceClassification

    lm, tok = load_model(name)
    config = base_model(lm).config
    config.num_labels, config.pad_token_id = 1, tok.pad_token_id
    torch.manual_seed(seed)
    model = AutoModelForSequenceClassification.from_config(config)
    getattr(model, model.base_model_prefix).load_state_dict(base_model(lm).get_decoder().state_dict())
    return HFRewardModel(model.float().train(), tok)


def score_pairs(rm: HFRewardModel, pairs: list[dict], max_length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(P,) chosen and (P,) rejected scores of ``pairs`` from one forward (grad when enabled)."""
    prompts = [p["prompt"] for p in pairs]
    ids, mask = encode_pairs(
        rm.tok, prompts * 2, [p["chosen"] for p in pairs] + [p["rejected"] for p in pairs], max_length
    )
    scores = rm.forward(ids, mask)  # (2P,)
    return scores[: len(pairs)], scores[len(pairs) :]


@torch.no_grad()
def pairwise_accuracy(rm: HFRewardModel, pairs: list[dict], max_length: int, batch: int = 64) -> float | None:
    """The share of ``pairs`` whose chosen completion scores higher (None without pairs)."""
    if not pairs:
        return None
    right = 0
    for s in range(0, len(pairs), batch):
        c, r = score_pairs(rm, pairs[s : s + batch], max_length)
        right += int((c > r).sum())
    return right / len(pairs)


def train_rm(
    pairs: list[dict[str, Any]], cfg: RMConfig, out: str | Path, log: Callable[[dict], None] = lambda m: None
) -> dict[str, Any]:
    """Train on ``pairs`` (:func:`reasonrl.data.preferences.read_pairs`), save the model to ``out``,
    return (and write as ``out/rm_metrics.json``) the held-out accuracies and the run's numbers."""
    train, held = split_pairs(pairs, cfg.eval_frac, cfg.seed)
    if not train:
        raise UserError(
            f"all {len(pairs)} pairs fell in the held-out split (eval_frac={cfg.eval_frac}): give pairs "
            "of more prompts or a smaller --eval-frac"
        )
    rm = new_reward_model(cfg.model, cfg.seed)
    before = pairwise_accuracy(rm, held, cfg.max_length)
    params = [p for p in rm.model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(cfg.warmup, cfg.steps, "cosine", 0.1))
    rng, order, t0, recent = random.Random(cfg.seed), [], time.perf_counter(), []
    for step in range(1, cfg.steps + 1):
        if len(order) < cfg.batch_size:  # a fresh seeded permutation per pass over the training pairs
            order += rng.sample(range(len(train)), len(train))
        batch, order = [train[i] for i in order[: cfg.batch_size]], order[cfg.batch_size :]
        c, r = score_pairs(rm, batch, cfg.max_length)
        margin = torch.tensor([p["margin"] for p in batch], device=c.device) + cfg.margin
        loss, metrics = bt_loss(c, r, margin=margin, center_coef=cfg.center_coef)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        recent = (recent + [metrics["rm/accuracy"]])[-50:]
        log({"step": step, **metrics})
    rm.model.eval()
    result = {
        "pairs": len(pairs),
        "train_pairs": len(train),
        "heldout_pairs": len(held),
        "heldout_accuracy_before": before,
        "heldout_accuracy": pairwise_accuracy(rm, held, cfg.max_length),
        "train_accuracy_last50": sum(recent) / max(len(recent), 1),
        "seconds": time.perf_counter() - t0,
        "config": asdict(cfg),
    }
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rm.model.save_pretrained(out, safe_serialization=True)
    rm.tok.save_pretrained(out)
    atomic_write_text(out / "rm_metrics.json", json.dumps(result, indent=2))
    return result
