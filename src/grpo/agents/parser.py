"""Tool-call parsers: an assistant turn's text → the tool calls it makes.

The default format is ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (Hermes,
Qwen). A parser is a function ``text -> list[ToolCall | ParseFailure]``; others are added
to :data:`PARSERS` under a name (``agent.parser``). A call the model botched is data, not
an exception: a :class:`ParseFailure` the rollout answers with its message.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ParseFailure:
    kind: str  # the metric's name: agent/<kind>/errors
    message: str  # what the model is told


Parsed = ToolCall | ParseFailure

_TOOL_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)


def parse_xml_json(text: str) -> list[Parsed]:
    """Every ``<tool_call>{json}</tool_call>`` block, in order; an unclosed last block is
    read to the end of the turn (a model often stops right after its call)."""
    calls: list[Parsed] = []
    for match in _TOOL_CALL.finditer(text):
        body = match.group(1).strip()
        try:
            value = json.loads(body)
        except json.JSONDecodeError as error:
            calls.append(ParseFailure("malformed_json", f"error: tool call is not JSON ({error})"))
            continue
        if not isinstance(value, dict) or not isinstance(value.get("name"), str):
            message = 'error: a tool call is {"name": <tool>, "arguments": {...}}'
            calls.append(ParseFailure("malformed_json", message))
            continue
        arguments = value.get("arguments", {})
        if isinstance(arguments, str):  # some models encode the arguments a second time
            with contextlib.suppress(json.JSONDecodeError):
                arguments = json.loads(arguments)
        if not isinstance(arguments, dict):
            message = f"error: the arguments of {value['name']!r} must be a JSON object"
            calls.append(ParseFailure("bad_arguments", message))
            continue
        calls.append(ToolCall(value["name"], arguments))
    return calls


PARSERS: dict[str, Callable[[str], list[Parsed]]] = {"xml_json": parse_xml_json}


def get_parser(name: str) -> Callable[[str], list[Parsed]]:
    if name not in PARSERS:
        raise ValueError(f"agent.parser: unknown parser {name!r}; known: {sorted(PARSERS)}")
    return PARSERS[name]
