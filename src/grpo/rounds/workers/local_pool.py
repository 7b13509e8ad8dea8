"""Rollout workers as local processes (``rollout.backend = "local"``), on torch
multiprocessing: one inbox queue per worker (weights and requests, handled in order), and
one pipe per worker that it answers on, read by a thread of the learner's. Tensors travel
through shared memory.

Nothing is shared between workers: a worker stopped or killed halfway through sending an
answer holds up its own pipe alone, and its replacement gets a new one. (A queue shared
by all workers has a write lock, which a worker stopped while holding it never releases,
and one byte stream, which it leaves with half a message: every other worker, the
replacement included, then waits for the lock forever, and the learner for the message.)

Faults are the pool's to handle. A worker that exits, stops beating (its heartbeat thread
writes a timestamp twice a second), or spends longer than ``timeout_s`` on one request is
killed and started again (a heartbeat missing for a minute is enough, a stopped process
beats no more): the latest weights first, then its unanswered requests in their
order. After ``max_restarts`` restarts the run fails, naming the worker and why. Workers
ignore Ctrl-C (the learner stops them), and exit on their own when the learner dies.
"""

from __future__ import annotations

import contextlib
import multiprocessing.connection
import os
import queue
import signal
import threading
import time
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import torch
import torch.multiprocessing as mp

from grpo.config.errors import UserCodeError
from grpo.rounds.workers.chunks import ChunkRequest, ChunkResult
from grpo.rounds.workers.pool import (
    WeightStore,
    WorkerError,
    allow_restart,
    unanswered,
)
from grpo.rounds.workers.worker import WorkerSpec, build_worker, load_weights, serve

HEARTBEAT_S = 0.5
SILENCE_S = 60.0  # a heartbeat this late means a stopped process, whatever the request timeout


def _beat(heartbeat: Any, parent_pid: int) -> None:
    """The heartbeat; also the worker's exit when the learner is gone (killed, not closed)."""
    while True:
        heartbeat.value = time.time()
        if os.getppid() != parent_pid:
            os._exit(0)
        time.sleep(HEARTBEAT_S)


def worker_main(
    spec: WorkerSpec, index: int, inbox: Any, outbox: Connection, heartbeat: Any, busy_since: Any
) -> None:
    """A worker process: build, then answer its inbox in order, on ``outbox`` (its own
    pipe's sending end), until told to stop. A long answer is sent while the learner's
    reader takes it in, not held until the learner polls."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the learner's to handle
    threading.Thread(target=_beat, args=(heartbeat, os.getppid()), daemon=True).start()
    try:
        state = build_worker(spec, index)
    except BaseException:
        outbox.send(("error", index, None, traceback.format_exc()))
        return
    idle_s = 0.0
    while True:
        waited = time.perf_counter()
        message = inbox.get()
        idle_s += time.perf_counter() - waited
        if message[0] == "stop":
            return
        if message[0] == "weights":
            load_weights(state, message[1], message[2])
            continue
        request: ChunkRequest = message[1]
        busy_since.value = time.time()
        try:
            result = serve(state, request)
        except UserCodeError as error:  # a reward or environment: the learner reports it
            outbox.send(("user_error", index, request.number, error))
            continue
        except Exception:
            outbox.send(("error", index, request.number, traceback.format_exc()))
            continue
        finally:
            busy_since.value = 0.0
        result.idle_s, idle_s = idle_s, 0.0
        outbox.send(("result", result))


def _read_answers(index: int, process: Any, answers: Connection, arrivals: Any) -> None:
    """Move worker ``index``'s messages from its pipe to the pool's ``arrivals`` until the
    pipe ends (the worker exited or was killed). A thread per worker: one stopped halfway
    through a message holds up this thread alone, until the pool kills it."""
    while True:
        try:
            arrivals.put(answers.recv())
        except EOFError:
            return
        except Exception:  # a worker gone mid-message, or a message that cannot be unpickled
            if not multiprocessing.connection.wait([process.sentinel], timeout=1.0):
                arrivals.put(("unreadable", index, traceback.format_exc()))  # it is alive
            return


@dataclass
class _Handle:
    process: Any
    inbox: Any
    answers: Connection  # the learner's end of the worker's pipe
    reader: threading.Thread  # _read_answers on it
    heartbeat: Any  # the time of the worker's last beat; 0.0 until its first
    busy_since: Any
    started: float  # when the process was started


class LocalPool:
    """``workers`` rollout processes on this machine (see the module's docstring)."""

    def __init__(
        self, spec: WorkerSpec, workers: int, *, timeout_s: float, max_restarts: int
    ) -> None:
        self._context = mp.get_context("spawn")
        self._spec, self._timeout_s, self._max_restarts = spec, timeout_s, max_restarts
        self._arrivals: queue.SimpleQueue = queue.SimpleQueue()  # every worker's messages
        self._weights = WeightStore()
        self._outstanding: dict[int, tuple[int, ChunkRequest]] = {}  # number → (worker, request)
        self._early: list[ChunkResult] = []  # read while checking a dead worker's last words
        self.restarts = 0
        self._handles: list[_Handle] = []
        for index in range(workers):
            self._handles.append(self._start(index))

    @property
    def workers(self) -> int:
        return len(self._handles)

    def pids(self) -> list[int]:
        return [handle.process.pid for handle in self._handles]

    def busy(self, worker: int) -> bool:
        """Whether ``worker`` is on a request now."""
        return self._handles[worker].busy_since.value > 0

    def _start(self, index: int) -> _Handle:
        heartbeat = self._context.Value("d", 0.0, lock=False)
        busy_since = self._context.Value("d", 0.0, lock=False)
        inbox = self._context.Queue()
        answers, outbox = self._context.Pipe(duplex=False)
        process = self._context.Process(
            target=worker_main,
            args=(self._spec, index, inbox, outbox, heartbeat, busy_since),
            name=f"grpo-rollout-worker-{index}",
            daemon=True,
        )
        process.start()
        outbox.close()  # the worker's end alone: the pipe ends when the worker does
        reader = threading.Thread(
            target=_read_answers,
            args=(index, process, answers, self._arrivals),
            name=f"grpo-rollout-answers-{index}",
            daemon=True,
        )
        reader.start()
        return _Handle(process, inbox, answers, reader, heartbeat, busy_since, time.time())

    def publish(self, weights: dict[str, torch.Tensor], version: int) -> None:
        """Every worker takes ``weights`` as ``version`` before its next request."""
        self._weights.update(weights, version)
        for handle in self._handles:
            handle.inbox.put(("weights", weights, version))

    def submit(self, worker: int, request: ChunkRequest) -> None:
        self._outstanding[request.number] = (worker, request)
        self._handles[worker].inbox.put(("request", request))

    def poll(self, timeout_s: float) -> list[ChunkResult]:
        """The results that arrive within ``timeout_s`` (at least one unless it runs out);
        dead or hung workers found meanwhile are restarted."""
        deadline = time.monotonic() + timeout_s
        results, self._early = self._early, []
        while not results:
            wait = min(HEARTBEAT_S, max(0.0, deadline - time.monotonic()))
            with contextlib.suppress(queue.Empty):
                results.extend(self._handle(self._arrivals.get(timeout=wait)))
                while True:
                    results.extend(self._handle(self._arrivals.get_nowait()))
            self._check_health()
            if time.monotonic() >= deadline:
                break
        return results

    def _handle(self, message: tuple[Any, ...]) -> list[ChunkResult]:
        if message[0] == "user_error":
            raise message[3]
        if message[0] == "error":
            _, index, number, text = message
            what = "starting" if number is None else f"on request {number}"
            raise WorkerError(f"rollout worker {index} failed {what}:\n{text}")
        if message[0] == "unreadable":
            _, index, text = message
            raise WorkerError(
                f"rollout worker {index} sent a message the learner cannot read:\n{text}"
            )
        result: ChunkResult = message[1]
        if self._outstanding.pop(result.request.number, None) is None:
            return []  # answered twice: a restarted worker's request, answered before its end
        return [result]

    def _check_health(self) -> None:
        now, limit = time.time(), f"(rollout.worker_timeout_s = {self._timeout_s})"
        for index, handle in enumerate(self._handles):
            busy, beat = handle.busy_since.value, handle.heartbeat.value
            # Before its first beat a new process is still starting Python and importing
            # torch, seconds on a busy machine: only a silence of SILENCE_S counts then.
            silent = now - (beat or handle.started)
            if not handle.process.is_alive():
                self._read_last_words(handle)  # its error, if it sent one, is the run's error
                self._restart(index, f"exited with code {handle.process.exitcode}")
            elif silent > (min(self._timeout_s, SILENCE_S) if beat else SILENCE_S):
                self._restart(index, f"sent no heartbeat for {silent:.0f} s {limit}")
            elif busy and now - busy > self._timeout_s:
                self._restart(index, f"spent {now - busy:.0f} s on one request {limit}")

    def _read_last_words(self, handle: _Handle) -> None:
        """What a worker that exited sent before it went (its reader ends with its pipe)."""
        handle.reader.join(timeout=5)
        with contextlib.suppress(queue.Empty):
            while True:
                self._early.extend(self._handle(self._arrivals.get_nowait()))

    def _restart(self, index: int, why: str) -> None:
        allow_restart(index, why, self.restarts, self._max_restarts)
        _stop(self._handles[index], kill=True)
        handle = self._handles[index] = self._start(index)
        self.restarts += 1
        if self._weights.version is not None:
            handle.inbox.put(("weights", self._weights.full, self._weights.version))
        for request in unanswered(self._outstanding, index):
            handle.inbox.put(("request", request))

    def close(self) -> None:
        """Stop every worker (killed when it does not stop in 5 s); idempotent."""
        for handle in self._handles:
            with contextlib.suppress(Exception):
                handle.inbox.put(("stop",))
        for handle in self._handles:
            _stop(handle, kill=False)
        self._handles = []


def _stop(handle: _Handle, *, kill: bool) -> None:
    process = handle.process
    if kill:
        process.kill()
    process.join(timeout=5)
    if process.is_alive():
        process.kill()
        process.join(timeout=5)
    handle.inbox.cancel_join_thread()
    handle.inbox.close()
    handle.reader.join(timeout=5)  # the pipe ended with the process
    if not handle.reader.is_alive():
        handle.answers.close()
