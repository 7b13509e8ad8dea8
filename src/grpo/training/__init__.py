"""The training loop in typed stages, the update, optimizer, checkpoints, faults, torchrun."""
