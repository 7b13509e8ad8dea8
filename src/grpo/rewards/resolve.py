"""Which reward functions a run uses: ``module:function`` specs imported once, at start-up,
and the one among them that measures accuracy."""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from grpo.rewards.runner import RewardError, RewardFunction


class RewardSpec(Protocol):
    """One configured reward, as plain values (a ``[[rewards]]`` table has these fields)."""

    @property
    def function(self) -> str: ...  # "module:function"
    @property
    def weight(self) -> float: ...
    @property
    def timeout_s(self) -> float: ...
    @property
    def on_error(self) -> str: ...
    @property
    def options(self) -> dict[str, Any]: ...
    @property
    def accuracy(self) -> bool: ...


def resolve_function(spec: str) -> Callable[..., Any]:
    """Import ``module:function`` once, at start-up."""
    module_name, _, attribute = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise RewardError(
            f"reward function {spec!r}: cannot import {module_name!r}: {error}"
        ) from None
    fn = getattr(module, attribute, None)
    if not callable(fn):
        raise RewardError(f"reward function {spec!r}: {module_name} has no callable {attribute!r}")
    return fn


def resolve_reward_functions(specs: Sequence[RewardSpec]) -> list[RewardFunction]:
    """Specs → :class:`RewardFunction` s; names are the function part of the spec (the whole
    spec where two functions share a name), ``options`` bound as keyword arguments."""
    functions: list[RewardFunction] = []
    for spec in specs:
        name = spec.function.partition(":")[2]
        if any(f.name == name for f in functions):
            name = spec.function
        fn = resolve_function(spec.function)
        if spec.options:
            fn = functools.wraps(fn)(functools.partial(fn, **spec.options))
        if spec.on_error not in ("fail", "zero", "skip_group"):
            raise RewardError(f"reward {name!r}: on_error must be fail, zero or skip_group")
        functions.append(
            RewardFunction(
                name=name,
                fn=fn,
                weight=spec.weight,
                timeout_s=spec.timeout_s,
                on_error=spec.on_error,
                accuracy=spec.accuracy,
            )
        )
    marked = [f.name for f in functions if f.accuracy]
    if len(marked) > 1:
        raise RewardError(f"rewards {marked} all set accuracy = true; at most one may")
    return functions


def accuracy_reward(functions: Sequence[RewardFunction]) -> RewardFunction | None:
    """The function behind the ``accuracy`` metric, the ``groups/*`` counts, the
    curriculum's successes and evaluation: the one configured with ``accuracy = true``,
    else the first built-in that checks correctness (``fn.is_accuracy``), else None."""
    marked = [f for f in functions if f.accuracy]
    if len(marked) > 1:
        raise RewardError(f"rewards {[f.name for f in marked]} all set accuracy = true")
    if marked:
        return marked[0]
    return next((f for f in functions if getattr(f.fn, "is_accuracy", False)), None)
