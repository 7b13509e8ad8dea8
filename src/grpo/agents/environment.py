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
naming the environment, the dataset file and row; ``zero`` ends the row with a total reward
of 0 (its ``[[rewards]]`` scores do not count); ``skip_group`` ends it and leaves its group
out of training (see :mod:`grpo.agents.replies`).

Steps of different rows run side by side on threads (``agent.tool_workers``): an
environment must keep its state in itself, and any randomness in a ``random.Random`` of its
own seeded from the row (``random.Random(row["id"])``, say), never the global ``random``
module, whose draws would interleave differently from run to run and between processes.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from grpo.agents.call_pool import CallTimeout
from grpo.config.errors import ConfigError, UserCodeError
from grpo.config.imports import import_object


class Environment(Protocol):
    def reset(self) -> list[dict[str, Any]]: ...

    def step(self, assistant_text: str) -> tuple[str | None, float | None, bool]: ...


class EnvironmentError_(UserCodeError):
    """An environment failed under ``env_on_error = "fail"``; names it and the row."""


class MalformedReturn(TypeError):
    """An environment's call returned something other than its contract says."""


def describe_failure(error: BaseException) -> str:
    """What went wrong in a call of the user's, in words: its exception, or grpo's own
    finding (a malformed return value, a timeout)."""
    if isinstance(error, (MalformedReturn, CallTimeout)):
        return str(error)
    return f"raised {type(error).__name__}: {error}"


def resolve_environment(
    spec: str, search_dirs: Sequence[str] = ()
) -> Callable[[dict[str, Any]], Environment]:
    """``module:Class`` or ``path/file.py:Class`` → the class, checked for ``reset`` and
    ``step``; modules are looked for in ``search_dirs`` first (:mod:`grpo.config.imports`)."""
    field = "agent.environment"
    cls = import_object(spec, search_dirs, field)
    name = spec.rpartition(":")[2]
    if not inspect.isclass(cls):
        raise ConfigError(f"{field}: {spec!r}: {name} is a {type(cls).__name__}, not a class")
    missing = [m for m in ("reset", "step") if not callable(getattr(cls, m, None))]
    if missing:
        lacks = " and ".join(f"{m}()" for m in missing)
        raise ConfigError(
            f"{field}: {spec!r}: class {name} lacks {lacks} (an environment has reset() and step())"
        )
    return cls


def check_step(value: Any) -> tuple[str | None, float | None, bool]:
    """A step's return value, checked: (observation | None, reward | None, done)."""
    if not (isinstance(value, tuple) and len(value) == 3):
        raise MalformedReturn(f"returned {value!r:.80}, not (observation, reward, done)")
    observation, reward, done = value
    if observation is not None and not isinstance(observation, str):
        raise MalformedReturn(f"returned the observation {observation!r:.80}, not a str or None")
    if reward is not None:
        try:
            reward = float(reward)
        except (TypeError, ValueError):
            raise MalformedReturn(f"returned the reward {reward!r:.80}, not a number") from None
    return observation, reward, bool(done)
