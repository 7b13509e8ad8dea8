"""Running a turn's tool calls and environment calls side by side, in a bounded pool.

A turn of B rows asks for up to B tool calls and environment steps; one after another they
cost the sum of their times, side by side about the longest. :func:`run_calls` runs a batch
of :class:`Call` s and returns their outcomes in the batch's order, so what the rollout
does with them never depends on which call finished first.

* Plain functions run on ``workers`` threads. A call past its timeout is given up (its
  outcome is :class:`CallTimeout`); Python cannot stop a thread, so it runs on as a daemon
  and is counted in :func:`hung_threads`.
* ``async def`` tools are awaited concurrently on one event loop; a timeout cancels them.
* ``isolated`` calls (tools under ``agent.tool_isolation = "process"``) run in a pool of
  ``workers`` processes (``pebble``): a call past its timeout has its process killed and
  replaced, so nothing leaks. Its arguments and result must be picklable (JSON values
  are); where processes are spawned rather than forked (macOS, Windows, Python 3.14), the
  tool must also be importable by its module name in a fresh process. A tool that runs
  torch itself belongs on threads (torch's thread pools do not survive a fork).

Environments always run on threads: their state lives in the trainer's process.
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import inspect
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any


class CallTimeout(Exception):
    """A call outlived its timeout."""


@dataclass(frozen=True)
class Call:
    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    timeout_s: float = 0.0  # 0: no limit
    isolated: bool = False  # in a worker process (a tool under tool_isolation = "process")


@dataclass(frozen=True)
class Outcome:
    value: Any  # the call's return value (None when it failed)
    error: BaseException | None  # what it raised; CallTimeout past its timeout
    seconds: float = 0.0  # from its start to its outcome (a process call: from its queueing)


_hung = [0]  # calls given up while their thread runs on (a counter shared by all pools)


def hung_threads() -> int:
    """Thread-run calls given up at their timeout since the process started."""
    return _hung[0]


def call_with_timeout(fn: Callable[..., Any], timeout_s: float, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` in a daemon thread (a hung call must not block the trainer or
    its exit); its exception is re-raised here; :class:`CallTimeout` after ``timeout_s``
    (0: no limit)."""
    future: Future = Future()

    def target() -> None:
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as error:  # reported in the caller's thread
            future.set_exception(error)

    threading.Thread(target=target, name="agent-call", daemon=True).start()
    try:
        return future.result(timeout=timeout_s if timeout_s > 0 else None)
    except FutureTimeout:
        _hung[0] += 1
        raise CallTimeout(f"timed out after {timeout_s:g} s") from None


def run_calls(calls: Sequence[Call], workers: int) -> list[Outcome]:
    """Every call's outcome, in the order of ``calls``; at most ``workers`` thread-run (and,
    separately, process-run) calls at a time; ``async def`` ones all concurrently."""
    outcomes: list[Outcome | None] = [None] * len(calls)
    coroutines = [i for i, c in enumerate(calls) if inspect.iscoroutinefunction(c.fn)]
    isolated = [i for i, c in enumerate(calls) if c.isolated and i not in coroutines]
    threaded = [i for i in range(len(calls)) if i not in coroutines and i not in isolated]
    waiting: list[tuple[int, Future]] = []
    started = time.perf_counter()
    if isolated:
        pool = _process_pool(workers)
        for i in isolated:
            call = calls[i]
            timeout = call.timeout_s if call.timeout_s > 0 else None
            waiting.append((i, pool.schedule(call.fn, call.args, call.kwargs, timeout=timeout)))
    async_thread = None
    if coroutines:  # on its own thread, beside the thread pool's calls
        async_thread = threading.Thread(target=_await_all, args=(calls, coroutines, outcomes))
        async_thread.start()
    if threaded:
        with ThreadPoolExecutor(max_workers=max(1, min(workers, len(threaded)))) as threads:
            done = threads.map(_run_threaded, [calls[i] for i in threaded])
            for i, outcome in zip(threaded, done, strict=True):
                outcomes[i] = outcome
    for i, future in waiting:
        outcomes[i] = _process_outcome(future, calls[i].timeout_s, started)
    if async_thread is not None:
        async_thread.join()
    return [outcome for outcome in outcomes if outcome is not None]


def _run_threaded(call: Call) -> Outcome:
    started = time.perf_counter()
    try:
        value = call_with_timeout(call.fn, call.timeout_s, *call.args, **call.kwargs)
        return Outcome(value, None, time.perf_counter() - started)
    except Exception as error:  # the call's own exception, or CallTimeout
        return Outcome(None, error, time.perf_counter() - started)


def _process_outcome(future: Future, timeout_s: float, started: float) -> Outcome:
    try:
        value, error = future.result(), None
    except FutureTimeout:  # pebble has killed and replaced the worker process
        value, error = None, CallTimeout(f"timed out after {timeout_s:g} s")
    except Exception as raised:
        value, error = None, raised
    return Outcome(value, error, time.perf_counter() - started)


def _await_all(calls: Sequence[Call], indices: list[int], outcomes: list[Outcome | None]) -> None:
    async def one(call: Call) -> Outcome:
        started = time.perf_counter()
        try:
            coroutine = call.fn(*call.args, **call.kwargs)
            limit = call.timeout_s if call.timeout_s > 0 else None
            value, error = await asyncio.wait_for(coroutine, limit), None
        except TimeoutError:
            value, error = None, CallTimeout(f"timed out after {call.timeout_s:g} s")
        except Exception as raised:
            value, error = None, raised
        return Outcome(value, error, time.perf_counter() - started)

    async def everything() -> list[Outcome]:
        return await asyncio.gather(*(one(calls[i]) for i in indices))

    for i, outcome in zip(indices, asyncio.run(everything()), strict=True):
        outcomes[i] = outcome


@functools.cache
def _process_pool(workers: int) -> Any:
    """One pool of worker processes per size, for the life of the trainer's process. They
    start as the platform starts processes by default (fork on Linux up to Python 3.13): a
    forked worker is ready at once, where a spawned one would import the trainer again."""
    from pebble import ProcessPool

    pool = ProcessPool(max_workers=workers)
    atexit.register(pool.stop)
    return pool
