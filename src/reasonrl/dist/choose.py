"""The run's strategy by name (``dist.strategy``): above both, so neither imports the other."""
from __future__ import annotations

from .fsdp import Sharded
from .group import Single
from .strategy import Replicated


def make_strategy(name: str, group: Single) -> Replicated:
    """``fsdp`` shards only over several processes: in one there is nothing to shard, and the plain
    model is what FSDP over one rank would compute (so a sharded run's checkpoint resumes in one)."""
    if name == "fsdp" and group.world > 1:
        return Sharded(group)
    return Replicated(group)
