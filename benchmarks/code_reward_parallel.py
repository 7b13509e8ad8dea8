"""Code reward, serial vs parallel: 64 completions, each a CPU-bound program against 3 tests.

Usage: python benchmarks/code_reward_parallel.py [--completions 64] [--workers N] [--repeats 2]

Each completion counts primes below n by trial division (about 0.1 s per test, 0.3 s per
completion); half of them are off by one, so both outcomes are exercised. The same batch
is scored with 1 worker and with N (default: one per core), alternately, ``repeats``
times; the best time of each is reported, with the speed-up, and for each run the CPU
load of other processes on the machine (the ratio is only meaningful when that is ~0).
"""

from __future__ import annotations

import argparse
import os
import resource
import time

from grpo.rewards import code_reward, sandbox_isolation

PROGRAM = """```python
n = int(input())
count = 0
for k in range(2, n):
    d = 2
    while d * d <= k:
        if k % d == 0:
            break
        d += 1
    else:
        count += 1
print(count{offset})
```"""
TESTS = [
    {"input": "40000", "output": "4203"},
    {"input": "39000", "output": "4107"},
    {"input": "41000", "output": "4291"},
]


def busy_seconds() -> float:
    """CPU seconds all processes on the machine have used (from /proc/stat)."""
    with open("/proc/stat") as handle:
        fields = [int(x) for x in handle.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def own_seconds() -> float:
    """CPU seconds this process and its (reaped) descendants have used."""
    me, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--completions", type=int, default=64)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    completions = [
        PROGRAM.format(offset="" if i % 2 == 0 else " + 1") for i in range(args.completions)
    ]
    prompts, tests = ["count primes"] * len(completions), [TESTS] * len(completions)
    expected = [1.0 if i % 2 == 0 else 0.0 for i in range(len(completions))]
    isolation = ",".join(sandbox_isolation())
    size = f"{len(completions)} completions x {len(TESTS)} tests"
    print(f"{size}; {os.cpu_count()} cores; sandbox: {isolation}")
    best = {1: float("inf"), args.workers: float("inf")}
    for repeat in range(args.repeats):
        for workers in (1, args.workers):
            busy, own, started = busy_seconds(), own_seconds(), time.perf_counter()
            scores = code_reward(prompts, completions, tests=tests, workers=workers, timeout_s=30)
            seconds = time.perf_counter() - started
            others = (busy_seconds() - busy - (own_seconds() - own)) / seconds
            assert scores == expected, scores
            best[workers] = min(best[workers], seconds)
            # Other processes' load shows when the machine was not ours alone.
            run = f"repeat {repeat + 1}: {workers} worker(s)"
            print(f"  {run}: {seconds:.2f} s (other load: {others:.2f} cores)")
    serial, parallel = best[1], best[args.workers]
    print(
        f"serial (1 worker): {serial:.2f} s; parallel ({args.workers} workers): "
        f"{parallel:.2f} s; speed-up: {serial / parallel:.2f}x"
    )


if __name__ == "__main__":
    main()
