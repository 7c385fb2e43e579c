"""Diagnostics of trained runs (layer 4): analyses that read runs and models but train nothing."""
