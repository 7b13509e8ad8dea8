"""The sandbox launcher's resource limits (rlimits), set just before the program starts.

Loaded by ``launcher.py`` from its own directory, not imported through the package:
the launcher runs under ``python -I -S``, which puts neither this directory nor the
package on ``sys.path``. Standard library only, and no imports from :mod:`grpo`.
"""

from __future__ import annotations

import os
import resource


def _own_task_count(uid: int) -> int:
    """Tasks (threads count: RLIMIT_NPROC counts them) already running under ``uid``."""
    count = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as handle:
                status = dict(line.split(":", 1) for line in handle if ":" in line)
            if int(status["Uid"].split()[0]) == uid:
                count += int(status["Threads"])
        except (OSError, KeyError, ValueError):
            continue
    return count


def set_limits(limits: dict, shared_uid: bool) -> None:
    """Per-process limits from the spec; ``shared_uid``: the uid also runs processes of
    its own outside the sandbox."""
    cpu = int(limits["cpu_s"])
    nproc = limits["max_processes"]
    if shared_uid:  # the count is per user: leave room for the user's other processes
        nproc += _own_task_count(os.getuid())
    for which, value in (
        (resource.RLIMIT_CPU, (cpu, cpu + 1)),  # SIGXCPU at the soft limit, SIGKILL after
        (resource.RLIMIT_AS, (limits["memory_bytes"],) * 2),
        (resource.RLIMIT_NPROC, (nproc, nproc)),
        (resource.RLIMIT_FSIZE, (limits["file_size_bytes"],) * 2),
        (resource.RLIMIT_NOFILE, (limits["open_files"],) * 2),
        (resource.RLIMIT_CORE, (0, 0)),
    ):
        resource.setrlimit(which, value)
