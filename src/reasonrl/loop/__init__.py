"""The training loop: the run (run), one step (trainer, batch, stepdata, runtime, schedule), its state
(checkpoint, warmstart), the supervised loops (sft, rm_train) and the run's outputs (tracking, plots)."""
