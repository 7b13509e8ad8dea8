"""What the chat format inserts after a model turn, on SmolLM2's BPE tokenizer: after a turn
that lacks the end-of-turn token, that token first; with a template that renders earlier
assistant turns differently once more messages follow (Qwen3's, which drops an earlier
turn's reasoning), the insertion all the same, every earlier turn kept as sampled."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from grpo.agents.chat import ChatFormat
from grpo.agents.parser import parse_xml_json
from grpo.agents.trajectories import AgentSettings, run_trajectories
from grpo.rollout.engine import SamplingParams

from .conftest import ScriptedEngine
from .helpers import Echo

# Qwen3's rule for assistant turns, on ChatML: a turn after the last user message keeps its
# <think> block (an empty one when it is the last message), one before it loses it.
QWEN3_STYLE = """\
{%- set ns = namespace(last_query=-1) -%}
{%- for m in messages -%}{%- if m.role == 'user' -%}{%- set ns.last_query = loop.index0 -%}
{%- endif -%}{%- endfor -%}
{%- for m in messages -%}
{%- if m.role == 'assistant' -%}
  {%- set content = m.content -%}{%- set reasoning = '' -%}
  {%- if '</think>' in content -%}
    {%- set reasoning = content.split('</think>')[0].split('<think>')[-1].strip('\\n') -%}
    {%- set content = content.split('</think>')[-1].lstrip('\\n') -%}
  {%- endif -%}
  {%- if loop.index0 > ns.last_query and (loop.last or reasoning) -%}
    {{- '<|im_start|>assistant\\n<think>\\n' + reasoning + '\\n</think>\\n\\n' + content -}}
  {%- else -%}{{- '<|im_start|>assistant\\n' + content -}}{%- endif -%}
  {{- '<|im_end|>\\n' -}}
{%- elif m.role == 'tool' -%}
  {{- '<|im_start|>user\\n<tool_response>\\n' + m.content + '\\n</tool_response><|im_end|>\\n' -}}
{%- else -%}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' -}}{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"""

THINKING = "<think>\nTwo digits each: mul.\n</think>\n\n"
CALL = '<tool_call>{"name": "mul", "arguments": {"a": 12, "b": 34}}</tool_call>'


@pytest.fixture
def qwen3_style(smollm2_tokenizer_dir: Path) -> Any:
    """SmolLM2's tokenizer (ChatML's special tokens are Qwen's too) with the template above."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(smollm2_tokenizer_dir)
    tokenizer.chat_template = QWEN3_STYLE
    return tokenizer


def test_the_insertion_is_read_after_the_turn_a_qwen3_template_rewrites(qwen3_style) -> None:
    chat = ChatFormat(qwen3_style, [])
    probe = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]
    # The template does rewrite the probe's assistant turn once a message follows it ...
    alone = qwen3_style.apply_chat_template(probe, tokenize=False)
    followed = qwen3_style.apply_chat_template(
        [*probe, {"role": "tool", "content": "408"}], tokenize=False
    )
    assert "<think>" in alone and "<think>" not in followed
    # ... and what follows the turn's <|im_end|> is read all the same, special tokens as ids.
    inserted = chat.insertion_ids([{"role": "tool", "content": "408"}])
    expected = "\n<|im_start|>user\n<tool_response>\n408\n</tool_response><|im_end|>\n"
    assert qwen3_style.decode(inserted) == expected + "<|im_start|>assistant\n"
    assert inserted[1] == qwen3_style.bos_token_id  # <|im_start|>, not its characters


def test_earlier_turns_stay_as_sampled_where_the_template_would_strip_them(
    qwen3_style, smollm2_tiny_dir: Path
) -> None:
    """An environment's question follows a turn that reasoned: rendered whole, Qwen3's
    template would drop that reasoning; the ids the model read at its next turn, and the
    ids trained, keep it as the model wrote it (token-in/token-out)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(smollm2_tiny_dir)
    engine = ScriptedEngine(qwen3_style, model, [THINKING + "408", "408"])
    settings = AgentSettings(chat=ChatFormat(qwen3_style, []), environment=Echo, max_turns=2)
    params = SamplingParams(temperature=0.0, max_new_tokens=64)
    result = run_trajectories(engine, [{"prompt": "12*34?"}], 1, params, None, range(1), settings)
    rollout = result.rollout
    prompt = rollout.prompt_ids_BP[0][rollout.prompt_mask_BP[0].bool()].tolist()
    ids = rollout.completion_ids_BT[0][rollout.attention_mask_BT[0].bool()].tolist()
    first = qwen3_style(THINKING + "408", add_special_tokens=False)["input_ids"]
    assert ids[: len(first) + 1] == [*first, qwen3_style.eos_token_id]  # kept, reasoning and all
    messages = [{k: m[k] for k in ("role", "content")} for m in result.conversations[0]]
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant"]
    rendered = qwen3_style.apply_chat_template(messages, tokenize=False)
    assert "Two digits each" not in rendered  # what a chat server would show the model
    read = qwen3_style.decode(prompt + ids)
    assert "<think>\nTwo digits each: mul.\n</think>\n\n408<|im_end|>\n<|im_start|>user" in read


def test_a_turn_without_its_end_of_turn_token_gets_it_inserted(smollm2_tokenizer: Any) -> None:
    tokenizer = smollm2_tokenizer
    chat = ChatFormat(tokenizer, [])
    eos = tokenizer.eos_token_id
    stopped_on_a_string = tokenizer(CALL + ".", add_special_tokens=False)["input_ids"]
    assert chat.turn_closing([*stopped_on_a_string, eos]) == []  # the model's own stays
    assert chat.turn_closing(stopped_on_a_string) == [eos]
    assert chat.turn_closing(
        [*stopped_on_a_string, tokenizer.convert_tokens_to_ids("<|endoftext|>")]
    ) == [eos]


def test_tool_calls_in_a_qwen3_style_conversation_parse_from_the_sampled_text(
    qwen3_style, smollm2_tiny_dir: Path
) -> None:
    """Reasoning before a call does not hide the call: the turn's text is parsed whole."""
    from transformers import AutoModelForCausalLM

    from grpo.demo.tools_task import mul

    model = AutoModelForCausalLM.from_pretrained(smollm2_tiny_dir)
    engine = ScriptedEngine(qwen3_style, model, [THINKING + CALL, "408"])
    settings = AgentSettings(
        chat=ChatFormat(qwen3_style, []), tools={"mul": mul}, parser=parse_xml_json, max_turns=2
    )
    params = SamplingParams(temperature=0.0, max_new_tokens=64)
    result = run_trajectories(engine, [{"prompt": "12*34?"}], 1, params, None, range(1), settings)
    assert [m["content"] for m in result.conversations[0]][1:] == [THINKING + CALL, "408", "408"]
    assert result.metrics["agent/tool_call_frac"] == 1.0
