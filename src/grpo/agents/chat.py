"""Turning messages into token ids: the prompt, and what is inserted after a model turn.

With a chat template, the prompt is ``apply_chat_template(messages, tools=schemas,
add_generation_prompt=True)``, and an insertion (tool results, an observation) is what the
template adds after an assistant turn's end-of-turn token up to the next assistant
header: it is read off a rendering of a fixed conversation, so the template's own
separators (the newline after ``<|im_end|>``, say) are in it, never silently dropped.
The end-of-turn token is the tokenizer's EOS: a turn that the model ended on it keeps it
as sampled; a turn that ended otherwise (a stop string, another EOS id) gets it inserted
before the insertion (:meth:`ChatFormat.turn_closing`), as the template would render it.

A template may render an earlier assistant turn differently once more messages follow
(Qwen3's and DeepSeek-R1's drop an earlier turn's ``<think>`` block). The model's turns
are never rendered here, only what comes after them, so this changes nothing: the
insertion is read after the same end-of-turn token (the probe's last one), and every
earlier turn stays as the model sampled it. The model then reads its earlier reasoning
in later turns, where a chat server that renders the whole conversation would drop it:
the price of training on the exact ids the sampler conditioned on (tinker's
``strip_thinking_from_history=False``).

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
        head = f"{tools_header(self.schemas)}\n\n" if self.schemas else ""
        body = "".join(f"{m['role']}: {m['content']}\n" for m in messages)
        return self.encode(head + body + "assistant: ")

    def insertion_ids(self, messages: list[dict[str, Any]]) -> list[int]:
        """The ids after a model turn's end-of-turn token, up to the next assistant header."""
        if not self.templated:
            body = "".join(f"\n{m['role']}: {m['content']}" for m in messages)
            return self.encode(body + "\nassistant: ")
        eos = self.tokenizer.eos_token_id
        before = self._render(_PROBE, add_generation_prompt=False)
        after = self._render(_PROBE + messages, add_generation_prompt=True)
        # The probe's assistant turn ends on its last EOS; rendered before more messages,
        # the same turn ends on the EOS of the same rank, whatever the template rewrote
        # inside the turn (see the module docstring).
        rank = before.count(eos)
        if rank == 0:
            raise ValueError("the chat template does not end an assistant turn with the EOS token")
        ends = [index + 1 for index, token in enumerate(after) if token == eos]
        if len(ends) < rank:
            raise ValueError("the chat template drops an assistant turn's EOS before more")
        return after[ends[rank - 1] :]

    def turn_closing(self, ids: list[int]) -> list[int]:
        """The ids inserted first after a model turn whose ids end ``ids``: none when the
        model ended it on the end-of-turn (EOS) token, else that token."""
        eos = self.tokenizer.eos_token_id
        return [] if ids and ids[-1] == eos else [eos]

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


def tools_header(schemas: list[dict[str, Any]]) -> str:
    """How the plain format offers tools: the call format, then one JSON schema a line (a
    system prompt can offer them so to a model whose chat template leaves ``tools`` out)."""
    lines = "\n".join(json.dumps(schema) for schema in schemas)
    call = '<tool_call>{"name": ..., "arguments": {...}}</tool_call>'
    return f"Tools (call one as {call}):\n{lines}"
