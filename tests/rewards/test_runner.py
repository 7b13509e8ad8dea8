"""The reward runner: failure policies, timeouts, concurrency, async functions, metrics."""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest
import torch

from grpo.algo.groups import skipped_groups
from grpo.config import RewardConfig
from grpo.rewards import RewardError, RewardFunction, resolve_reward_functions, score_completions

PROMPTS = ["p0", "p1", "p2", "p3"]
COMPLETIONS = ["c0", "c1", "bad", "c3"]  # two groups of two
G = 2
RELEASE = threading.Event()  # lets "hanging" functions end once the test is over


@pytest.fixture(autouse=True)
def release_hung_threads() -> Iterator[None]:
    RELEASE.clear()
    yield
    RELEASE.set()


def ones(prompts, completions, **_):
    return [1.0] * len(completions)


def raises(prompts, completions, **_):
    raise ValueError("boom")


def raises_on_bad_row(prompts, completions, **_):
    if "bad" in completions:
        raise KeyError("no answer")
    return [1.0] * len(completions)


def hangs(prompts, completions, **_):
    RELEASE.wait(30)
    return [1.0] * len(completions)


def nan_in_row_1(prompts, completions, **_):
    return [1.0, math.nan, 1.0, 1.0]


def inf_in_row_3(prompts, completions, **_):
    return [1.0, 1.0, 1.0, -math.inf]


def too_few(prompts, completions, **_):
    return [1.0] * (len(completions) - 1)


def strings_and_none(prompts, completions, **_):
    return [1.0, "1.0", 1.0, None]


def not_a_list(prompts, completions, **_):
    return 1.0


ALL = {0, 1, 2, 3}
# (function, timeout_s, rows it fails on, words the failure message has, row named by "fail")
FAILURES = [
    (raises, 0.0, ALL, "ValueError: boom", 0),  # row 0 is the first to raise on its own
    (raises_on_bad_row, 0.0, ALL, "KeyError", 2),
    (hangs, 0.5, ALL, "timeout_s=0.5", None),
    (nan_in_row_1, 0.0, {1}, "nan", 1),
    (inf_in_row_3, 0.0, {3}, "inf", 3),
    (too_few, 0.0, ALL, "3 values for 4 completions", None),
    (strings_and_none, 0.0, {1, 3}, "not a finite number", 1),
    (not_a_list, 0.0, ALL, "not a list", None),
]
IDS = [case[0].__name__ for case in FAILURES]


def run(*functions: RewardFunction):
    return score_completions(list(functions), PROMPTS, COMPLETIONS, {"answer": ["1"] * 4})


@pytest.mark.parametrize(("fn", "timeout", "bad_rows", "words", "named_row"), FAILURES, ids=IDS)
def test_fail_raises_naming_function_row_and_completion(
    fn, timeout, bad_rows, words, named_row
) -> None:
    started = time.monotonic()
    with pytest.raises(RewardError) as caught:
        run(
            RewardFunction("ok", ones),
            RewardFunction("flaky", fn, timeout_s=timeout, on_error="fail"),
        )
    message = str(caught.value)
    assert "'flaky'" in message and words in message
    assert caught.value.function == "flaky" and caught.value.row == named_row
    if named_row is not None:
        assert f"row {named_row}" in message and repr(COMPLETIONS[named_row]) in message
    else:
        assert "whole call" in message and repr(COMPLETIONS[0]) in message
    assert time.monotonic() - started < timeout + 3.0


@pytest.mark.parametrize(("fn", "timeout", "bad_rows", "words", "named_row"), FAILURES, ids=IDS)
def test_zero_substitutes_only_failing_rows_and_counts_them(
    fn, timeout, bad_rows, words, named_row
) -> None:
    scores = run(
        RewardFunction("ok", ones), RewardFunction("flaky", fn, timeout_s=timeout, on_error="zero")
    )
    expected = [0.0 if row in bad_rows else 1.0 for row in range(4)]
    assert scores.per_function["flaky"].tolist() == expected
    assert scores.total_B.tolist() == [1.0 + value for value in expected]
    assert not scores.skip_B.any()
    assert scores.metrics["reward/flaky/errors"] == len(bad_rows)
    assert scores.metrics["reward/ok/errors"] == 0.0
    assert scores.metrics["reward/total/errors"] == len(bad_rows)
    assert all(words in line for line in scores.errors["flaky"])


@pytest.mark.parametrize(("fn", "timeout", "bad_rows", "words", "named_row"), FAILURES, ids=IDS)
def test_skip_group_marks_the_failing_rows_and_their_groups_are_skipped(
    fn, timeout, bad_rows, words, named_row
) -> None:
    scores = run(
        RewardFunction("ok", ones),
        RewardFunction("flaky", fn, timeout_s=timeout, on_error="skip_group"),
    )
    assert scores.skip_B.tolist() == [row in bad_rows for row in range(4)]
    bad_groups = {row // G for row in bad_rows}
    assert skipped_groups(scores.skip_B, G).tolist() == [n in bad_groups for n in range(4 // G)]
    assert scores.metrics["reward/flaky/errors"] == len(bad_rows)
    assert all(math.isfinite(v) for v in scores.total_B.tolist())


def test_functions_run_concurrently() -> None:
    def sleepy(prompts, completions, **_):
        time.sleep(1.0)
        return [0.5] * len(completions)

    started = time.monotonic()
    scores = run(RewardFunction("a", sleepy), RewardFunction("b", sleepy))
    assert time.monotonic() - started < 1.8
    assert scores.total_B.tolist() == [1.0] * 4
    assert 0.9 < scores.metrics["reward/a/seconds"] < 1.8


def test_async_functions_are_supported_and_concurrent() -> None:
    async def async_sleepy(prompts, completions, **columns):
        await asyncio.sleep(1.0)
        return [float(a) for a in columns["answer"]]

    def sleepy(prompts, completions, **_):
        time.sleep(1.0)
        return [1.0] * len(completions)

    started = time.monotonic()
    scores = run(RewardFunction("async", async_sleepy), RewardFunction("sync", sleepy))
    assert time.monotonic() - started < 1.8
    assert scores.per_function["async"].tolist() == [1.0] * 4


def test_async_timeout_is_an_error() -> None:
    async def never(prompts, completions, **_):
        await asyncio.sleep(30)

    started = time.monotonic()
    scores = run(RewardFunction("never", never, timeout_s=0.3, on_error="zero"))
    assert time.monotonic() - started < 2.3
    assert scores.metrics["reward/never/errors"] == 4


def test_metrics_weighted_total_and_value_types() -> None:
    def numpy_values(prompts, completions, **_):
        return np.array([1.0, 2.0, 3.0, 4.0])

    def tensor_values(prompts, completions, **_):
        return torch.tensor([True, False, True, False])

    def mixed(prompts, completions, **_):
        return [np.float32(1.0), True, 0, torch.tensor(2.0)]

    scores = run(
        RewardFunction("np", numpy_values, weight=2.0),
        RewardFunction("pt", tensor_values, weight=0.5),
        RewardFunction("mixed", mixed, weight=0.0),
    )
    assert scores.total_B.tolist() == [2.5, 4.0, 6.5, 8.0]
    assert scores.per_function["mixed"].tolist() == [1.0, 1.0, 0.0, 2.0]
    for name in ("np", "pt", "mixed", "total"):
        for key in ("mean", "std", "errors", "seconds"):
            assert f"reward/{name}/{key}" in scores.metrics
    assert scores.metrics["reward/np/mean"] == pytest.approx(2.5)
    assert scores.metrics["reward/np/std"] == pytest.approx(np.std([1, 2, 3, 4]))
    assert scores.metrics["reward/total/mean"] == pytest.approx(5.25)
    assert scores.total_B.dtype == torch.float32 and scores.skip_B.dtype == torch.bool


def test_mean_and_std_are_over_the_rows_the_function_scored() -> None:
    def partly_nan(prompts, completions, **_):
        return [1.0, math.nan, 3.0, 5.0]

    scores = run(RewardFunction("f", partly_nan, on_error="zero"))
    assert scores.metrics["reward/f/mean"] == pytest.approx(3.0)
    assert scores.metrics["reward/total/mean"] == pytest.approx(9.0 / 4)


def test_resolve_binds_options_and_keeps_attributes() -> None:
    configs = [
        RewardConfig(function="grpo.rewards:numeric_answer", timeout_s=2.0, on_error="zero"),
        RewardConfig(function="grpo.rewards:math_equivalence", options={"rel_tol": 0.01}),
    ]
    numeric, maths = resolve_reward_functions(configs)
    assert (numeric.name, numeric.timeout_s, numeric.on_error) == ("numeric_answer", 2.0, "zero")
    assert getattr(numeric.fn, "is_accuracy", False)
    assert maths.fn([""], ["\\boxed{3.14}"], answer=["3.141"]) == [1.0]
