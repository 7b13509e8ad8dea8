"""The tools demo's task: products of two 2-digit numbers ("47*38"), which the tiny model
cannot work out in its head but can with the ``mul`` tool.

The tokenizer has one token per printable ASCII character plus ``<tool_call>`` and
``</tool_call>`` (as Qwen's has), and a short chat template of its own, so a whole
trajectory is about 70 tokens and :class:`~grpo.agents.chat.ChatFormat` renders prompts
and tool results with it (``<eos>`` is the EOS token, which ends every assistant turn)::

    u:47*38
    a:<tool_call>{"name":"mul","arguments":{"a":47,"b":38}}</tool_call><eos>t:1786
    a:1786<eos>

The template leaves the tool schemas out: a header naming ``mul`` would cost every prompt
tokens and tell the model nothing the warm start does not teach it.

The warm start's traces are rendered with the same :class:`ChatFormat` the rollout uses,
so they are the exact ids a rollout would hold (tests/demo/test_tools_task.py checks it).
"""

from __future__ import annotations

import json
import random
from typing import Any

from grpo.agents.chat import ChatFormat
from grpo.agents.tools import tool_schema
from grpo.demo.tokenizer import build_char_tokenizer
from grpo.rewards.math import answers_match, extract_answer

ASCII = [chr(code) for code in range(32, 127)] + ["\n"]
TOOL_TAGS = ["<tool_call>", "</tool_call>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}"
    "{% if m.role == 'assistant' %}a:{{ m.content }}{{ eos_token }}"
    "{% else %}{{ m.role[0] }}:{{ m.content }}\n{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}a:{% endif %}"
)
TOOL_SHARE_LOW = 0.9  # of the warm-start traces of problems whose first factor is 10-49
TOOL_SHARE_HIGH = 0.1  # ... and of those whose first factor is 50-99


def mul(a: int, b: int) -> int:
    """Multiply two integers, e.g. mul(47, 38) = 1786."""
    return a * b


def build_tools_tokenizer() -> Any:
    """Printable ASCII, one token per character, the two tool-call tags, the template."""
    tokenizer = build_char_tokenizer(alphabet=ASCII)
    tokenizer.add_tokens(TOOL_TAGS)
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def tools_chat(tokenizer: Any) -> ChatFormat:
    """The rendering the rollout uses (tools offered: ``mul``)."""
    return ChatFormat(tokenizer, [tool_schema(mul)])


def problem_kind(prompt: str) -> str:
    return "first factor 10-49" if prompt[0] in "1234" else "first factor 50-99"


def final_answer(
    prompts: list[str], completions: list[str], conversation: list, answer: list, **_: object
) -> list[float]:
    """1.0 when the last assistant turn's answer equals the ``answer`` column: a tool call's
    arguments never count as the answer, only what the model says after the result."""
    del prompts, completions  # the completions join every turn, calls included
    scores = []
    for messages, truth in zip(conversation, answer, strict=True):
        turns = [m["content"] for m in messages if m["role"] == "assistant"]
        last = turns[-1] if turns else ""
        ok = "<tool_call>" not in last and answers_match(extract_answer(last), truth)
        scores.append(1.0 if ok else 0.0)
    return scores


final_answer.is_accuracy = True  # type: ignore[attr-defined]


def make_tool_splits(
    train_size: int, dev_size: int, test_size: int, seed: int = 0
) -> tuple[list[dict], list[dict], list[dict]]:
    """Disjoint train, dev and test rows ``{"prompt": "47*38", "answer": "1786"}``."""
    if train_size + dev_size + test_size > 90 * 90:
        raise ValueError("there are only 8100 products of two 2-digit numbers")
    rng = random.Random(seed)
    pairs = [(a, b) for a in range(10, 100) for b in range(10, 100)]
    rng.shuffle(pairs)
    rows = [{"prompt": f"{a}*{b}", "answer": str(a * b)} for a, b in pairs]
    stop = train_size + dev_size
    return rows[:train_size], rows[train_size:stop], rows[stop : stop + test_size]


def call_text(prompt: str) -> str:
    """The call that answers ``prompt``: ``<tool_call>{...}</tool_call>`` (compact JSON)."""
    a, b = (int(part) for part in prompt.split("*"))
    call = {"name": "mul", "arguments": {"a": a, "b": b}}
    return f"{TOOL_TAGS[0]}{json.dumps(call, separators=(',', ':'))}{TOOL_TAGS[1]}"


def trace_ids(chat: ChatFormat, row: dict, use_tool: bool) -> tuple[list[int], list[int]]:
    """A warm-start trace as (ids, mask): the ids a rollout holds for it (prompt, model
    turns with their EOS, the inserted tool message) and 1 on the model's ids only.
    With the tool: a call, then the result copied as the answer; without: the answer."""
    eos = chat.tokenizer.eos_token_id
    prompt = chat.prompt_ids([{"role": "user", "content": row["prompt"]}])
    ids, mask = list(prompt), [0] * len(prompt)
    if use_tool:
        call = [*chat.encode(call_text(row["prompt"])), eos]
        a, b = (int(part) for part in row["prompt"].split("*"))
        result = [{"role": "tool", "name": "mul", "content": repr(mul(a, b))}]
        tool = chat.insertion_ids(result)
        ids += call + tool
        mask += [1] * len(call) + [0] * len(tool)
    answer = [*chat.encode(row["answer"]), eos]
    return ids + answer, mask + [1] * len(answer)


def warm_start_traces(chat: ChatFormat, rows: list[dict], seed: int = 0) -> list[tuple]:
    """One trace per row. The tool is used in 90% of the traces of problems whose first
    factor is 10-49 and in 10% of the others: the base learns to call on some problems
    and guess on the rest, and still samples a call now and then everywhere: GRPO's
    signal (groups where a call was right and a guess wrong)."""
    rng = random.Random(seed)
    share = {True: TOOL_SHARE_LOW, False: TOOL_SHARE_HIGH}
    return [trace_ids(chat, row, rng.random() < share[row["prompt"][0] in "1234"]) for row in rows]
