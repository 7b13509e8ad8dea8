"""How many threads torch uses for CPU work: chosen deliberately, not left to its default.

Torch's default is one thread per core. On a shared machine that is the worst choice: with
2 cores partly taken by other processes, 2 torch threads spin-wait on each other and a
demo-sized training step ran 3–14× slower than with 1 thread (benchmarks/threads.py,
RESULTS.md). The rule, first that applies:

1. ``train.threads`` > 0: that number (the user knows best);
2. ``OMP_NUM_THREADS`` set to a positive integer: that (the usual way to say it outside);
3. the CPUs this process may run on (``os.sched_getaffinity``) minus the busy ones,
   estimated from the 1-minute load average, rounded to the nearest CPU; at least 1.
"""

from __future__ import annotations

import os


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask; ``os.cpu_count`` where there is none)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def choose_threads(
    explicit: int,
    *,
    environ: dict[str, str] | None = None,
    cpus: int | None = None,
    load: float | None = None,
) -> tuple[int, str]:
    """``(threads, why)`` by the rule above; ``environ``, ``cpus`` and ``load`` (the 1-minute
    load average) default to this process's, and are parameters so the rule can be tested."""
    if explicit > 0:
        return explicit, "train.threads"
    omp = (os.environ if environ is None else environ).get("OMP_NUM_THREADS", "").strip()
    if omp.isdigit() and int(omp) > 0:
        return int(omp), "OMP_NUM_THREADS"
    cpus = usable_cpus() if cpus is None else cpus
    load = os.getloadavg()[0] if load is None else load
    busy = min(cpus, round(load))
    threads = max(1, cpus - busy)
    return threads, f"{cpus} usable CPUs, {busy} busy (1-min load {load:.2f})"


def apply_threads(explicit: int) -> str:
    """Set torch's intra-op thread count by the rule; returns the line to print."""
    import torch

    threads, why = choose_threads(explicit)
    torch.set_num_threads(threads)
    return f"torch threads: {threads} ({why})"
