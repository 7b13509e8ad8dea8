"""The learner's side of asynchronous rollouts (``rollout.mode = "async"``): which rounds
to request and when, and the step's scored rows from what came back, behind the loop's
:class:`~grpo.rounds.source.RoundSource` interface.

Versions count optimizer steps: weights published after step s are version s, and step s
trains on its samples with the weights of version s − 1. A round sampled by version u and
trained at step s is ``lag = s − 1 − u`` versions stale; ``max_staleness`` = k bounds it.

Rounds are requested ahead, in step order, so the workers sample step s + 1 … s + k while
the learner trains step s. With ``stale = "wait"`` a round for step s is requested only
once version s − 1 − k is published (and workers take weights before their next request),
so no sample is ever too stale; at k = 0 this is the synchronous loop, down to the noise
(the learner's generator state travels with the request), so the results are sync's.
With ``stale = "drop"`` rounds are requested one step further ahead; a round that comes
back more than k versions stale is dropped whole (its groups counted) and its prompts
requested again. Dynamic sampling filters on arrival: a step short of informative groups
requests another round then, while the rounds of later steps stay in flight.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

from torch import nn

from grpo.data.sampler import PromptSampler
from grpo.models.weight_sync import sync_bytes, weights_to_sync
from grpo.rounds.source import (
    RoundMaker,
    ScoredRows,
    gather_rows,
    needs_another_round,
)
from grpo.rounds.workers.chunks import (
    ChunkRequest,
    ChunkResult,
    chunk_rows,
    chunks_within,
    join_chunks,
    request_seed,
)
from grpo.rounds.workers.pool import WorkerPool
from grpo.runtime.distributed import Dist

POLL_S = 1.0


@dataclass(frozen=True)
class AsyncSettings:
    max_staleness: int  # k
    stale: str  # "wait" | "drop"
    sync_every: int  # optimizer steps between weight syncs
    seed: int  # the run's: each request's own noise seed derives from it
    prompts_per_step: int
    group_size: int
    max_rounds: int  # rounds per step: > 1 with dynamic sampling
    last_step: int  # train.steps: nothing is requested past it


@dataclass
class _Slot:
    """One requested round: its prompts and its chunks' results as they arrive."""

    step: int
    indices: list[int]
    numbers: list[int]  # its chunks' request numbers, in row order
    results: dict[int, ChunkResult] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        return len(self.results) == len(self.numbers)


class AsyncRounds:
    """Requests rounds from a :class:`WorkerPool` ahead of the learner and hands each step
    its scored rows; syncs the learner's weights to the workers (see the module docstring)."""

    def __init__(
        self,
        pool: WorkerPool | None,
        sampler: PromptSampler,
        maker: RoundMaker,
        settings: AsyncSettings,
        *,
        dist: Dist,
        start_step: int,
        pending: list[list[int]],
        requests_issued: int = 0,
    ) -> None:
        self._pool, self._sampler, self._maker, self._s = pool, sampler, maker, settings
        self._dist = dist
        self._rows = 0  # the last step's rows, for async/samples_per_s
        self._threaded_noise = settings.max_staleness == 0 and settings.stale == "wait"
        self._published, self._trained, self._next_step = -1, start_step, start_step + 1
        self._slots: list[_Slot] = []  # requested and not yet trained on, in request order
        self._by_number: dict[int, _Slot] = {}
        self._replay = deque(pending)  # a checkpoint's requested-not-trained prompts, first
        self.requests_issued, self._rotation = requests_issued, 0
        self._metrics: dict[str, float] = {}
        self._restarts_seen = 0

    # --- weights -----------------------------------------------------------------------

    def start(self, policy: nn.Module) -> None:
        """Send the full weights (the run may resume from a checkpoint) and request ahead."""
        if self._pool is None:
            return
        self._publish(policy, self._trained, full=True)
        self._fill()

    def weights_changed(self, step: int, policy: nn.Module, *, updated: bool) -> None:
        """Step ``step`` is trained: sync when due, then request what the bound now allows."""
        if updated:
            self._maker.engine.sync_weights(policy)  # the learner's own engine (vLLM)
        self._trained = step
        if self._pool is None:
            return
        if step % self._s.sync_every == 0:
            self._publish(policy, step, full=False)
        self._fill()

    def _publish(self, policy: nn.Module, version: int, *, full: bool) -> None:
        started = time.perf_counter()
        weights = weights_to_sync(policy, full=full)
        self._pool.publish(weights, version)
        self._published = version
        self._add("async/sync_s", time.perf_counter() - started)
        self._add("async/sync_bytes", float(sync_bytes(weights)))

    # --- requests ----------------------------------------------------------------------

    def _fill(self) -> None:
        """ChunkRequest the first round of every step the staleness bound allows now."""
        k = self._s.max_staleness
        ahead = k + 1 if self._s.stale == "wait" else k + 2
        while self._next_step <= min(self._trained + ahead, self._s.last_step):
            step = self._next_step
            if self._s.stale == "wait" and self._published < step - 1 - k:
                self._add("async/stale_waits", 1.0)  # held back until fresher weights are out
                return
            self._request(step, self._draw())
            self._next_step += 1

    def _draw(self) -> list[int]:
        if self._replay:
            return list(self._replay.popleft())
        return self._sampler.next_indices(self._s.prompts_per_step)

    def _request(self, step: int, indices: list[int], *, front: bool = False) -> None:
        chunks = chunk_rows(
            len(indices), self._s.group_size, self._pool.workers, self._dist.world_size
        )
        slot = _Slot(step, indices, [])
        generator = self._maker.generator
        for rows in chunks:
            number = self.requests_issued
            self.requests_issued += 1
            noise = (
                generator.get_state()
                if self._threaded_noise
                else request_seed(self._s.seed, number)
            )
            request = ChunkRequest(number, step, indices, self._s.group_size, rows, noise)
            self._pool.submit(self._rotation % self._pool.workers, request)
            self._rotation += 1
            slot.numbers.append(number)
            self._by_number[number] = slot
        self._slots.insert(0, slot) if front else self._slots.append(slot)

    def state_dict(self) -> dict[str, object]:
        """What a resume needs: the prompts requested and not yet trained on, in request
        order (they are requested again first), and the request count (noise seeds)."""
        pending = [slot.indices for slot in self._slots] + [list(i) for i in self._replay]
        return {"pending": pending, "requests_issued": self.requests_issued}

    # --- the step's generation ---------------------------------------------------------

    def next_round(self, step: int) -> tuple[ScoredRows, dict[str, float]]:
        """Step ``step``'s rounds, as :class:`~grpo.rounds.source.SyncRounds` returns them. Under
        torchrun rank 0 holds the pool and sends every process the chunks of its rows."""
        started = time.perf_counter()
        if self._pool is not None:
            rounds, pieces = self._step_rounds(step)
        if self._dist.enabled:
            pieces = self._dist.broadcast_object(pieces if self._pool is not None else None)
            rounds = [self._own_rows(indices, results) for indices, results in pieces]
        waited = time.perf_counter() - started
        self._add("async/learner_idle_s", waited)
        step_rows = ScoredRows.cat(rounds, self._maker.pad_token_id)
        self._rows = step_rows.rows
        return step_rows, {"rollout": waited, "reward": 0.0}

    def _step_rounds(
        self, step: int
    ) -> tuple[list[ScoredRows], list[tuple[list[int], list[ChunkResult]]]]:
        """The step's rounds whole (dropped ones requested again, refills requested as dynamic
        sampling asks), and each one's prompts and chunk results."""
        rounds: list[ScoredRows] = []
        pieces: list[tuple[list[int], list[ChunkResult]]] = []
        while True:
            slot = next(s for s in self._slots if s.step == step)
            self._wait_for(slot)
            self._slots.remove(slot)
            lags = [step - 1 - slot.results[n].version for n in slot.numbers]
            if self._s.stale == "drop" and max(lags) > self._s.max_staleness:
                self._add("async/stale_dropped", float(len(slot.indices)))
                self._request(step, slot.indices, front=True)
                continue
            rounds.append(self._assemble(slot, lags))
            pieces.append((slot.indices, [slot.results[n] for n in slot.numbers]))
            if not needs_another_round(rounds, self._s.prompts_per_step, self._s.max_rounds):
                break
            self._request(step, self._draw(), front=True)  # a refill, ahead of later steps
        self._metrics["async/queue_depth"] = float(sum(s.complete for s in self._slots))
        self._metrics["async/in_flight"] = float(len(self._by_number))
        return rounds, pieces

    def _own_rows(self, indices: list[int], results: list[ChunkResult]) -> ScoredRows:
        """This process's rows of a round, assembled with every process's results."""
        local_rows = self._dist.rows(len(indices) * self._s.group_size)
        local_results = chunks_within(results, local_rows)
        local = join_chunks(local_results, self._maker.pad_token_id)
        return gather_rows(self._maker, local, self._dist)

    def _wait_for(self, slot: _Slot) -> None:
        assert self._pool is not None
        while not slot.complete:
            for result in self._pool.poll(POLL_S):
                owner = self._by_number.pop(result.request.number, None)
                if owner is not None:
                    owner.results[result.request.number] = result
                    self._add("async/worker_idle_s", result.idle_s)
                    self._add("async/worker_busy_s", sum(result.seconds.values()))

    def _assemble(self, slot: _Slot, lags: list[int]) -> ScoredRows:
        results = [slot.results[n] for n in slot.numbers]
        if self._threaded_noise:  # the generator moves on as if this process had sampled
            self._maker.generator.set_state(results[0].generator_state)
        joined = join_chunks(results, self._maker.pad_token_id)
        for result, lag in zip(results, lags, strict=True):
            groups = (result.request.rows.stop - result.request.rows.start) // self._s.group_size
            self._add(f"async/groups_at_lag/{lag}", float(groups))
            self._add("async/_lag_sum", float(lag * groups))
            self._add("async/_groups", float(groups))
            self._metrics["async/version_lag_max"] = max(
                self._metrics.get("async/version_lag_max", 0.0), float(lag)
            )
        return gather_rows(self._maker, joined, Dist())

    def _add(self, key: str, value: float) -> None:
        self._metrics[key] = self._metrics.get(key, 0.0) + value

    def take_metrics(self, step_seconds: float) -> dict[str, float]:
        """The ``async/*`` metrics since the previous call (one step's), then reset; rank 0
        logs the pipeline's, every process the rows it trained on per second."""
        metrics, self._metrics = self._metrics, {}
        if self._pool is None:
            metrics = {}
        else:
            groups = metrics.pop("async/_groups", 0.0)
            lag_sum = metrics.pop("async/_lag_sum", 0.0)
            metrics["async/version_lag_mean"] = lag_sum / groups if groups else 0.0
            metrics["async/worker_restarts"] = float(self._pool.restarts)
            zero_if_none = ("stale_waits", "stale_dropped", "worker_idle_s", "worker_busy_s")
            for key in (f"async/{name}" for name in zero_if_none):
                metrics.setdefault(key, 0.0)
        metrics["async/samples_per_s"] = self._rows / step_seconds
        return metrics

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
