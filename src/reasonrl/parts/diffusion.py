"""The policy is a masked-diffusion LM (TraFL, diffu-GRPO): a part that checks it and sets its sampler.

Nothing else changes for such a policy: the run's engine is the LLaDA sampler behind the Generator
protocol (:mod:`reasonrl.rollout.diffusion`, chosen by the model's type), so rewards, groups and
evaluation are the autoregressive path's; the trainer's scoring pass gives d1's one-step per-token
log-probs (:mod:`reasonrl.models.diffusion`), which is what diffu-GRPO's policy loss uses. This
part's ``setup_model`` refuses a causal policy (a clear error instead of silently running GRPO) and
writes its sampler options into the model's config, where the engine reads them for training and
evaluation alike (and the saved ``final/`` keeps them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from torch import nn

from ..errors import UserError
from ..models.diffusion import is_diffusion
from ..rollout.diffusion import REMASKING, sampler_opts
from ..config.rules import Rule, at_least, one_of
from .protocol import ModelSetup, register_part


@register_part("diffusion")
@dataclass(frozen=True)
class Diffusion:
    """LLaDA's sampler settings for the run; None keeps the model's own (its config: ``steps`` =
    canvas / 2, blocks of 8, ``low_confidence`` remasking, as ``reasonrl pretrain --arch diffusion``
    writes them)."""

    PHASE = "model"  # the hook order (parts/registry.py)

    steps: int | None = None  # denoising steps over the whole canvas (split evenly over its blocks)
    block_length: int | None = None  # semi-autoregressive blocks (LLaDA: 32 of 256 at 7B)
    remasking: str | None = None  # low_confidence | random

    RULES: ClassVar[dict[str, Rule]] = {
        "steps": at_least(1),
        "block_length": at_least(1),
        "remasking": one_of(REMASKING),
    }

    def setup_model(self, ctx: ModelSetup) -> tuple[nn.Module, dict[str, float]]:
        model = ctx.model
        if not is_diffusion(model):
            raise UserError(
                "recipe part 'diffusion' (trafl, diffu_grpo) trains a masked-diffusion LM: give --model "
                "builtin:diffusion or a folder `reasonrl pretrain --arch diffusion` wrote"
            )
        for name in ("steps", "block_length", "remasking"):
            value = getattr(self, name)
            if value is not None:
                setattr(model.config, name, value)
        sampler_opts(model.config)  # a canvas the blocks do not divide is a user error now, not at the first rollout
        return model, {}
