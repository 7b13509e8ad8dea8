"""How this process's rows fit into an update whose step is split across processes."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from grpo.rollout.engine import Rollout
from grpo.training.runtime.distributed import Dist
from grpo.training.runtime.sharding import no_sync_context
from grpo.training.update.batch import TrainBatch


@dataclass
class Shard:
    """How this process's rows fit into a step split across processes.

    ``num_sequences``/``num_tokens``: kept sequences and their completion tokens over all
    processes (the loss normalizers). ``micro_batches``: how many forward/backward passes
    every process runs per optimizer step, the largest count of any process. A process with
    fewer real micro-batches (or no rows at all) runs zero-weighted passes on ``filler``
    (any one row), because DDP needs every process to run the gradient-synchronising
    backward, and FSDP every forward (each gathers parameters from all processes).
    ``no_sync``: the context for all but the last backward of an optimizer step, in which
    gradients accumulate locally; the last backward then sums them across processes once.
    """

    num_sequences: int
    num_tokens: int
    micro_batches: int
    filler: TrainBatch
    no_sync: Callable[[], contextlib.AbstractContextManager] | None = None
    all_agree: Callable[[bool], bool] | None = None  # True when true on every process


def update_shard(
    dist: Dist,
    trained: nn.Module,
    keep_B: torch.Tensor,
    lengths_B: torch.Tensor,
    rollout: Rollout,
    sequences_per_micro_batch: int,
) -> Shard | None:
    """How this process's kept rows fit into the step's update (None for one process).

    Every process holds the whole step's keep mask and completion lengths, so each
    computes the global normalizers and every process's micro-batch count itself.
    """
    if not dist.enabled:
        return None
    most_kept = int(keep_B.view(dist.world_size, -1).sum(dim=1).max())
    device = rollout.completion_ids_BT.device
    first_row_B = torch.arange(rollout.completion_ids_BT.shape[0], device=device) == 0
    # This process's row 0, advantage 0; its passes are weighted 0 anyway.
    zero_B = torch.zeros(first_row_B.shape[0], device=device)
    filler = TrainBatch.of(rollout, zero_B, first_row_B).micro_batch(slice(0, 1))
    return Shard(
        num_sequences=int(keep_B.sum()),
        num_tokens=int(lengths_B[keep_B].sum()),
        micro_batches=math.ceil(most_kept / sequences_per_micro_batch),
        filler=filler,
        no_sync=no_sync_context(trained, dist),
        all_agree=dist.all_done,
    )
