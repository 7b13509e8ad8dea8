"""Tools: plain Python functions with type hints and a docstring.

A tool's JSON schema (the OpenAI / Hugging Face ``tools=`` form) comes from its signature:
``int`` → integer, ``float`` → number, ``str`` → string, ``bool`` → boolean, ``list`` →
array, ``dict`` → object; a parameter without a default is required; the docstring's
first paragraph is the description. Tools are named ``module:function`` (or
``path/to/file.py:function``) in the config; ``python`` is the built-in sandboxed
interpreter (:mod:`grpo.agents.python_tool`).
"""

from __future__ import annotations

import difflib
import inspect
import typing
from collections.abc import Callable, Sequence
from typing import Any

from grpo.config.errors import ConfigError
from grpo.config.imports import import_object

_JSON_TYPES: dict[Any, str] = {
    int: "integer",
    float: "number",
    str: "string",
    bool: "boolean",
    list: "array",
    dict: "object",
}


def _json_type(annotation: Any) -> str:
    origin = typing.get_origin(annotation) or annotation
    if origin not in _JSON_TYPES:
        raise TypeError(f"parameter type {annotation!r} has no JSON type (use {_type_names()})")
    return _JSON_TYPES[origin]


def _type_names() -> str:
    return ", ".join(t.__name__ for t in _JSON_TYPES)


def tool_schema(fn: Callable[..., Any]) -> dict[str, Any]:
    """The function's JSON schema; a clear error when it lacks hints or a docstring."""
    name = getattr(fn, "__name__", repr(fn))
    doc = inspect.getdoc(fn)
    if not doc:
        raise ValueError(f"tool {name!r} needs a docstring: it is the model's description")
    hints = typing.get_type_hints(fn)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for parameter in inspect.signature(fn).parameters.values():
        if parameter.name not in hints:
            raise ValueError(f"tool {name!r}: parameter {parameter.name!r} needs a type hint")
        try:
            properties[parameter.name] = {"type": _json_type(hints[parameter.name])}
        except TypeError as error:
            raise ValueError(f"tool {name!r}: parameter {parameter.name!r}: {error}") from None
        if parameter.default is inspect.Parameter.empty:
            required.append(parameter.name)
    description = doc.split("\n\n")[0].replace("\n", " ")
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


def _matches(value: Any, json_type: str) -> bool:
    if json_type == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if json_type == "number":  # JSON has one number type: an integer is a number
        return isinstance(value, int | float) and not isinstance(value, bool)
    expected = {"string": str, "boolean": bool, "array": list, "object": dict}[json_type]
    return isinstance(value, expected)


def argument_problem(schema: dict[str, Any], arguments: dict[str, Any]) -> str | None:
    """What is wrong with ``arguments`` for the tool (None: nothing)."""
    parameters = schema["function"]["parameters"]
    properties, name = parameters["properties"], schema["function"]["name"]
    unknown = sorted(set(arguments) - set(properties))
    if unknown:
        return f"{name} has no argument {unknown[0]!r} (it takes {sorted(properties)})"
    missing = [p for p in parameters["required"] if p not in arguments]
    if missing:
        return f"{name} needs the argument {missing[0]!r}"
    for key, value in arguments.items():
        expected = properties[key]["type"]
        if not _matches(value, expected):
            return f"{name}: argument {key!r} must be a JSON {expected}, not {value!r:.80}"
    return None


BUILT_IN_TOOLS = ("python",)


def resolve_tools(
    specs: Sequence[str], search_dirs: Sequence[str] = ()
) -> dict[str, Callable[..., Any]]:
    """``module:function`` or ``path/file.py:function`` specs (or ``python``) → the
    functions by tool name, each checked for type hints and a docstring; modules are looked
    for in ``search_dirs`` first (:mod:`grpo.config.imports`)."""
    tools: dict[str, Callable[..., Any]] = {}
    for index, spec in enumerate(specs):
        field = f"agent.tools[{index}]"
        fn = _tool(spec, search_dirs, field)
        try:
            tool_schema(fn)  # fails at start-up on a function without hints or a docstring
        except Exception as error:
            raise ConfigError(f"{field}: {spec!r}: {error}") from None
        if fn.__name__ in tools:
            raise ConfigError(f"agent.tools: two tools are named {fn.__name__!r}")
        tools[fn.__name__] = fn
    return tools


def _tool(spec: str, search_dirs: Sequence[str], field: str) -> Any:
    if spec == "python":
        from grpo.agents.python_tool import python

        return python
    if ":" not in spec:
        close = difflib.get_close_matches(spec, BUILT_IN_TOOLS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else "."
        raise ConfigError(
            f"{field}: {spec!r} is not a built-in tool ({', '.join(map(repr, BUILT_IN_TOOLS))})"
            f"{hint} A tool of your own is 'module:function' or 'path/to/file.py:function'"
        )
    fn = import_object(spec, search_dirs, field)
    if not callable(fn):
        raise ConfigError(f"{field}: {spec!r} is a {type(fn).__name__}, not a function")
    return fn
