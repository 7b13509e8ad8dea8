"""How a tool's return value becomes the text the model reads, by one rule, the same under
threads and processes: a str as it is; a dict, list, number, bool or None as JSON
(``json.dumps(value, ensure_ascii=False)``); anything else an error of the kind
``tool_result_type``, never Python's ``repr``."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import torch

from grpo.agents.calls import execute_call
from grpo.agents.chat import ChatFormat
from grpo.agents.parser import ToolCall, parse_xml_json
from grpo.agents.tools import tool_schema
from grpo.agents.trajectories import AgentSettings, run_trajectories
from grpo.rollout.engine import SamplingParams

from .conftest import ScriptedEngine, ascii_tokenizer

LOCK = threading.Lock()  # an object that neither JSON nor pickle can carry


class Product:
    """An object with a friendly repr: still not text, so still an error."""

    def __repr__(self) -> str:
        return "Product(1218)"


# Each tool returns one value; each is a tool of its own so that it runs in a worker process
# (where the conversion must happen, before the value would be pickled).
def as_str() -> str:
    """Returns text."""
    return "1218"


def as_dict() -> dict:
    """Returns a dict."""
    return {"product": 1218, "unit": "m²"}


def as_list() -> list:
    """Returns a list."""
    return [12, 0.5, "x", None]


def as_int() -> int:
    """Returns an integer."""
    return 1218


def as_float() -> float:
    """Returns a float."""
    return 0.25


def as_bool() -> bool:
    """Returns a bool."""
    return True


def as_none() -> None:
    """Returns None."""
    return None


def as_bytes() -> Any:
    """Returns bytes."""
    return b"1218"


def as_set() -> Any:
    """Returns a set."""
    return {1218}


def as_tuple() -> Any:
    """Returns a tuple."""
    return (12, 18)


def as_object() -> Any:
    """Returns an object."""
    return Product()


def as_lock() -> Any:
    """Returns a lock (unpicklable)."""
    return LOCK


def as_dict_with_a_set() -> Any:
    """Returns a dict JSON cannot write."""
    return {"product": {1218}}


TOOLS = {fn.__name__: fn for fn in (as_str, as_dict, as_list, as_int, as_float, as_bool)}
TOOLS |= {fn.__name__: fn for fn in (as_none, as_bytes, as_set, as_tuple, as_object, as_lock)}
TOOLS |= {"as_dict_with_a_set": as_dict_with_a_set}

TEXTS = {
    "as_str": "1218",
    "as_dict": '{"product": 1218, "unit": "m²"}',
    "as_list": '[12, 0.5, "x", null]',
    "as_int": "1218",
    "as_float": "0.25",
    "as_bool": "true",
    "as_none": "null",
}
ERRORS = {
    "as_bytes": "error: as_bytes returned a bytes: a tool returns a str, or a dict, list, "
    "number, bool or None (written as JSON)",
    "as_set": "error: as_set returned a set: a tool returns a str",
    "as_tuple": "error: as_tuple returned a tuple: a tool returns a str",
    "as_object": "error: as_object returned a Product: a tool returns a str",
    "as_lock": "error: as_lock returned a lock: a tool returns a str",
    "as_dict_with_a_set": "error: as_dict_with_a_set returned a dict that JSON cannot write "
    "(Object of type set is not JSON serializable)",
}


@pytest.mark.parametrize("isolated", [False, True], ids=["threads", "processes"])
@pytest.mark.parametrize("name", list(TEXTS))
def test_text_and_json_values_become_their_text(name: str, isolated: bool) -> None:
    result = execute_call(ToolCall(name), TOOLS, 30.0, 1000, isolated=isolated)
    assert (result.text, result.error) == (TEXTS[name], None)


@pytest.mark.parametrize("isolated", [False, True], ids=["threads", "processes"])
@pytest.mark.parametrize("name", list(ERRORS))
def test_any_other_value_is_a_tool_result_type_error(name: str, isolated: bool) -> None:
    result = execute_call(ToolCall(name), TOOLS, 30.0, 1000, isolated=isolated)
    assert result.error == "tool_result_type"
    assert result.text.startswith(ERRORS[name])
    assert "1218" not in result.text and "unlocked" not in result.text  # no repr of the value


def test_the_model_reads_the_error_and_it_is_counted(ascii_model_dir) -> None:
    """One row calls as_dict, as_bytes and as_lock in a turn, then answers: the dict comes
    back as JSON, the other two as errors, counted in agent/tool_result_type/errors."""
    from transformers import AutoModelForCausalLM

    tokenizer = ascii_tokenizer()
    model = AutoModelForCausalLM.from_pretrained(ascii_model_dir)
    turn = "".join(
        f'<tool_call>{{"name": "{name}", "arguments": {{}}}}</tool_call>'
        for name in ("as_dict", "as_bytes", "as_lock")
    )
    engine = ScriptedEngine(tokenizer, model, [turn, "1218"])
    settings = AgentSettings(
        chat=ChatFormat(tokenizer, [tool_schema(f) for f in TOOLS.values()]),
        tools=TOOLS,
        parser=parse_xml_json,
        max_turns=2,
        max_tool_response_tokens=200,
    )
    result = run_trajectories(
        engine, [{"prompt": "12*18?"}], 1, SamplingParams(max_new_tokens=200), None,
        range(1), settings,
    )  # fmt: skip
    assert result.metrics["agent/tool_result_type/errors"] == 2
    assert result.metrics["agent/raised/errors"] == 0
    contents = [m["content"] for m in result.conversations[0] if m["role"] == "tool"]
    assert contents[0] == TEXTS["as_dict"]
    assert contents[1].startswith(ERRORS["as_bytes"]) and contents[2].startswith(ERRORS["as_lock"])
    assert torch.is_tensor(result.rollout.completion_mask_BT)
