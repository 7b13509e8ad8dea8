"""Turning messages into token ids: the prompt, and what is inserted after a model turn.

With a chat template, the prompt is ``apply_chat_template(messages, tools=schemas,
add_generation_prompt=True)``, and an insertion (tool results, an observation) is what the
template adds after an assistant turn's end-of-turn token up to the next assistant
header: it is read off a rendering of a fixed conversation, so the template's own
separators (the newline after ``<|im_end|>``, say) are in it, never silently dropped.

Without a chat template the plain format is used::

    Tools (call one as <tool_call>{"name": ..., "arguments": {...}}</tool_call>):
    {"type": "function", "function": {...}}

    user: What is 12*34?
    assistant: ␣

and after a model turn (which ended on EOS) ``"\\ntool: <result>\\nassistant: "`` (an
observation: ``"\\nuser: <text>\\nassistant: "``); ␣ is a space.

Only insertions are rendered; the model's turns are kept as the ids it sampled.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

_PROBE = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]


@dataclass
class ChatFormat:
    tokenizer: Any
    schemas: list[dict[str, Any]]

    @property
    def templated(self) -> bool:
        return bool(getattr(self.tokenizer, "chat_template", None))

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def prompt_ids(self, messages: list[dict[str, Any]]) -> list[int]:
        if self.templated:
            return self._render(messages, add_generation_prompt=True)
        head = ""
        if self.schemas:
            lines = "\n".join(json.dumps(schema) for schema in self.schemas)
            call = '<tool_call>{"name": ..., "arguments": {...}}</tool_call>'
            head = f"Tools (call one as {call}):\n{lines}\n\n"
        body = "".join(f"{m['role']}: {m['content']}\n" for m in messages)
        return self.encode(head + body + "assistant: ")

    def insertion_ids(self, messages: list[dict[str, Any]]) -> list[int]:
        """The ids after a model turn's last token, up to the next assistant header."""
        if not self.templated:
            body = "".join(f"\n{m['role']}: {m['content']}" for m in messages)
            return self.encode(body + "\nassistant: ")
        before = self._render(_PROBE, add_generation_prompt=False)
        after = self._render(_PROBE + messages, add_generation_prompt=True)
        end = _turn_end(before, self.tokenizer)
        if after[:end] != before[:end]:
            raise ValueError("the chat template renders an assistant turn differently before more")
        return after[end:]

    def _render(self, messages: list[dict[str, Any]], add_generation_prompt: bool) -> list[int]:
        ids = self.tokenizer.apply_chat_template(
            messages,
            tools=self.schemas or None,
            add_generation_prompt=add_generation_prompt,
            tokenize=True,
        )
        if not isinstance(ids, list):  # newer transformers return a BatchEncoding
            ids = ids["input_ids"]
        return list(ids)


def _turn_end(ids: list[int], tokenizer: Any) -> int:
    """The position after the probe assistant turn's end-of-turn (EOS) token."""
    eos = tokenizer.eos_token_id
    for index in range(len(ids) - 1, -1, -1):
        if ids[index] == eos:
            return index + 1
    raise ValueError("the chat template does not end an assistant turn with the EOS token")
