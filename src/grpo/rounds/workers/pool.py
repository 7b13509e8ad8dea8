"""The seam between the learner and its rollout workers: :class:`WorkerPool`, which the
local-process (:mod:`grpo.rounds.workers.local_pool`) and Ray (:mod:`grpo.rounds.workers.ray_pool`)
backends implement, and what both share."""

from __future__ import annotations

from typing import Protocol

import torch

from grpo.rounds.workers.chunks import ChunkRequest, ChunkResult


class WorkerError(RuntimeError):
    """A rollout worker failed for good: its error, or too many restarts."""


class WorkerPool(Protocol):
    """Rollout workers that take weights and requests in order and answer with results."""

    restarts: int  # workers started again after a fault, over the run

    @property
    def workers(self) -> int: ...

    def publish(self, weights: dict[str, torch.Tensor], version: int) -> None:
        """Every worker takes ``weights`` (all, or the trainable ones) as ``version`` between
        its requests: those submitted after this call sample with it."""

    def submit(self, worker: int, request: ChunkRequest) -> None:
        """Queue ``request`` on ``worker``; answered once, even across a restart."""

    def poll(self, timeout_s: float) -> list[ChunkResult]:
        """The results that arrive within ``timeout_s``; faults are handled (restart) or
        raised (:class:`WorkerError`) meanwhile."""

    def close(self) -> None:
        """Stop every worker; nothing is left running. Idempotent."""


class WeightStore:
    """The latest full weights, kept to start a restarted worker from: the first sync is
    the full state, later ones (trainable tensors only) update it."""

    def __init__(self) -> None:
        self.full: dict[str, torch.Tensor] = {}
        self.version: int | None = None

    def update(self, weights: dict[str, torch.Tensor], version: int) -> None:
        self.full = {**self.full, **weights}
        self.version = version


def allow_restart(index: int, why: str, restarts: int, limit: int) -> None:
    """Say that worker ``index`` restarts because ``why``; past ``limit`` restarts over the
    run, fail instead, naming the worker and why."""
    if restarts >= limit:
        raise WorkerError(
            f"rollout worker {index} {why}; {restarts} restarts already, "
            f"rollout.max_worker_restarts = {limit}"
        )
    print(f"grpo: rollout worker {index} {why}; restarting it", flush=True)


def unanswered(outstanding: dict[int, tuple[int, ChunkRequest]], index: int) -> list[ChunkRequest]:
    """Worker ``index``'s unanswered requests, in the order they were issued."""
    return [outstanding[n][1] for n in sorted(outstanding) if outstanding[n][0] == index]
