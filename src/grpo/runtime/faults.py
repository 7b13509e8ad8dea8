"""Faults a long run must survive: non-finite updates, and SIGTERM/SIGINT (preemption, Ctrl-C).

A non-finite loss or gradient skips that optimizer update (``policy_update`` leaves the
parameters and the optimizer state untouched and counts it); :class:`NonFiniteGuard` stops
the run after ``train.max_consecutive_skips`` skipped updates in a row. While a run is in
a streak of skipped updates no checkpoint is written, so the last one is the last good one.

:class:`GracefulStop` turns the first SIGTERM or SIGINT into a request: the loop finishes
its step, writes a checkpoint and returns normally. Every process of a torchrun job stops
at the same step (one all-reduce per step decides).
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any


class TrainingStopped(RuntimeError):
    """The run stopped itself; the message says why and where to resume from."""


@dataclass
class NonFiniteGuard:
    """Counts consecutive skipped (non-finite) optimizer updates across steps."""

    limit: int  # train.max_consecutive_skips
    last_checkpoint: Callable[[], Path | None]  # named when the run stops
    consecutive: int = 0

    @property
    def healthy(self) -> bool:
        """False while in a streak of skipped updates: no checkpoint is written then."""
        return self.consecutive == 0

    def record(self, step: int, metrics: dict[str, float], *, updates: int) -> str | None:
        """Account a step's ``updates`` optimizer updates, ``metrics["skipped_updates"]``
        of them skipped. Once an update of a step is skipped the rest of that step's are
        too (same weights, same batch), so the skipped ones are the step's last. Returns a
        warning line for a step with skipped updates; raises :class:`TrainingStopped` at
        the limit.
        """
        skipped, grad_norm = int(metrics.get("skipped_updates", 0)), metrics.get("grad_norm")
        if updates == 0:  # no update was due (every group had zero variance)
            return None
        if skipped == 0:
            self.consecutive = 0
            return None
        self.consecutive = self.consecutive + skipped if skipped == updates else skipped
        summary = (
            f"{self.consecutive} consecutive optimizer update(s) skipped: non-finite loss or "
            f"gradient (grad norm {grad_norm})"
        )
        if self.consecutive < self.limit:
            return f"grpo: step {step}: {summary}; the run stops at {self.limit}"
        last = self.last_checkpoint()
        where = (
            f"the last good checkpoint is {last} (continue from it with --resume after "
            "lowering optim.lr or fixing the data/rewards)"
            if last is not None
            else "no checkpoint was written (train.save_every = 0 or none reached)"
        )
        raise TrainingStopped(
            f"stopped at step {step}: {summary}, train.max_consecutive_skips = {self.limit}; "
            f"{where}"
        )


@dataclass
class GracefulStop:
    """A context: the first SIGTERM/SIGINT sets ``received``; a second one acts as usual
    (SIGINT raises KeyboardInterrupt, SIGTERM terminates). Signal handlers can only be
    installed from the main thread; elsewhere this context does nothing."""

    announce: bool = True
    received: str | None = None
    _previous: dict[int, Any] = field(default_factory=dict)

    def __enter__(self) -> GracefulStop:
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGTERM, signal.SIGINT):
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.received is not None:  # asked twice: stop now
            previous = self._previous.get(signum, signal.SIG_DFL)
            self.__exit__()
            if callable(previous):
                previous(signum, frame)
            elif previous == signal.SIG_DFL:
                os.kill(os.getpid(), signum)
            return
        self.received = signal.Signals(signum).name
        if self.announce:  # os.write: print() is not safe inside a signal handler
            os.write(
                2,
                f"\ngrpo: {self.received} received: finishing this step, then saving a "
                "checkpoint (send it again to stop at once)\n".encode(),
            )

    def agreed(self, dist: Any) -> bool:
        """True on every process when any process received a signal (one all-reduce)."""
        return not dist.all_agree(self.received is None)
