"""Tools: schemas from signatures, and every bad call an error text plus a counted metric."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from grpo.agents.calls import execute_call
from grpo.agents.chat import ChatFormat
from grpo.agents.parser import ParseFailure, ToolCall, parse_xml_json
from grpo.agents.tools import resolve_tools, tool_schema
from grpo.agents.trajectories import AgentSettings, run_trajectories
from grpo.rollout.engine import SamplingParams

from .conftest import ScriptedEngine, ascii_tokenizer

RELEASE = threading.Event()  # lets the hung tool's thread end once the test is over


def add(a: int, b: int = 0) -> int:
    """Add two integers.

    Longer text after the first paragraph is not part of the description.
    """
    return a + b


def boom(x: int) -> int:
    """Always raises."""
    raise RuntimeError(f"boom {x}")


def sleepy() -> str:
    """Hangs far past any timeout."""
    RELEASE.wait(60)
    return "late"


def huge() -> str:
    """Returns 10 MB."""
    return "x" * (10 << 20)


TOOLS = {"add": add, "boom": boom, "sleepy": sleepy, "huge": huge}


def call(name: str, arguments: str) -> str:
    return f'<tool_call>{{"name": "{name}", "arguments": {arguments}}}</tool_call>'


BAD_TURN = "".join(
    [
        call("add", '{"a": 2, "b": 3}'),  # fine: 5
        "<tool_call>{not json}</tool_call>",  # malformed_json
        call("nope", "{}"),  # unknown_tool
        call("add", '{"a": "2", "b": 3}'),  # wrong_arguments (a string for an integer)
        call("add", '{"c": 1}'),  # wrong_arguments (no such argument)
        call("boom", '{"x": 1}'),  # raised
        call("sleepy", "{}"),  # timeout
        call("huge", "{}"),  # too_long
        call("add", "[1, 2]"),  # bad_arguments (not an object)
    ]
)


def test_schema_from_hints_and_docstring() -> None:
    assert tool_schema(add) == {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two integers.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a"],
            },
        },
    }

    def no_doc(a: int) -> int:
        return a

    with pytest.raises(ValueError, match="needs a docstring"):
        tool_schema(no_doc)
    with pytest.raises(ValueError, match="no module 'no_such_module_xyz'"):
        resolve_tools(["no_such_module_xyz:f"])


def test_parser_reads_calls_and_reports_broken_ones() -> None:
    text = 'I will add. <tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call> and '
    assert parse_xml_json(text + "<tool_call>{oops") == [
        ToolCall("add", {"a": 1}),
        ParseFailure("malformed_json", parse_xml_json("<tool_call>{oops")[0].message),
    ]
    assert parse_xml_json("no calls here") == []


def test_each_bad_call_is_an_error_text_and_a_kind() -> None:
    kinds = [
        # 2 s: room for the others on a busy machine; only sleepy runs that long
        execute_call(c, TOOLS, timeout_s=2.0, max_chars=100).error
        for c in parse_xml_json(BAD_TURN)
    ]
    assert kinds == [
        None,
        "malformed_json",
        "unknown_tool",
        "wrong_arguments",
        "wrong_arguments",
        "raised",
        "timeout",
        "too_long",
        "bad_arguments",
    ]
    started = time.perf_counter()
    result = execute_call(ToolCall("sleepy"), TOOLS, timeout_s=0.3, max_chars=100)
    assert result.text == "error: sleepy timed out after 0.3 s"
    assert time.perf_counter() - started < 30  # at its timeout, not when sleepy ends (60 s)


def test_bad_calls_are_answered_counted_and_trained_on(ascii_model_dir) -> None:
    from transformers import AutoModelForCausalLM

    from grpo.algo.objective import Objective
    from grpo.runtime.optim import Optimization
    from grpo.training.update.policy import TrainBatch, policy_update

    tokenizer = ascii_tokenizer()
    model = AutoModelForCausalLM.from_pretrained(ascii_model_dir)
    engine = ScriptedEngine(tokenizer, model, [BAD_TURN, "The answer is 5."])
    settings = AgentSettings(
        chat=ChatFormat(tokenizer, [tool_schema(f) for f in TOOLS.values()]),
        tools=TOOLS,
        parser=parse_xml_json,
        max_turns=4,
        max_tool_response_tokens=40,
        tool_timeout_s=0.5,
    )
    params = SamplingParams(max_new_tokens=400)
    result = run_trajectories(engine, [{"prompt": "2+3?"}], 2, params, None, range(2), settings)
    RELEASE.set()
    metrics = result.metrics
    expected = {"malformed_json": 2, "unknown_tool": 2, "wrong_arguments": 4, "raised": 2}
    # too_long: per row the huge result and 5 error texts over the 40-token budget (the
    # malformed JSON, the unknown tool, both wrong arguments, the bad arguments; the raised
    # and timeout texts are shorter): every cut is counted, a result's or an error's.
    expected |= {"timeout": 2, "too_long": 12, "bad_arguments": 2, "environment": 0}
    assert {k: metrics[f"agent/{k}/errors"] for k in expected} == expected
    assert metrics["agent/tool_calls/mean"] == 9 and metrics["agent/turns/mean"] == 2
    tool_messages = [m for m in result.conversations[0] if m["role"] == "tool"]
    assert tool_messages[0]["content"] == "5"
    assert all(m["content"].startswith("error:") for m in tool_messages[1:7])
    assert tool_messages[7]["content"] == "x" * 40 + " [cut]"  # max_tool_response_tokens
    assert result.completions[0] == BAD_TURN + "\nThe answer is 5."
    # Training goes on: a finite update on these trajectories, the inserted tokens masked.
    rollout = result.rollout
    batch = TrainBatch.of(rollout, torch.tensor([1.0, 0.5]), torch.ones(2, dtype=torch.bool))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    before = [p.detach().clone() for p in model.parameters()]
    update = policy_update(
        model,
        batch,
        Objective(max_completion_length=400),
        Optimization(optimizer, scheduler, max_grad_norm=1.0),
        sequences_per_micro_batch=1,
    )
    assert update["skipped_updates"] == 0 and torch.isfinite(torch.tensor(update["loss"]))
    assert any(not torch.equal(b, p) for b, p in zip(before, model.parameters(), strict=True))


ATTACKS = {
    "infinite loop": "while True:\n    pass\n",
    "fork bomb": "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n"
    "        pass\n",
    "memory bomb": "blocks = []\nwhile True:\n    blocks.append(bytearray(50 << 20))\n",
    "100 MB of stdout": "import sys\nfor _ in range(100):\n    sys.stdout.write('o' * (1 << 20))\n",
    "reads the trainer's secret": "import os\nprint(os.environ.get('AGENT_SECRET'))\n",
}


@pytest.mark.skipif(not __import__("sys").platform.startswith("linux"), reason="Linux sandbox")
def test_python_tool_runs_code_and_survives_the_sandbox_attacks(monkeypatch) -> None:
    import dataclasses

    from grpo.agents import python_tool

    monkeypatch.setattr(python_tool, "LIMITS", dataclasses.replace(python_tool.LIMITS, timeout_s=2))
    monkeypatch.setenv("AGENT_SECRET", "hunter2")
    tools = resolve_tools(["python"])
    ok = execute_call(ToolCall("python", {"code": "print(6 * 7)"}), tools, 30.0, 10_000)
    assert ok.error is None and ok.text.startswith("exit code 0\nstdout:\n42\n")
    for name, code in ATTACKS.items():
        started = time.perf_counter()
        result = execute_call(ToolCall("python", {"code": code}), tools, 30.0, 10_000)
        assert time.perf_counter() - started < 2 + 4, name  # the timeout plus a shared-core margin
        assert "hunter2" not in result.text, name
        assert len(result.text) < 5000, name  # stdout and stderr cut for the model
    assert result.text.startswith("exit code 0\nstdout:\nNone")


def test_chat_template_offers_tools_and_keeps_its_separators() -> None:
    tokenizer = ascii_tokenizer()
    tokenizer.chat_template = (
        "{% if tools %}[tools:{{ tools | length }}]{% endif %}"
        "{% for m in messages %}|{{ m.role }}|{{ m.content }}<eos>\n{% endfor %}"
        "{% if add_generation_prompt %}|assistant|{% endif %}"
    )
    chat = ChatFormat(tokenizer, [tool_schema(add)])
    assert chat.decode(chat.prompt_ids([{"role": "user", "content": "hi"}])) == (
        "[tools:1]|user|hi\n|assistant|"
    )
    # After the model's <eos>: the template's newline, the tool turn, the next header.
    ids = chat.insertion_ids([{"role": "tool", "content": "5"}])
    assert tokenizer.decode(ids) == "\n|tool|5<eos>\n|assistant|"
