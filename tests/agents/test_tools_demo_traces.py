"""The tools demo's warm-start traces are the exact ids a rollout holds for the same turns."""

from __future__ import annotations

import torch

from grpo.agents.parser import parse_xml_json
from grpo.agents.trajectories import AgentSettings, run_trajectories
from grpo.demo.model import build_tiny_llama
from grpo.demo.tools_task import build_tools_tokenizer, call_text, mul, tools_chat, trace_ids
from grpo.rollout.engine import SamplingParams

from .conftest import ScriptedEngine


def test_a_warm_start_trace_equals_the_rollout_of_the_same_turns() -> None:
    tokenizer = build_tools_tokenizer()
    model = build_tiny_llama(tokenizer, hidden_size=32, layers=1, heads=2)
    engine = ScriptedEngine(tokenizer, model, [call_text("47*38"), "1786"])
    settings = AgentSettings(
        chat=tools_chat(tokenizer), tools={"mul": mul}, parser=parse_xml_json, max_turns=2
    )
    row = {"prompt": "47*38", "answer": "1786"}
    params = SamplingParams(max_new_tokens=48)
    result = run_trajectories(engine, [row], 1, params, None, range(1), settings)
    rollout = result.rollout
    real = rollout.real_mask_BT[0].bool()
    prompt = rollout.prompt_ids_BP[0][rollout.prompt_mask_BP[0].bool()]
    rolled = torch.cat([prompt, rollout.completion_ids_BT[0][real]]).tolist()
    rolled_mask = [0] * len(prompt) + rollout.completion_mask_BT[0][real].tolist()
    ids, mask = trace_ids(tools_chat(tokenizer), row, use_tool=True)
    assert rolled == ids
    assert rolled_mask == mask
    tool_message = {"role": "tool", "name": "mul", "content": "1786", "author": "tool"}
    assert result.conversations[0][2] == tool_message
