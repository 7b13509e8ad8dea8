"""How many threads torch uses for CPU work: chosen deliberately, not left to its default.

Torch's default is one thread per core. On a shared machine that is the worst choice: with
2 cores partly taken by other processes, 2 torch threads spin-wait on each other and a
demo-sized training step ran 3–14× slower than with 1 thread (benchmarks/threads.py,
RESULTS.md). The rule, first that applies:

1. ``train.threads`` > 0: that number (the user knows best);
2. ``OMP_NUM_THREADS`` set to a positive integer: that (the usual way to say it outside);
3. the CPUs this process may run on (``os.sched_getaffinity``) minus the busy ones, rounded
   to the nearest CPU; at least 1. Busy is measured now: the share of those CPUs' time
   spent outside idle over half a second (``/proc/stat``) while this process sleeps. The
   1-minute load average, used where ``/proc/stat`` is missing, lags: right after
   ``scripts/demo.sh`` installs the project it still counts the finished install as one
   busy CPU and would halve the demo's threads on a quiet machine. CPUs reserved for this
   run's own rollout workers (asynchronous rollouts on this machine) count as busy.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

WINDOW_S = 0.5


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask; ``os.cpu_count`` where there is none)."""
    return len(_affinity()) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _affinity() -> set[int]:
    return set(os.sched_getaffinity(0))


def cpu_times(stat_text: str, cpus: set[int]) -> tuple[int, int]:
    """``(busy, total)`` jiffies summed over the ``cpuN`` lines of ``/proc/stat`` with N in
    ``cpus``: total = user + nice + system + idle + iowait + irq + softirq + steal,
    busy = total − idle − iowait (guest time is already inside user)."""
    busy = total = 0
    for line in stat_text.splitlines():
        name, *fields = line.split()
        if not (name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus):
            continue
        ticks = [int(field) for field in fields[:8]]
        total += sum(ticks)
        busy += sum(ticks) - ticks[3] - ticks[4]
    return busy, total


def busy_cpus(before: tuple[int, int], after: tuple[int, int], cpus: int) -> float:
    """CPUs in use between two :func:`cpu_times` readings: ``cpus × Δbusy / Δtotal``."""
    elapsed = after[1] - before[1]
    return cpus * (after[0] - before[0]) / elapsed if elapsed > 0 else 0.0


def measure_busy(cpus: int) -> tuple[float, str]:
    """Busy CPUs now (``/proc/stat`` over :data:`WINDOW_S`), else the 1-minute load average."""
    stat = Path("/proc/stat")
    if stat.exists() and hasattr(os, "sched_getaffinity"):
        mine = _affinity()
        before = cpu_times(stat.read_text(), mine)
        time.sleep(WINDOW_S)
        after = cpu_times(stat.read_text(), mine)
        return busy_cpus(before, after, cpus), f"in use over {WINDOW_S} s"
    return os.getloadavg()[0], "1-min load"


def choose_threads(
    explicit: int,
    *,
    environ: dict[str, str] | None = None,
    cpus: int | None = None,
    load: float | None = None,
    reserved: int = 0,
) -> tuple[int, str]:
    """``(threads, why)`` by the rule above; ``environ``, ``cpus`` and ``load`` (busy CPUs)
    default to this process's, and are parameters so the rule can be tested."""
    if explicit > 0:
        return explicit, "train.threads"
    omp = (os.environ if environ is None else environ).get("OMP_NUM_THREADS", "").strip()
    if omp.isdigit() and int(omp) > 0:
        return int(omp), "OMP_NUM_THREADS"
    cpus = usable_cpus() if cpus is None else cpus
    load, how = measure_busy(cpus) if load is None else (load, "given")
    busy = min(cpus, round(load))
    threads = max(1, cpus - busy - reserved)
    mine = f", {reserved} for the rollout workers" if reserved else ""
    return threads, f"{cpus} usable CPUs, {busy} busy ({load:.2f} {how}){mine}"


def apply_threads(explicit: int, reserved: int = 0) -> str:
    """Set torch's intra-op thread count by the rule (``reserved``: CPUs this run's local
    rollout workers will use); returns the line to print."""
    import torch

    threads, why = choose_threads(explicit, reserved=reserved)
    torch.set_num_threads(threads)
    return f"torch threads: {threads} ({why})"
