"""The thread rule: explicit, then OMP_NUM_THREADS, then usable CPUs minus busy ones."""

from __future__ import annotations

import torch

from grpo.models.threads import apply_threads, choose_threads


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
    assert why == "16 usable CPUs, 4 busy (1-min load 3.60)"


def test_apply_sets_torch_and_says_why() -> None:
    before = torch.get_num_threads()
    try:
        assert apply_threads(2) == "torch threads: 2 (train.threads)"
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
