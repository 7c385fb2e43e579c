"""Beyond one process: torch.distributed data parallelism and Ray rollout workers (beside
the trainer, which sees them only through small interfaces)."""
