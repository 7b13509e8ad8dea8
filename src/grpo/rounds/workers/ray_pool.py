"""Rollout workers as Ray actors (``rollout.backend = "ray"``), on this machine or spread
over a cluster's nodes. The semantics are :class:`~grpo.rounds.workers.local_pool.LocalPool`'s.

Ordering: an actor runs its method calls one at a time, in the order they were made (Ray's
default for an actor without ``max_concurrency``), so a worker takes weights and requests in
submission order and switches versions only between requests. Weights are put in the object
store once per publish and every actor is handed the same reference.

Faults: the pool keeps every call's reference, per worker in call order. A call that fails
because its actor died (killed, its process or node lost) restarts the worker: a new actor,
the latest full weights, then its unanswered requests in their order. So does a call that
runs longer than ``timeout_s``, the actor killed first; a call's start is taken as when the
pool saw the one before it end, never earlier than the truth, so nothing is killed early.
Starting (placing the actor, building the worker) has no limit, as a local worker's has
none; an actor that no node has room for is reported by Ray itself, on the console. After
``max_restarts`` restarts the run fails, naming the worker and why. An exception raised in
a worker fails the run with the worker's traceback; a reward's or environment's is the
learner's own error (its line and the user's frames), as in a synchronous run.

Connecting (when Ray is not initialised yet): ``rollout.ray_address`` is ``ray.init``'s
address. "" leaves it unset, which Ray resolves in order: the ``RAY_ADDRESS`` environment
variable, else the latest cluster ``ray start`` started on this machine, else a new local
instance. "auto" is the same but fails rather than start one; "host:port" or
"ray://host:port" is that cluster; "local" always starts a new local instance. Every node
needs this environment (grpo and the model directory at the same path); only the driver
reads the data and checkpoints.

Logs: ``log_to_driver=False`` keeps the workers' output (per-actor lines from every node)
out of the learner's console; it stays in the session's logs (``/tmp/ray/session_latest/
logs`` on each node). What the learner needs reaches it anyway: a worker's error as a
:class:`WorkerError` with its traceback (a user's code's as its own error),
restarts as one line each. Ray's own INFO
lines are muted (``logging_level=WARNING``); its warnings and cluster errors still show.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import torch

try:
    import ray
    from ray.exceptions import RayActorError, RayError, RayTaskError
except ImportError as error:
    raise ImportError("rollout.backend = 'ray' needs Ray: pip install 'grpo[ray]'") from error

from grpo.config.errors import UserCodeError
from grpo.rounds.workers.chunks import ChunkRequest, ChunkResult
from grpo.rounds.workers.pool import WeightStore, WorkerError, allow_restart, unanswered
from grpo.rounds.workers.worker import WorkerSpec, build_worker, load_weights, serve

POLL_S = 0.5  # while poll waits, how often it looks for calls past timeout_s


class WorkerActor:
    """One rollout worker inside a Ray actor (the process Ray gives it, on any node)."""

    def __init__(self, spec: WorkerSpec, index: int) -> None:
        self._state = build_worker(spec, index)
        self._idle_s = 0.0  # seconds without work since the previous result
        self._idle_since = time.perf_counter()

    def node(self) -> str:
        """Where the actor runs; its answer also says the worker is built."""
        return ray.get_runtime_context().get_node_id()

    def load_weights(self, weights: dict[str, torch.Tensor], version: int) -> None:
        self._idle_s += time.perf_counter() - self._idle_since
        load_weights(self._state, weights, version)
        self._idle_since = time.perf_counter()

    def serve(self, request: ChunkRequest) -> ChunkResult:
        self._idle_s += time.perf_counter() - self._idle_since
        result = serve(self._state, request)
        result.idle_s, self._idle_s = self._idle_s, 0.0
        self._idle_since = time.perf_counter()
        return result


def init_address(configured: str) -> str | None:
    """``rollout.ray_address`` as ``ray.init``'s address: "" is None, Ray's own lookup
    (RAY_ADDRESS, then a ``ray start`` cluster on this machine, then a new instance)."""
    return configured or None


def connect(configured: str) -> bool:
    """Ray connected, as ``rollout.ray_address`` says; True when this call connected it.
    Ray initialised already (by the caller) is left as it is: its settings are theirs."""
    if ray.is_initialized():
        return False
    ray.init(
        address=init_address(configured),
        logging_level=logging.WARNING,
        log_to_driver=False,
        include_dashboard=False,  # only used when starting an instance: seconds saved
    )
    return True


def actor_options(spec: WorkerSpec) -> dict[str, Any]:
    """Where a worker may run. SPREAD: over the nodes rather than packed on the first.
    ``num_cpus`` = its torch threads, so Ray puts no more workers on a node than it has
    cores for (Ray also sets the actor's OMP_NUM_THREADS to it). A model on CUDA takes a
    whole GPU of its node (Ray picks it and sets CUDA_VISIBLE_DEVICES, so "cuda" is that
    GPU); "auto" asks for one when the cluster has any. Ray does not restart it: the pool
    does, to send it weights and requests again."""
    device = spec.config.model.device
    cuda = device.startswith("cuda") or (
        device == "auto" and ray.cluster_resources().get("GPU", 0) >= 1
    )
    return {
        "num_cpus": spec.threads,
        "num_gpus": 1 if cuda else 0,
        "scheduling_strategy": "SPREAD",
        "max_restarts": 0,
    }


@dataclass
class _Call:
    ref: Any  # the call's ray.ObjectRef
    what: str  # for messages: "starting", "loading weights version 3", "on request 7"
    number: int | None = None  # the request's, for a serve call
    timed: bool = True  # held to timeout_s (starting is not)


@dataclass
class _Worker:
    actor: Any  # the actor's handle
    ready: Any  # the reference of its start call: its node id
    calls: deque[_Call] = field(default_factory=deque)  # unanswered, in call order
    head_since: float = 0.0  # monotonic: when calls[0] began, as far as the pool has seen


class RayPool:
    """``workers`` rollout actors on a Ray cluster (see the module's docstring)."""

    def __init__(
        self, spec: WorkerSpec, workers: int, *, timeout_s: float, max_restarts: int
    ) -> None:
        self._owns_ray = connect(spec.config.rollout.ray_address)
        self._timeout_s, self._max_restarts = timeout_s, max_restarts
        self._options = actor_options(spec)
        self._actor_class = ray.remote(WorkerActor)
        self._spec = ray.put(spec)  # one copy for every start and restart
        self._weights = WeightStore()
        self._outstanding: dict[int, tuple[int, ChunkRequest]] = {}  # number → (worker, request)
        self.restarts = 0
        self._workers: list[_Worker] = []
        try:
            for index in range(workers):
                self._workers.append(self._start(index))
        except BaseException:
            self.close()
            raise

    @property
    def workers(self) -> int:
        return len(self._workers)

    def actors(self) -> list[Any]:
        """The workers' actor handles, in worker order."""
        return [worker.actor for worker in self._workers]

    def nodes(self) -> list[str]:
        """The node id each worker runs on; waits until they have started."""
        return ray.get([worker.ready for worker in self._workers])

    def _start(self, index: int) -> _Worker:
        actor = self._actor_class.options(name=None, **self._options).remote(self._spec, index)
        worker = _Worker(actor, actor.node.remote())
        self._call(worker, _Call(worker.ready, "starting", timed=False))
        return worker

    def _call(self, worker: _Worker, call: _Call) -> None:
        """Keep the call's reference; one made to an idle worker starts now."""
        if not worker.calls:
            worker.head_since = time.monotonic()
        worker.calls.append(call)

    def _send_weights(self, worker: _Worker, weights: Any, version: int) -> None:
        ref = worker.actor.load_weights.remote(weights, version)
        self._call(worker, _Call(ref, f"loading weights version {version}"))

    def _send_request(self, worker: _Worker, request: ChunkRequest) -> None:
        ref = worker.actor.serve.remote(request)
        self._call(worker, _Call(ref, f"on request {request.number}", request.number))

    def publish(self, weights: dict[str, torch.Tensor], version: int) -> None:
        """Every worker takes ``weights`` as ``version`` before its next request."""
        self._weights.update(weights, version)
        stored = ray.put(weights)
        for worker in self._workers:
            self._send_weights(worker, stored, version)

    def submit(self, worker: int, request: ChunkRequest) -> None:
        self._outstanding[request.number] = (worker, request)
        self._send_request(self._workers[worker], request)

    def poll(self, timeout_s: float) -> list[ChunkResult]:
        """The results that arrive within ``timeout_s`` (at least one unless it runs out);
        dead or hung workers found meanwhile are restarted."""
        deadline = time.monotonic() + timeout_s
        results: list[ChunkResult] = []
        while True:
            wait = min(POLL_S, max(0.0, deadline - time.monotonic()))
            refs = [call.ref for worker in self._workers for call in worker.calls]
            if refs:
                ray.wait(refs, num_returns=1, timeout=wait, fetch_local=False)
                done, _ = ray.wait(refs, num_returns=len(refs), timeout=0, fetch_local=False)
                results.extend(self._collect(set(done)))
            else:
                time.sleep(wait)
            self._check_timeouts()
            if results or time.monotonic() >= deadline:
                return results

    def _collect(self, done: set[Any]) -> list[ChunkResult]:
        """The finished calls at the head of each worker's calls, in their order."""
        results: list[ChunkResult] = []
        for index in range(len(self._workers)):
            worker = self._workers[index]
            while worker.calls and worker.calls[0].ref in done:
                call = worker.calls.popleft()
                worker.head_since = time.monotonic()
                try:
                    value = ray.get(call.ref)
                except RayTaskError as error:
                    if isinstance(error.cause, UserCodeError):  # a reward or environment
                        raise error.cause from None
                    raise WorkerError(
                        f"rollout worker {index} failed {call.what}:\n{_plain(error)}"
                    ) from error
                except RayActorError as error:
                    if error.actor_init_failed:  # its build raised: no use starting it again
                        raise WorkerError(
                            f"rollout worker {index} failed starting:\n{_plain(error)}"
                        ) from error
                    self._restart(index, f"died {call.what} ({_last_line(error)})")
                    break
                except RayError as error:  # its result lost with its node, say
                    self._restart(index, f"lost {call.what} ({_last_line(error)})")
                    break
                if call.number is not None and self._outstanding.pop(call.number, None):
                    results.append(value)  # a request answered twice is taken once
        return results

    def _check_timeouts(self) -> None:
        """Restart the workers whose running call (their first unanswered one) is too long."""
        now = time.monotonic()
        for index, worker in enumerate(self._workers):
            if worker.calls and worker.calls[0].timed and now - worker.head_since > self._timeout_s:
                spent = now - worker.head_since
                limit = f"(rollout.worker_timeout_s = {self._timeout_s})"
                self._restart(index, f"spent {spent:.0f} s {worker.calls[0].what} {limit}")

    def _restart(self, index: int, why: str) -> None:
        """A new actor for worker ``index``: the latest full weights, then its unanswered
        requests in order; the run fails instead past ``max_restarts``."""
        allow_restart(index, why, self.restarts, self._max_restarts)
        ray.kill(self._workers[index].actor, no_restart=True)
        worker = self._workers[index] = self._start(index)
        self.restarts += 1
        if self._weights.version is not None:
            self._send_weights(worker, ray.put(self._weights.full), self._weights.version)
        for request in unanswered(self._outstanding, index):
            self._send_request(worker, request)

    def close(self) -> None:
        """Kill every actor; shut Ray down if this pool initialised it. Idempotent."""
        for worker in self._workers:
            with contextlib.suppress(Exception):  # dead already, or Ray shut down under us
                ray.kill(worker.actor, no_restart=True)
        self._workers = []
        if self._owns_ray:
            self._owns_ray = False
            ray.shutdown()


def _last_line(error: BaseException) -> str:
    """The cause of a Ray error in one line (Ray puts it last)."""
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    return lines[-1] if lines else type(error).__name__


def _plain(error: BaseException) -> str:
    """A Ray error's text (the worker's traceback, Ray's own frames left out) without the
    terminal colours Ray puts in."""
    return re.sub(r"\x1b\[[0-9;]*m", "", str(error))
