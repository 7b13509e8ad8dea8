"""Environments: the other side of a multi-turn conversation.

An environment is a class named ``module:Class`` in ``agent.environment``. For each
rollout row it is created from the row's dataset record (``{"prompt": ..., **columns}``)::

    class Guess:
        def __init__(self, row: dict) -> None:
            self.secret = int(row["answer"])

        def reset(self) -> list[dict]:  # the opening messages
            return [{"role": "user", "content": "Guess my number (1-9)."}]

        def step(self, assistant_text: str) -> tuple[str | None, float | None, bool]:
            if assistant_text.strip() == str(self.secret):
                return None, 1.0, True  # no observation, reward 1, done
            return "No, try again.", None, False

``step`` answers each assistant turn that made no tool call: an observation (a user
message; None for none), an optional reward (the row's rewards add up) and whether the
episode is over. The G members of a group start from the same state by construction: one
environment is created and reset per prompt, and each member gets a deep copy of it.
A constructor, ``reset`` or ``step`` that raises or outlives ``agent.env_timeout_s`` is
handled by ``agent.env_on_error``, as a reward's ``on_error``: ``fail`` stops the run
naming the environment and the row, ``zero`` ends the row with reward 0, ``skip_group``
ends it and leaves its group out of training.
"""

from __future__ import annotations

import copy
import importlib
from collections.abc import Callable
from typing import Any, Protocol


class Environment(Protocol):
    def reset(self) -> list[dict[str, Any]]: ...

    def step(self, assistant_text: str) -> tuple[str | None, float | None, bool]: ...


class EnvironmentError_(RuntimeError):
    """An environment failed under ``env_on_error = "fail"``; names it and the row."""


def resolve_environment(spec: str) -> Callable[[dict[str, Any]], Environment]:
    """``module:Class`` → the class, checked for ``reset`` and ``step``."""
    module_name, _, attribute = spec.partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), attribute, None)
    except ImportError as error:
        raise ValueError(f"agent.environment: {spec!r}: cannot import: {error}") from None
    if cls is None or not all(callable(getattr(cls, m, None)) for m in ("reset", "step")):
        raise ValueError(f"agent.environment: {spec!r} is not a class with reset() and step()")
    return cls


def group_copies(environment: Environment, group_size: int) -> list[Environment]:
    """G deep copies of one reset environment: every member starts from its state."""
    try:
        return [copy.deepcopy(environment) for _ in range(group_size)]
    except Exception as error:
        name = type(environment).__name__
        raise EnvironmentError_(f"environment {name}: cannot be deep-copied: {error}") from None


def check_step(value: Any, name: str) -> tuple[str | None, float | None, bool]:
    """A step's return value, checked: (observation | None, reward | None, done)."""
    if not (isinstance(value, tuple) and len(value) == 3):
        raise TypeError(f"{name}.step must return (observation, reward, done), not {value!r:.80}")
    observation, reward, done = value
    if observation is not None and not isinstance(observation, str):
        raise TypeError(f"{name}.step: the observation must be a str or None")
    if reward is not None:
        reward = float(reward)
    return observation, reward, bool(done)
