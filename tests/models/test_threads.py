"""The thread rule: explicit, then OMP_NUM_THREADS, then usable CPUs minus busy ones."""

from __future__ import annotations

import os
import subprocess
import sys

import torch

from grpo.models.threads import apply_threads, busy_cpus, choose_threads, cpu_times, measure_busy


def test_an_explicit_count_wins_over_the_environment_and_the_load() -> None:
    assert choose_threads(3, environ={"OMP_NUM_THREADS": "1"}, cpus=2, load=5.0) == (
        3,
        "train.threads",
    )


def test_omp_num_threads_wins_over_the_load() -> None:
    assert choose_threads(0, environ={"OMP_NUM_THREADS": "2"}, cpus=8, load=7.0)[0] == 2


def test_an_unusable_omp_value_is_ignored() -> None:
    # "0" and "abc" are not thread counts: the load rule decides (4 CPUs, 1 busy → 3).
    for value in ("0", "abc", ""):
        assert choose_threads(0, environ={"OMP_NUM_THREADS": value}, cpus=4, load=1.2)[0] == 3


def test_busy_cpus_are_the_rounded_load_and_at_least_one_thread_remains() -> None:
    # 2 CPUs: load 0.4 → 0 busy → 2 threads; load 1.0 → 1 busy → 1; load 6.0 → all busy → 1.
    assert choose_threads(0, environ={}, cpus=2, load=0.4)[0] == 2
    assert choose_threads(0, environ={}, cpus=2, load=1.0)[0] == 1
    assert choose_threads(0, environ={}, cpus=2, load=6.0)[0] == 1
    threads, why = choose_threads(0, environ={}, cpus=16, load=3.6)
    assert threads == 12
    assert why == "16 usable CPUs, 4 busy (3.60 given)"


def test_cpus_reserved_for_local_rollout_workers_count_as_busy() -> None:
    # 8 CPUs, 1 busy, 2 workers × 2 threads: 8 − 1 − 4 = 3; never below 1.
    threads, why = choose_threads(0, environ={}, cpus=8, load=1.0, reserved=4)
    assert (threads, why) == (3, "8 usable CPUs, 1 busy (1.00 given), 4 for the rollout workers")
    assert choose_threads(0, environ={}, cpus=2, load=0.0, reserved=1)[0] == 1
    assert choose_threads(0, environ={}, cpus=2, load=0.0, reserved=4)[0] == 1


def test_apply_sets_torch_and_says_why() -> None:
    before = torch.get_num_threads()
    try:
        assert apply_threads(2) == "torch threads: 2 (train.threads)"
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


STAT_BEFORE = """cpu  300 0 100 1000 10 0 0 0 0 0
cpu0 100 0 50 500 5 0 0 0 0 0
cpu1 200 0 50 500 5 0 0 0 0 0
intr 1 2 3
"""
STAT_AFTER = """cpu  470 0 110 1130 10 0 0 0 0 0
cpu0 110 0 50 590 5 0 0 0 0 0
cpu1 360 0 60 530 5 0 0 0 0 0
"""


def test_cpu_times_sum_the_chosen_cpus_lines() -> None:
    # cpu0: total 100+50+500+5 = 655, busy 655-500-5 = 150; cpu1: total 755, busy 250.
    assert cpu_times(STAT_BEFORE, {0}) == (150, 655)
    assert cpu_times(STAT_BEFORE, {0, 1}) == (400, 1410)
    assert cpu_times(STAT_BEFORE, {7}) == (0, 0)


def test_busy_cpus_is_the_busy_share_times_the_cpus() -> None:
    # Δbusy: cpu0 10, cpu1 170 → 180; Δtotal: cpu0 100, cpu1 200 → 300; 2 × 180/300 = 1.2.
    before, after = cpu_times(STAT_BEFORE, {0, 1}), cpu_times(STAT_AFTER, {0, 1})
    assert busy_cpus(before, after, 2) == 1.2
    assert busy_cpus(before, before, 2) == 0.0


def test_a_running_cpu_hog_is_measured_busy() -> None:
    if sys.platform != "linux":
        return
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        busy, how = measure_busy(len(os.sched_getaffinity(0)))
    finally:
        hog.kill()
        hog.wait()
    assert how == "in use over 0.5 s"
    assert busy >= 0.5  # the hog alone takes about one CPU (more if the machine is busy)
