"""Running reward functions over a step's completions and combining them.

Contract of a reward function: ``fn(prompts: list[str], completions: list[str], **columns)
-> list[float]``, with every dataset column passed by name (one value per completion).
"""

from __future__ import annotations

import functools
import importlib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch


class RewardError(RuntimeError):
    """A reward function failed; the message names the function, the row and the completion."""


@dataclass(frozen=True)
class RewardFunction:
    name: str
    fn: Callable[..., Any]
    weight: float = 1.0
    timeout_s: float = 0.0
    on_error: str = "fail"


@dataclass
class RewardScores:
    total_B: torch.Tensor  # weighted sum over functions, float32
    per_function: dict[str, torch.Tensor]  # name -> (B,) raw values
    skip_B: torch.Tensor  # bool: the row's group must not be trained on
    metrics: dict[str, float]


def resolve_function(spec: str) -> Callable[..., Any]:
    """Import ``module:function`` once, at start-up."""
    module_name, _, attribute = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise RewardError(f"reward function {spec!r}: cannot import {module_name!r}: {error}") from None
    fn = getattr(module, attribute, None)
    if not callable(fn):
        raise RewardError(f"reward function {spec!r}: {module_name} has no callable {attribute!r}")
    return fn


def resolve_reward_functions(configs: Sequence[Any]) -> list[RewardFunction]:
    """RewardConfig list → RewardFunction list; names are the function part of the spec."""
    functions = []
    for config in configs:
        name = config.function.partition(":")[2]
        if any(f.name == name for f in functions):
            name = config.function
        fn = resolve_function(config.function)
        if config.options:
            fn = functools.wraps(fn)(functools.partial(fn, **config.options))
        functions.append(
            RewardFunction(
                name=name,
                fn=fn,
                weight=config.weight,
                timeout_s=config.timeout_s,
                on_error=config.on_error,
            )
        )
    return functions


def _check_values(function: RewardFunction, values: Any, completions: list[str]) -> list[float]:
    if not isinstance(values, (list, tuple)) or len(values) != len(completions):
        count = len(values) if isinstance(values, (list, tuple)) else type(values).__name__
        raise RewardError(f"reward {function.name!r} returned {count} values for {len(completions)} completions")
    checked = []
    for row, value in enumerate(values):
        number = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
        if number is None or not math.isfinite(number):
            raise RewardError(
                f"reward {function.name!r} gave {value!r} for row {row} "
                f"(completion {completions[row][:200]!r})"
            )
        checked.append(number)
    return checked


def score_completions(
    functions: Sequence[RewardFunction],
    prompts: list[str],
    completions: list[str],
    columns: dict[str, list[Any]],
    *,
    group_size: int,
) -> RewardScores:
    """Run every reward function; returns the weighted total and per-function values."""
    batch = len(completions)
    total_B = torch.zeros(batch, dtype=torch.float32)
    per_function: dict[str, torch.Tensor] = {}
    metrics: dict[str, float] = {}
    for function in functions:
        started = time.perf_counter()
        try:
            values = _check_values(function, function.fn(prompts, completions, **columns), completions)
        except RewardError:
            raise
        except Exception as error:
            raise RewardError(f"reward {function.name!r} raised {type(error).__name__}: {error}") from error
        values_B = torch.tensor(values, dtype=torch.float32)
        per_function[function.name] = values_B
        total_B += function.weight * values_B
        metrics[f"reward/{function.name}/mean"] = values_B.mean().item()
        metrics[f"reward/{function.name}/std"] = values_B.std(unbiased=False).item()
        metrics[f"reward/{function.name}/errors"] = 0.0
        metrics[f"reward/{function.name}/seconds"] = time.perf_counter() - started
    return RewardScores(
        total_B=total_B,
        per_function=per_function,
        skip_B=torch.zeros(batch, dtype=torch.bool),
        metrics=metrics,
    )
