"""Row order across generation rounds and processes (pure index arithmetic)."""

from __future__ import annotations

import torch


def process_major(values_B: torch.Tensor, rounds: int, world_size: int) -> torch.Tensor:
    """Rows in generation order (round after round, each split into world_size blocks) →
    each process's rows of every round together, so process r holds block r of the result.

    Example (2 rounds, 2 processes, rows 0–3 then 4–7):
        >>> process_major(torch.arange(8), 2, 2)
        tensor([0, 1, 4, 5, 2, 3, 6, 7])
    """
    return values_B.reshape(rounds, world_size, -1).transpose(0, 1).reshape(-1)
