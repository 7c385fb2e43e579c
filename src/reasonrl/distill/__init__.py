"""Teacher signals: the same model under another context, and later other models.
Pure divergence maths lives in :mod:`reasonrl.losses.divergence`."""

from .context import ContextScores, encode_contexts, score_under_context

__all__ = ["ContextScores", "encode_contexts", "score_under_context"]
