"""Chunks: the pieces of a round that asynchronous rollout workers sample.

A worker is sent a :class:`ChunkRequest` for rows of a round and answers with a
:class:`ChunkResult` tagged with the policy version that sampled it. A round's rows are cut
into chunks of whole groups, one per worker, so a group is sampled by one version and ages
out as a whole; the chunks are joined back in row order.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from grpo.log.metric_table import reduce_processes
from grpo.rounds.source import ScoredRows, join_blocks


@dataclass(frozen=True)
class ChunkRequest:
    """Rows ``rows`` of the round on prompts ``indices`` (N·G rows in all)."""

    number: int  # issue order over the run: the key of its result
    step: int  # the step that will train on it
    indices: list[int]
    group_size: int
    rows: slice
    # the sampling noise: a generator state to start from (max_staleness 0: the learner's
    # own, so the results are sync's) or a seed of the request's own
    noise: torch.Tensor | int


@dataclass
class ChunkResult:
    """A request's rows, produced and scored by a worker (not yet gathered)."""

    request: ChunkRequest
    rows: ScoredRows
    version: int  # the policy version (optimizer steps) that sampled every row
    generator_state: torch.Tensor  # the noise generator after the request
    worker: int
    seconds: dict[str, float] = field(default_factory=dict)  # rollout, reward
    idle_s: float = 0.0  # the worker's seconds waiting for work since its previous result


def group_chunks(prompts: int, group_size: int, chunks: int) -> list[slice]:
    """Up to ``chunks`` contiguous row slices of whole groups, as even as they can be."""
    chunks = min(chunks, prompts)
    base, extra = divmod(prompts, chunks)
    slices, start = [], 0
    for chunk in range(chunks):
        size = (base + (chunk < extra)) * group_size
        slices.append(slice(start, start + size))
        start += size
    return slices


def chunk_rows(prompts: int, group_size: int, workers: int, processes: int = 1) -> list[slice]:
    """A round's rows cut for ``workers`` workers: whole groups, as even as they can be;
    under torchrun each process's block of rows is cut apart, so that every process joins
    its own chunks (a block that splits a group stays one chunk)."""
    per_process = prompts * group_size // processes
    slices: list[slice] = []
    for process in range(processes):
        start = process * per_process
        if per_process % group_size:
            slices.append(slice(start, start + per_process))
            continue
        per_worker = -(-workers // processes)
        for rows in group_chunks(per_process // group_size, group_size, per_worker):
            slices.append(slice(start + rows.start, start + rows.stop))
    return slices


def chunks_within(results: list[ChunkResult], rows: slice) -> list[ChunkResult]:
    """The chunk results whose rows lie in ``rows`` (one process's block), in row order."""
    return [r for r in results if rows.start <= r.request.rows.start < rows.stop]


def join_chunks(results: list[ChunkResult], pad_token_id: int) -> ScoredRows:
    """A round's chunk results (in row order) as one block of scored rows. The producers'
    and reward runner's metrics combine as equal shards, like processes'."""
    if len(results) == 1:
        return results[0].rows
    parts = [r.rows for r in results]
    return join_blocks(
        parts,
        pad_token_id,
        indices=parts[0].indices,  # every chunk is of the same round
        producer_metrics=_combine([p.producer_metrics for p in parts]),
        score_metrics=_combine([p.local_scores.metrics for p in parts]),
    )


def request_seed(seed: int, number: int) -> int:
    """A request's own noise seed: fixed by the run's seed and the request's number, so a
    request issued again (after a worker restart) samples the same rows."""
    return (seed * 1_000_003 + number * 7_919 + 1) % (2**63 - 1)


def _combine(parts: list[dict[str, float]]) -> dict[str, float]:
    keys = {key for part in parts for key in part}
    return reduce_processes({key: [part.get(key, 0.0) for part in parts] for key in keys})
