"""Reward models backed by HF directories, and the reward that scores rollouts with one.

Two kinds of directory score a (prompt, completion) pair with one scalar:

* an HF **sequence-classification** model with one label (``AutoModelForSequenceClassification``;
  what ``reasonrl rm train`` writes, what TRL's ``RewardTrainer`` writes): the score head read at
  the last token;
* a **causal LM with a value head**: a decoder directory beside ``value_head.safetensors``
  (:func:`reasonrl.models.critic.save_critic` writes one): the head read at the last token.

The text scored is ``prompt + completion`` (no template: the tiny reasoner and GRLO's base models
read plain text), left-padded, with positions from the attention mask so padding never moves a
score; a row longer than ``max_length`` tokens keeps its end (where the answer is).
:class:`RMReward` is the reward a recipe lists (TRL's contract), the model loaded once per process.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import torch

from ..errors import MissingPathError, UserError
from ..rewards.base import Reward, RewardResult
from ..rewards.length import completion_lengths
from ..rewards.preference import style_mix
from .critic import HEAD_FILE, ValueHead
from .loading import load_tokenizer, resolve_device
from .scoring import _positions

_CACHE: dict[tuple[str, str], "HFRewardModel"] = {}


def encode_pairs(
    tok, prompts: Sequence[str], completions: Sequence[str], max_length: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(N,) prompts and completions -> (N, L) left-padded ids of ``prompt + completion`` and their mask."""
    side = tok.truncation_side
    tok.truncation_side = "left"  # keep the end of a long row: the answer and the last token the score is read at
    try:
        enc = tok(
            [p + c for p, c in zip(prompts, completions)],
            return_tensors="pt",
            padding=True,
            truncation=True,
            max_length=max_length,
            add_special_tokens=False,
        )
    finally:
        tok.truncation_side = side
    return enc["input_ids"], enc["attention_mask"]


class HFRewardModel:
    """A reward model directory loaded for scoring (or training, :mod:`reasonrl.loop.rm_train`)."""

    def __init__(
        self, model: torch.nn.Module, tok, head: ValueHead | None = None, max_length: int = 1024, batch_size: int = 64
    ):
        self.model, self.tok, self.head = model, tok, head
        self.max_length, self.batch_size = max_length, batch_size

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """(N, L) left-padded ids and mask -> (N,) scores, with grad when enabled."""
        device = next(self.model.parameters()).device
        ids, mask = ids.to(device), mask.to(device)
        kw = {"input_ids": ids, "attention_mask": mask, "position_ids": _positions(mask), "use_cache": False}
        if self.head is None:  # sequence classification: HF reads its head at the last non-pad token
            return self.model(**kw).logits[:, 0].float()
        return self.head(self.model(**kw).last_hidden_state[:, -1]).float()  # left-padded: the last real token

    @torch.no_grad()
    def score(self, prompts: Sequence[str], completions: Sequence[str]) -> list[float]:
        """One scalar per (prompt, completion) pair (the :class:`~reasonrl.rewards.preference.RewardModel` protocol)."""
        if len(prompts) != len(completions):
            raise ValueError(f"score got {len(prompts)} prompts for {len(completions)} completions")
        out: list[float] = []
        for s in range(0, len(prompts), self.batch_size):
            ids, mask = encode_pairs(
                self.tok, prompts[s : s + self.batch_size], completions[s : s + self.batch_size], self.max_length
            )
            out += self.forward(ids, mask).cpu().tolist()
        return out


def load_reward_model(path: str, device: str = "cpu", max_length: int = 1024, batch_size: int = 64) -> HFRewardModel:
    """A reward model directory (either kind, see the module notes), frozen, in eval mode."""
    from transformers import AutoConfig, AutoModel, AutoModelForSequenceClassification

    folder = Path(path)
    if not (folder / "config.json").is_file():
        raise MissingPathError(
            f"reward model {path!r} is not an HF model directory (no config.json); train one with "
            "`reasonrl rm train --pairs PAIRS.jsonl --out DIR`"
        )
    tok = load_tokenizer(folder)
    head = None
    if (folder / HEAD_FILE).is_file():
        from safetensors.torch import load_model as load_weights

        model = AutoModel.from_pretrained(str(folder), dtype=torch.float32)
        head = ValueHead(model.config.hidden_size)
        load_weights(head, str(folder / HEAD_FILE))
        head = head.to(device)
    else:
        labels = AutoConfig.from_pretrained(str(folder)).num_labels
        if labels != 1:
            raise UserError(
                f"reward model {path!r} is a classifier with {labels} labels; a reward model has one "
                "(num_labels=1), or a value_head.safetensors beside a causal LM"
            )
        model = AutoModelForSequenceClassification.from_pretrained(str(folder), dtype=torch.float32)
    model.config.pad_token_id = tok.pad_token_id
    for m in (model, head):
        if m is not None:
            m.to(device).eval().requires_grad_(False)
    return HFRewardModel(model, tok, head, max_length, batch_size)


def cached_reward_model(path: str, device: str, max_length: int, batch_size: int) -> HFRewardModel:
    key = (str(Path(path).resolve()), device)
    if key not in _CACHE:
        _CACHE[key] = load_reward_model(path, device, max_length, batch_size)
    rm = _CACHE[key]
    rm.max_length, rm.batch_size = max_length, batch_size
    return rm


@dataclass(frozen=True)
class RMReward(Reward):
    """A reward model's score as the reward (``rewards.rm.model=DIR``), optionally with GRLO's inferred
    length control (``length_coef > 0``: ``score - length_coef * max(0, L - length_target) / length_target``,
    L in tokens; spec envs-selfplay-eval 8 (c), [inferred])."""

    model: str = ""  # a reward model directory (reasonrl rm train writes one)
    length_coef: float = 0.0  # 0: the score alone (style_mix off)
    length_target: int = 64
    batch_size: int = 64
    max_length: int = 1024
    device: str = "auto"

    name = "rm"

    def problems(self) -> list[str]:
        """Checked with the run's config, before any model loads
        (:func:`reasonrl.config.run_checks.reward_problems`)."""
        if not self.model:
            return [
                "config key 'rewards.rm.model' is not set: give a reward model directory (train one with "
                "`reasonrl rm train --pairs PAIRS.jsonl --out DIR`, docs/ppo.md)"
            ]
        if not (Path(self.model) / "config.json").is_file():
            return [f"config key 'rewards.rm.model' = {self.model!r} is not a reward model directory (no config.json)"]
        return []

    def score(self, prompts: Sequence[str], completions: Sequence[str], **columns: Any) -> RewardResult:
        if self.problems():
            raise UserError(self.problems()[0])
        rm = cached_reward_model(self.model, resolve_device(self.device), self.max_length, self.batch_size)
        raw = rm.score(prompts, completions)
        lengths, _ = completion_lengths(completions, columns)
        values = style_mix(raw, lengths, self.length_coef, self.length_target)
        n = max(len(raw), 1)
        return RewardResult(
            values,
            {"reward/rm/score": sum(raw) / n, "reward/rm/length_penalty": sum(r - v for r, v in zip(raw, values)) / n},
        )
