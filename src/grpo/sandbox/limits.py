"""What a sandboxed run may use (:class:`SandboxLimits`) and how strongly it is isolated
(:data:`Isolation`): the caller's side of the limits, turned into the numbers the launcher
applies (see :mod:`grpo.sandbox.rlimits`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

# "auto": namespaces where the kernel allows, else seccomp; "seccomp": skip namespaces;
# "none": rlimits only (for debugging).
Isolation = Literal["auto", "seccomp", "none"]


@dataclass(frozen=True)
class SandboxLimits:
    """Per-run limits. ``cpu_s`` 0 means ``ceil(timeout_s) + 1``."""

    timeout_s: float = 10.0  # wall clock, from start to the last process gone
    cpu_s: float = 0.0  # CPU seconds per process (RLIMIT_CPU)
    memory_mb: int = 1024  # address space per process (RLIMIT_AS)
    max_processes: int = 32  # processes and threads (RLIMIT_NPROC)
    file_size_mb: int = 16  # largest file it may write (RLIMIT_FSIZE)
    disk_mb: int = 64  # size of its private /tmp, where it runs (mount namespace only)
    output_bytes: int = 1 << 20  # cap on each of stdout, stderr and the control pipe
    open_files: int = 256

    def for_launcher(self) -> dict[str, int]:
        cpu = self.cpu_s or math.ceil(self.timeout_s) + 1
        return {
            "cpu_s": max(1, math.ceil(cpu)),
            "memory_bytes": self.memory_mb << 20,
            "max_processes": self.max_processes,
            "file_size_bytes": self.file_size_mb << 20,
            "disk_bytes": self.disk_mb << 20,
            "open_files": self.open_files,
        }
