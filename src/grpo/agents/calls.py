"""Executing tool calls: every way a call can go wrong becomes an error text for the model
and a counted kind (``agent/<kind>/errors``), never an exception in the trainer.

Kinds: ``malformed_json`` and ``bad_arguments`` (from the parser), ``unknown_tool``,
``wrong_arguments`` (names or JSON types that do not fit the signature), ``raised``,
``timeout`` (the call outlived ``timeout_s``; it keeps running in its daemon thread, since
Python cannot stop a thread, and its result is ignored) and ``too_long`` (a result over
``max_chars`` characters is cut; the model sees the cut and a note).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any

from grpo.agents.parser import Parsed, ParseFailure
from grpo.agents.tools import argument_problem, tool_schema


@dataclass(frozen=True)
class CallResult:
    text: str  # what the model reads in the tool message
    error: str | None  # the error kind, None when the call succeeded
    seconds: float


class CallTimeout(Exception):
    """A call outlived its timeout."""


def call_with_timeout(fn: Callable[..., Any], timeout_s: float, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` in a daemon thread (a hung call must not block the trainer or
    its exit); its exception is re-raised here; :class:`CallTimeout` after ``timeout_s``
    (0: no limit)."""
    future: Future = Future()

    def target() -> None:
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as error:  # reported in the caller's thread
            future.set_exception(error)

    threading.Thread(target=target, name="agent-call", daemon=True).start()
    try:
        return future.result(timeout=timeout_s if timeout_s > 0 else None)
    except FutureTimeout:
        raise CallTimeout(f"timed out after {timeout_s:g} s") from None


def execute_call(
    call: Parsed, tools: dict[str, Callable[..., Any]], timeout_s: float, max_chars: int
) -> CallResult:
    """One parsed call → its result text (or error text) and error kind."""
    started = time.perf_counter()

    def done(text: str, error: str | None = None) -> CallResult:
        return CallResult(text, error, time.perf_counter() - started)

    if isinstance(call, ParseFailure):
        return done(call.message, call.kind)
    if call.name not in tools:
        return done(f"error: unknown tool {call.name!r}; tools: {sorted(tools)}", "unknown_tool")
    fn = tools[call.name]
    problem = argument_problem(tool_schema(fn), call.arguments)
    if problem is not None:
        return done(f"error: {problem}", "wrong_arguments")
    try:
        value = call_with_timeout(fn, timeout_s, **call.arguments)
    except CallTimeout as error:
        return done(f"error: {call.name} {error}", "timeout")
    except Exception as error:
        return done(f"error: {call.name} raised {type(error).__name__}: {error}"[:500], "raised")
    text = value if isinstance(value, str) else repr(value)
    if len(text) > max_chars:
        note = f"\n[cut: {len(text)} characters, the first {max_chars} shown]"
        return done(text[:max_chars] + note, "too_long")
    return done(text)
