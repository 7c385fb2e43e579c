"""Diagnostics of trained runs: analyses that read runs and models but train nothing."""
