"""reasonrl: reinforcement-learning post-training of language models on verifiable reasoning tasks."""

__version__ = "0.1.0"


def __getattr__(name: str):
    """``reasonrl.train`` and ``reasonrl.TrainResult`` (:mod:`reasonrl.api`), imported on first use: ``import
    reasonrl`` stays light (the command line imports torch and transformers only when a command needs them)."""
    if name in ("train", "TrainResult"):
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'reasonrl' has no attribute {name!r}")
