"""``reasonrl train --nproc N``: start N ranks with torchrun on this machine (the standard launcher;
several machines use torchrun's own rendezvous flags directly, see the README)."""
from __future__ import annotations

import subprocess
import sys


def torchrun_command(nproc: int, args: list[str]) -> list[str]:
    """``python -m torch.distributed.run --standalone --nproc-per-node N -m reasonrl ARGS``:
    ``--standalone`` picks a free local rendezvous port, so two runs on one machine do not clash."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
            "-m", "reasonrl", *args]


def launch(nproc: int, args: list[str]) -> int:
    """Run the ranks to completion; torchrun stops them all when one fails. Returns the exit status."""
    return subprocess.call(torchrun_command(nproc, args))
