"""Which reward functions a run uses: ``module:function`` (or ``path/file.py:function``)
specs imported once, at start-up, and the one among them that measures accuracy."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from grpo.config.errors import ConfigError
from grpo.config.imports import import_object
from grpo.rewards.runner import RewardError, RewardFunction


class RewardSpec(Protocol):
    """One configured reward, as plain values (a ``[[rewards]]`` table has these fields)."""

    @property
    def function(self) -> str: ...  # "module:function" or "path/file.py:function"
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


def resolve_function(
    spec: str, search_dirs: Sequence[str] = (), field: str = "reward function"
) -> Callable[..., Any]:
    """Import ``module:function`` or ``path/file.py:function`` once, at start-up; modules
    are looked for in ``search_dirs`` first (:mod:`grpo.config.imports`)."""
    fn = import_object(spec, search_dirs, field)
    if not callable(fn):
        raise ConfigError(f"{field}: {spec!r} is a {type(fn).__name__}, not a function")
    return fn


def resolve_reward_functions(
    specs: Sequence[RewardSpec], search_dirs: Sequence[str] = ()
) -> list[RewardFunction]:
    """Specs → :class:`RewardFunction` s; names are the function part of the spec (the whole
    spec where two functions share a name), ``options`` bound as keyword arguments."""
    functions: list[RewardFunction] = []
    for index, spec in enumerate(specs):
        name = spec.function.rpartition(":")[2]
        if any(f.name == name for f in functions):
            name = spec.function
        fn = resolve_function(spec.function, search_dirs, f"rewards[{index}].function")
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
