"""Evaluation utilities: sampling metrics and statistics."""
