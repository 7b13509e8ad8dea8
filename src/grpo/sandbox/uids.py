"""A uid of its own for every concurrent sandboxed run (as root), so that RLIMIT_NPROC
counts only that run's processes and a fork bomb in one run cannot starve the runs next
to it."""

from __future__ import annotations

import os
import threading


class UidPool:
    """Distinct unprivileged uids for concurrent runs (root only), from a range chosen by
    process id so that two trainers on one machine are unlikely to share one."""

    SIZE = 1024

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._free: list[int] = []
        self._pid = -1

    @classmethod
    def range_for(cls, pid: int) -> range:
        base = 1_600_000_000 + (pid % 400_000) * cls.SIZE
        return range(base, base + cls.SIZE)

    def acquire(self) -> int:
        with self._lock:
            if self._pid != os.getpid():  # a fresh range after fork
                self._pid = os.getpid()
                self._free = list(reversed(self.range_for(self._pid)))
            if not self._free:
                raise RuntimeError(f"more than {self.SIZE} concurrent sandbox runs")
            return self._free.pop()

    def release(self, uid: int) -> None:
        with self._lock:
            if uid not in self._free:
                self._free.append(uid)


# One pool per process: every run of this process draws from it.
UIDS = UidPool()
