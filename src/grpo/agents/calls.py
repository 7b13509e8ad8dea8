"""Executing tool calls: every way a call can go wrong becomes an error text for the model
and a counted kind (``agent/<kind>/errors``), never an exception in the trainer.

Kinds: ``malformed_json`` and ``bad_arguments`` (from the parser), ``unknown_tool``,
``wrong_arguments`` (names or JSON types that do not fit the signature), ``raised``,
``timeout`` (the call outlived ``timeout_s``; see :mod:`grpo.agents.call_pool` for what
becomes of it), ``tool_result_type`` (a result that is not text or JSON, see
:func:`tool_result_text`) and ``too_long`` (a result over ``max_chars`` characters is cut;
the model sees the cut and a note). Calls that can run are :class:`Call` s for
:func:`~grpo.agents.call_pool.run_calls`, which runs a turn's calls side by side.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from grpo.agents.call_pool import Call, CallTimeout, Outcome, run_calls
from grpo.agents.parser import Parsed, ParseFailure
from grpo.agents.tools import argument_problem, tool_schema


@dataclass(frozen=True)
class CallResult:
    text: str  # what the model reads in the tool message
    error: str | None  # the error kind, None when the call succeeded
    seconds: float


# A raised exception's message can be anything: its text is bounded here (and then, as
# every tool message, by max_tool_response_tokens).
ERROR_CHARS = 500

# A tool's schema is read off its signature once, not at each of its calls.
_schema = functools.cache(tool_schema)

JSON_RESULTS = (dict, list, int, float, bool, type(None))  # written as JSON


class ToolResultTypeError(TypeError):
    """A tool returned something that is neither text nor a JSON value."""


def tool_result_text(value: Any) -> str:
    """The text the model reads for a tool's return value, by one rule: a ``str`` as it
    is; a dict, list, number, bool or None as ``json.dumps(value, ensure_ascii=False)``
    (``{"product": 1218}``, ``true``, ``null``); anything else (bytes, a set, an object) is
    a :class:`ToolResultTypeError`, as is a dict or list holding something JSON cannot
    write. ``str()`` or ``repr()`` never guesses a text for it."""
    if isinstance(value, str):
        return value
    if not isinstance(value, JSON_RESULTS):
        raise ToolResultTypeError(
            f"returned a {type(value).__name__}: a tool returns a str, or a dict, list, "
            "number, bool or None (written as JSON)"
        )
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError) as error:  # a set inside a dict, a circular list...
        raise ToolResultTypeError(
            f"returned a {type(value).__name__} that JSON cannot write ({error})"
        ) from None


def _text_of_call(fn: Callable[..., Any], **kwargs: Any) -> str:
    """``fn``'s result as text, made where the tool runs: a worker process sends back the
    text (or the error), never a value that might not pickle."""
    return tool_result_text(fn(**kwargs))


def prepare_call(
    call: Parsed, tools: dict[str, Callable[..., Any]], timeout_s: float, isolated: bool
) -> Call | CallResult:
    """A parsed call → the :class:`Call` to run, or at once the result of one that cannot
    run (it did not parse, names no tool, or its arguments do not fit the signature)."""
    if isinstance(call, ParseFailure):
        return CallResult(call.message, call.kind, 0.0)
    if call.name not in tools:
        text = f"error: unknown tool {call.name!r}; tools: {sorted(tools)}"
        return CallResult(text, "unknown_tool", 0.0)
    fn = tools[call.name]
    problem = argument_problem(_schema(fn), call.arguments)
    if problem is not None:
        return CallResult(f"error: {problem}", "wrong_arguments", 0.0)
    if isolated and not inspect.iscoroutinefunction(fn):
        fn = functools.partial(_text_of_call, fn)
    return Call(fn, kwargs=dict(call.arguments), timeout_s=timeout_s, isolated=isolated)


def finish_call(name: str, outcome: Outcome, max_chars: int) -> CallResult:
    """A run call's outcome → the text the model reads and its error kind. A raised error's
    text is at most ``ERROR_CHARS`` characters; a result over ``max_chars`` is cut
    (``too_long``)."""
    error, seconds = outcome.error, outcome.seconds
    if isinstance(error, CallTimeout):
        return CallResult(f"error: {name} {error}", "timeout", seconds)
    if error is None:
        try:
            text = tool_result_text(outcome.value)
        except ToolResultTypeError as wrong:
            error = wrong
    if isinstance(error, ToolResultTypeError):
        return CallResult(f"error: {name} {error}"[:ERROR_CHARS], "tool_result_type", seconds)
    if error is not None:
        text = f"error: {name} raised {type(error).__name__}: {error}"
        return CallResult(text[:ERROR_CHARS], "raised", seconds)
    if len(text) > max_chars:
        note = f"\n[cut: {len(text)} characters, the first {max_chars} shown]"
        return CallResult(text[:max_chars] + note, "too_long", seconds)
    return CallResult(text, None, seconds)


def execute_call(
    call: Parsed,
    tools: dict[str, Callable[..., Any]],
    timeout_s: float,
    max_chars: int,
    isolated: bool = False,
) -> CallResult:
    """One parsed call → its result text (or error text) and error kind."""
    prepared = prepare_call(call, tools, timeout_s, isolated)
    if isinstance(prepared, CallResult):
        return prepared
    (outcome,) = run_calls([prepared], workers=1)
    return finish_call(call.name, outcome, max_chars)
