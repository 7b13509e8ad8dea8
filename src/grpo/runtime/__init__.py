"""What a run stands on: processes and their collectives (``distributed``), DDP/FSDP2
wrapping and full state dicts (``sharding``), the optimizer and LR schedule (``optim``),
checkpoints on disk (``checkpoint``), resuming from them (``resume``), and stopping safely
(``faults``). Nothing here knows GRPO."""
