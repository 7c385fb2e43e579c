"""reasonrl: reinforcement-learning post-training of language models on verifiable reasoning tasks."""
__version__ = "0.1.0"
