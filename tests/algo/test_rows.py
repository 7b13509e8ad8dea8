"""Row order across processes: each process's rows together."""

from __future__ import annotations

import torch

from grpo.algo.rows import process_major


def test_process_major_puts_each_process_rows_together() -> None:
    # 3 rounds of 4 rows over 2 processes: process 0 holds rows 0–1, 4–5, 8–9.
    order = process_major(torch.arange(12), rounds=3, world_size=2)
    assert order[:6].tolist() == [0, 1, 4, 5, 8, 9]
    assert order[6:].tolist() == [2, 3, 6, 7, 10, 11]
    assert torch.equal(process_major(torch.arange(6), rounds=3, world_size=1), torch.arange(6))
