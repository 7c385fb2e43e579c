"""The run's configuration: the keys (train: TrainConfig and its sections in sections), the value rules
(rules) and the checks made before anything loads (validate)."""
