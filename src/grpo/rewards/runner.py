"""Running reward functions over a step's completions and combining them.

Contract of a reward function: ``fn(prompts: list[str], completions: list[str], **columns)
-> list[float]``, with every dataset column passed by name (one value per completion). It
may be ``async def``. It returns one finite number per completion: a list, tuple, NumPy
array or 1-D tensor; bools count as 0/1.

All functions of a step run at the same time, each in its own thread (``async``
functions get an event loop in theirs), so one slow function does not hold up the others
and the step takes as long as the slowest. A function that raises, outlives its
``timeout_s``, returns the wrong number of values or something other than a list, or a
value that is not a finite number is handled by its ``on_error``:

* ``"fail"`` (default): :class:`RewardError` naming the function, the row (its index in
  the step) and the completion. When the whole call raised, the rows are retried one at a
  time (for at most 30 s) to name the first row that fails alone.
* ``"zero"``: 0.0 for the failing rows (every row when the whole call failed).
* ``"skip_group"``: the failing rows' groups are marked in ``skip_B`` and left out of
  training; their values are 0.0.

A bad value fails only its own row; the others keep their values. Every substituted row is
counted in ``reward/<name>/errors``. A function that times out keeps running in its
(daemon) thread, since Python cannot stop a thread; its result is ignored. Give
``timeout_s`` to functions that can hang, and make them stop by themselves if they can.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import numbers
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any

import torch

from grpo.config.errors import UserCodeError

_LOCATE_BUDGET_S = 30.0  # at most this long retrying rows singly to name the failing one


class RewardError(UserCodeError):
    """A reward function failed; the message names the function, the row and the completion."""

    def __init__(
        self, message: str, function: str = "", row: int | None = None, detail: str = ""
    ) -> None:
        super().__init__(message)
        self.function = function
        self.row = row  # None: the whole call, no single row to blame
        self.detail = detail  # what went wrong and the completion, without the row

    def at(self, where: str) -> RewardError:
        """The same failure with its row named as ``where`` (the dataset file and row)."""
        message = f"reward {self.function!r}: {where}: {self.detail}"
        return RewardError(message, self.function, self.row, self.detail)


@dataclass(frozen=True)
class RewardFunction:
    name: str
    fn: Callable[..., Any]
    weight: float = 1.0
    timeout_s: float = 0.0  # 0 = no limit
    on_error: str = "fail"  # "fail" | "zero" | "skip_group"
    accuracy: bool = False  # marked ``accuracy = true``: its value ≥ 1 means correct


@dataclass
class RewardScores:
    total_B: torch.Tensor  # weighted sum over functions, float32
    per_function: dict[str, torch.Tensor]  # name -> (B,) raw values (0.0 where substituted)
    skip_B: torch.Tensor  # bool: not scored under on_error = "skip_group" (its group is skipped)
    metrics: dict[str, float]
    errors: dict[str, list[str]] = field(default_factory=dict)  # name -> what was substituted

    @staticmethod
    def cat(parts: list[RewardScores], metrics: dict[str, float]) -> RewardScores:
        """Blocks of rows side by side, in order; ``metrics`` are the caller's combination
        of the parts' (blocks of one round combine like processes, rounds like rounds)."""
        return RewardScores(
            total_B=torch.cat([s.total_B for s in parts]),
            per_function={
                name: torch.cat([s.per_function[name] for s in parts])
                for name in parts[0].per_function
            },
            skip_B=torch.cat([s.skip_B for s in parts]),
            metrics=metrics,
            errors={
                name: [e for s in parts for e in s.errors.get(name, [])]
                for name in {name for s in parts for name in s.errors}
            },
        )


# --- calling ---------------------------------------------------------------------------


def _invoke(
    function: RewardFunction, prompts: list[str], completions: list[str], columns: dict
) -> Any:
    """Call the function in this thread; an awaitable result is run to completion here."""
    result = function.fn(prompts, completions, **columns)
    if inspect.isawaitable(result):

        async def finish() -> Any:
            if function.timeout_s > 0:  # cancels a cooperative coroutine in time
                return await asyncio.wait_for(result, function.timeout_s)
            return await result

        result = asyncio.run(finish())
    return result


def _start(
    function: RewardFunction, prompts: list[str], completions: list[str], columns: dict
) -> Future:
    """Run the function in a daemon thread (a hung one must not block interpreter exit)."""
    future: Future = Future()
    began = time.monotonic()

    def target() -> None:
        try:
            result = _invoke(function, prompts, completions, columns)
        except BaseException as error:  # reported, not raised, in this thread
            future.seconds = time.monotonic() - began  # type: ignore[attr-defined]
            future.set_exception(error)
        else:
            future.seconds = time.monotonic() - began  # type: ignore[attr-defined]
            future.set_result(result)

    threading.Thread(target=target, name=f"reward:{function.name}", daemon=True).start()
    return future


def _wait(future: Future, deadline: float | None) -> Any:
    """The result; raises the function's exception, or TimeoutError past the deadline."""
    remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
    try:
        return future.result(timeout=remaining)
    except FutureTimeout:
        raise TimeoutError from None


# --- checking --------------------------------------------------------------------------


class _CallError(Exception):
    """The whole call returned the wrong shape: not a list, or not one value per row."""


def _as_list(values: Any, batch: int) -> list[Any]:
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu().reshape(-1).tolist() if values.dim() == 1 else values
    elif type(values).__module__ == "numpy" and getattr(values, "ndim", None) == 1:
        values = values.tolist()
    if not isinstance(values, (list, tuple)):
        raise _CallError(f"returned a {type(values).__name__}, not a list of {batch} numbers")
    if len(values) != batch:
        raise _CallError(f"returned {len(values)} values for {batch} completions")
    return list(values)


def _as_number(value: Any) -> float | None:
    """A finite float, or None for anything else (NaN, inf, None, a string, a list...)."""
    if isinstance(value, (str, bytes)) or value is None:
        return None
    if isinstance(value, numbers.Real) or hasattr(type(value), "__float__"):
        try:
            number = float(value)
        except (TypeError, ValueError):
            return None
        return number if math.isfinite(number) else None
    return None


def _row_problems(values: list[Any]) -> dict[int, str]:
    return {
        row: f"gave {value!r:.80}, not a finite number"
        for row, value in enumerate(values)
        if _as_number(value) is None
    }


def _describe(error: BaseException, function: RewardFunction) -> str:
    if isinstance(error, (TimeoutError, asyncio.TimeoutError)):
        return f"did not finish within timeout_s={function.timeout_s:g} s"
    if isinstance(error, _CallError):
        return str(error)
    return f"raised {type(error).__name__}: {error}"


def _locate_row(
    function: RewardFunction, prompts: list[str], completions: list[str], columns: dict
) -> tuple[int, str] | None:
    """The first row that fails on its own (raise or bad value), within the budget."""
    deadline = time.monotonic() + _LOCATE_BUDGET_S
    for row in range(len(completions)):
        if time.monotonic() >= deadline:
            return None
        single = {name: [values[row]] for name, values in columns.items()}
        own_limit = time.monotonic() + function.timeout_s if function.timeout_s > 0 else deadline
        try:
            future = _start(function, [prompts[row]], [completions[row]], single)
            values = _as_list(_wait(future, min(deadline, own_limit)), 1)
        except TimeoutError as error:
            if function.timeout_s <= 0 or own_limit > deadline:
                return None  # the budget ran out, not the function's own timeout
            return row, _describe(error, function)
        except BaseException as error:
            return row, _describe(error, function)
        if _as_number(values[0]) is None:
            return row, f"gave {values[0]!r:.80}, not a finite number"
    return None


def _failure(
    function: RewardFunction, what: str, row: int | None, completions: list[str]
) -> RewardError:
    where = f"row {row}" if row is not None else f"the whole call (rows 0-{len(completions) - 1})"
    shown = completions[row if row is not None else 0] if completions else ""
    label = "completion" if row is not None else "first completion"
    detail = (
        f"{what}; {label}: {shown[:200]!r}. "
        "Set on_error = 'zero' or 'skip_group' to substitute instead of failing."
    )
    return RewardError(
        f"reward {function.name!r} {what} at {where}; {detail}", function.name, row, detail
    )


# --- scoring ---------------------------------------------------------------------------


def _collect(
    function: RewardFunction,
    future: Future,
    started: float,
    prompts: list[str],
    completions: list[str],
    columns: dict[str, list[Any]],
) -> tuple[list[Any], dict[int, str]]:
    """One function's values and its rows' problems (row → what went wrong); under
    ``on_error = "fail"`` a problem raises :class:`RewardError` naming the row instead."""
    batch = len(completions)
    deadline = started + function.timeout_s if function.timeout_s > 0 else None
    try:
        values = _as_list(_wait(future, deadline), batch)
        problems = _row_problems(values)
    except BaseException as error:
        if isinstance(error, KeyboardInterrupt):
            raise
        what = _describe(error, function)
        if function.on_error == "fail":
            located = None
            if not isinstance(error, (TimeoutError, _CallError)):  # it raised: find where
                located = _locate_row(function, prompts, completions, columns)
            if located is not None:
                alone = "too" if located[1] == what else located[1]
                what = f"{what} (on the whole call; alone, this row {alone})"
            row = located[0] if located is not None else None
            raise _failure(function, what, row, completions) from error
        values, problems = [0.0] * batch, dict.fromkeys(range(batch), what)
    if problems and function.on_error == "fail":
        row, what = min(problems.items())
        raise _failure(function, what, row, completions)
    if problems and function.on_error not in ("zero", "skip_group"):
        raise RewardError(f"reward {function.name!r}: unknown on_error {function.on_error!r}")
    return values, problems


def _function_metrics(
    name: str, numbers_B: torch.Tensor, problems: dict[int, str], seconds: float
) -> dict[str, float]:
    """``reward/<name>/…``: mean and population std over the rows it scored, errors, seconds."""
    scored_B = torch.tensor(
        [row not in problems for row in range(len(numbers_B))], dtype=torch.bool
    )
    valid = numbers_B[scored_B]
    return {
        f"reward/{name}/mean": valid.mean().item() if valid.numel() else 0.0,
        f"reward/{name}/std": valid.std(unbiased=False).item() if valid.numel() else 0.0,
        f"reward/{name}/errors": float(len(problems)),
        f"reward/{name}/seconds": seconds,
    }


def score_completions(
    functions: Sequence[RewardFunction],
    prompts: list[str],
    completions: list[str],
    columns: dict[str, list[Any]],
    failed_B: torch.Tensor | None = None,
) -> RewardScores:
    """Run every reward function concurrently; returns the weighted total, per-function
    values, the rows not scored under ``on_error = "skip_group"`` (their groups are skipped:
    :func:`grpo.algo.groups.skipped_groups`), and metrics (per function: mean and std over
    the rows it scored, errors substituted, seconds; and the same for the total).
    ``failed_B`` (bool): rows whose trajectory failed (an agent's environment): their total
    is 0 whatever the functions gave them."""
    batch = len(completions)
    started = time.monotonic()
    futures = [_start(function, prompts, completions, columns) for function in functions]
    total_B = torch.zeros(batch, dtype=torch.float32)
    skip_B = torch.zeros(batch, dtype=torch.bool)
    per_function: dict[str, torch.Tensor] = {}
    metrics: dict[str, float] = {}
    errors: dict[str, list[str]] = {}
    for function, future in zip(functions, futures, strict=True):
        values, problems = _collect(function, future, started, prompts, completions, columns)
        # Its own running time; a function still running (timed out) ran until now.
        seconds = getattr(future, "seconds", time.monotonic() - started)
        numbers_B = torch.tensor(
            [0.0 if row in problems else _as_number(value) for row, value in enumerate(values)],
            dtype=torch.float32,
        )
        if problems and function.on_error == "skip_group":
            skip_B[sorted(problems)] = True
        per_function[function.name] = numbers_B
        total_B += function.weight * numbers_B
        metrics |= _function_metrics(function.name, numbers_B, problems, seconds)
        if problems:
            errors[function.name] = [f"row {row}: {what}" for row, what in sorted(problems.items())]
    if failed_B is not None:
        total_B = total_B.masked_fill(failed_B, 0.0)
    metrics["reward/total/mean"] = total_B.mean().item() if batch else 0.0
    metrics["reward/total/std"] = total_B.std(unbiased=False).item() if batch else 0.0
    metrics["reward/total/errors"] = float(sum(len(rows) for rows in errors.values()))
    metrics["reward/total/seconds"] = time.monotonic() - started
    return RewardScores(
        total_B=total_B, per_function=per_function, skip_B=skip_B, metrics=metrics, errors=errors
    )
