"""Several processes (torchrun): the process group, row shards, and the step's collectives.

Launched by torchrun (RANK, WORLD_SIZE, LOCAL_RANK in the environment) the trainer runs one
process per device. Every process samples the same prompts; process r generates, scores
and trains on the rows [r·S, (r+1)·S) of the step's prompts_per_step·G rows (S = rows /
world size), then the per-row results are all-gathered so every process holds the whole
step's rewards and computes the same advantages. Gradients are summed across processes
(DDP or FSDP2); only rank 0 writes.

Without torchrun (WORLD_SIZE unset or 1) :class:`Dist` is the identity: no process group,
no collective, nothing copied, so a single process pays nothing for any of this.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import torch

from grpo.config import ConfigError
from grpo.models.loading import pick_device


def world_from_env() -> tuple[int, int, int]:
    """(rank, world size, local rank) as torchrun sets them; (0, 1, 0) without it.

    A process group the caller already set up (another launcher) counts too.
    """
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        rank, world_size = torch.distributed.get_rank(), torch.distributed.get_world_size()
        devices = max(torch.cuda.device_count(), 1)
        return rank, world_size, int(os.environ.get("LOCAL_RANK", rank % devices))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    return int(os.environ.get("RANK", "0")), world_size, int(os.environ.get("LOCAL_RANK", "0"))


@dataclass
class Dist:
    """This process's place in the job, and the collectives the trainer needs.

    Every collective is the identity when ``world_size == 1``.
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    strategy: str = "ddp"  # "ddp" | "fsdp"
    comm_device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    owns_group: bool = False  # we created the process group, so we destroy it

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def fsdp(self) -> bool:
        return self.enabled and self.strategy == "fsdp"

    def rows(self, total: int) -> slice:
        """This process's contiguous block of ``total`` rows (total divides exactly)."""
        per_rank = total // self.world_size
        return slice(self.rank * per_rank, (self.rank + 1) * per_rank)

    def all_gather_rows(self, tensor_B: torch.Tensor) -> torch.Tensor:
        """Every process's equal-sized ``tensor_B`` concatenated in rank order along dim 0."""
        if not self.enabled:
            return tensor_B
        local = tensor_B.to(self.comm_device).contiguous()
        parts = [torch.empty_like(local) for _ in range(self.world_size)]
        torch.distributed.all_gather(parts, local)
        return torch.cat(parts).to(tensor_B.device)

    def gather_columns(self, columns: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Per-row 1-D tensors of this process's rows → the whole step's, in one collective.

        Values travel as float64, exact for float32 rewards, bools and lengths.
        """
        if not self.enabled:
            return columns
        stacked_BK = torch.stack([c.detach().cpu().double() for c in columns.values()], dim=1)
        gathered_BK = self.all_gather_rows(stacked_BK)
        return {
            name: gathered_BK[:, k].to(column.dtype)
            for k, (name, column) in enumerate(columns.items())
        }

    def broadcast_object(self, value: Any) -> Any:
        """Rank 0's ``value`` on every process (pickled; CPU tensors travel inside it)."""
        if not self.enabled:
            return value
        box = [value]
        torch.distributed.broadcast_object_list(box, src=0)
        return box[0]

    def gather_values(self, values: dict[str, float]) -> dict[str, list[float]]:
        """Each key's value on every process, in rank order (the keys must agree)."""
        if not self.enabled:
            return {key: [value] for key, value in values.items()}
        keys = sorted(values)
        local = torch.tensor([[float(values[key]) for key in keys]], dtype=torch.float64)
        gathered_WK = self.all_gather_rows(local)
        return {key: gathered_WK[:, k].tolist() for k, key in enumerate(keys)}

    def all_agree(self, done: bool) -> bool:
        """True when ``done`` is true on every process (one all-reduce)."""
        if not self.enabled:
            return done
        flag = torch.tensor([0.0 if done else 1.0], device=self.comm_device)
        torch.distributed.all_reduce(flag)
        return flag.item() == 0.0

    def barrier(self) -> None:
        if self.enabled:
            torch.distributed.barrier()

    def close(self, *holders: Any) -> None:
        """Leave the process group; under torchrun, keep ``holders`` (what holds the group:
        the DDP or FSDP model) alive until the process exits.

        Freeing the last holder of a gloo group runs its destructor, which joins gloo's
        worker thread while this thread holds the GIL. When that worker is still dropping
        the last collective's tensors, it waits for the GIL: a deadlock, with the other
        rank already gone (DDP's Reducer freed as ``train`` returned; seen in the test
        suite's 2-process jobs on 2 busy cores). Kept, the group is never destroyed in a
        running interpreter; ``grpo train`` ends a torchrun process with ``os._exit``."""
        if self.enabled:
            _HELD_UNTIL_EXIT.extend(holders)
        if self.owns_group and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
            self.owns_group = False


_HELD_UNTIL_EXIT: list[Any] = []  # Dist.close: holders of a gloo group, never freed


def init_distributed(
    device_name: str, *, strategy: str, backend: str, timeout_s: float
) -> tuple[Dist, torch.device]:
    """Join the torchrun job (or not, without one) and pick this process's device.

    Backend "auto": NCCL when the device is CUDA, gloo otherwise. ``timeout_s``
    bounds how long a collective waits for a process that is gone or stuck, so a job
    whose rank died stops with an error instead of hanging (torchrun also stops the
    other workers as soon as one exits with an error).
    """
    rank, world_size, local_rank = world_from_env()
    device = pick_device(device_name, local_rank if world_size > 1 else None)
    if world_size == 1:
        return Dist(), device
    if backend == "auto":
        backend = "nccl" if device.type == "cuda" else "gloo"
    if backend == "nccl" and device.type != "cuda":
        raise ConfigError("distributed.backend = 'nccl' needs CUDA devices; use 'gloo' on CPU")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    owns_group = not torch.distributed.is_initialized()
    if owns_group:
        torch.distributed.init_process_group(
            backend=backend,
            timeout=timedelta(seconds=timeout_s),
            device_id=device if backend == "nccl" else None,
        )
    comm_device = device if backend == "nccl" else torch.device("cpu")
    dist = Dist(
        rank=rank,
        world_size=world_size,
        local_rank=local_rank,
        strategy=strategy,
        comm_device=comm_device,
        owns_group=owns_group,
    )
    return dist, device
