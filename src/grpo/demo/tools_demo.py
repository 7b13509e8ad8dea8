"""``grpo demo --task tools``: a warm start on tool-use traces → GRPO through real calls of
the ``mul`` tool → held-out greedy accuracy and tool-call rate before and after.

The warm start stops once the model answers about 30% of the dev split: by then it calls
the tool on some problems and guesses on the rest (:func:`warm_start_traces`), and GRPO
has groups where a call was right and a guess wrong.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from grpo.agents.parser import parse_xml_json
from grpo.agents.trajectories import AgentSettings, run_trajectories
from grpo.demo.model import build_tiny_llama
from grpo.demo.run import (
    WARM_START_TARGET,
    _say_reward_curve,
    load_demo_config,
    steps_done,
    timed_train,
    write_demo_config,
)
from grpo.demo.task import write_splits
from grpo.demo.tools_task import (
    build_tools_tokenizer,
    final_answer,
    make_tool_splits,
    mul,
    problem_kind,
    tools_chat,
    warm_start_traces,
)
from grpo.demo.warm_start import (
    record_warm_start,
    recorded_warm_start,
    supervised_steps,
    warm_start_recipe,
)
from grpo.rollout.engine import SamplingParams
from grpo.rollout.hf_engine import TransformersEngine

WARM_START_CHUNK = 100
WARM_START_MAX_STEPS = 3000
MAX_NEW_TOKENS = 48  # per turn, as default_tools.toml
MAX_TURNS = 2


def greedy_tool_eval(
    model: Any, tokenizer: Any, rows: list[dict], max_new_tokens: int, max_turns: int
) -> tuple[list[bool], list[bool]]:
    """Greedy multi-turn rollouts of ``rows`` with the ``mul`` tool: for each row, whether
    the answer is right (:func:`final_answer`) and whether the model called the tool."""
    settings = AgentSettings(
        chat=tools_chat(tokenizer),
        tools={"mul": mul},
        parser=parse_xml_json,
        max_turns=max_turns,
        max_tool_response_tokens=16,
    )
    engine = TransformersEngine(
        model,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_ids={tokenizer.eos_token_id},
        decode=lambda ids: tokenizer.decode(ids, skip_special_tokens=True),
    )
    params = SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens)
    model.eval()
    with torch.no_grad():
        result = run_trajectories(engine, rows, 1, params, None, range(len(rows)), settings)
    prompts, answers = [row["prompt"] for row in rows], [row["answer"] for row in rows]
    rewards = final_answer(prompts, result.completions, result.conversations, answers)
    called = [any(m["role"] == "tool" for m in messages) for messages in result.conversations]
    return [reward == 1.0 for reward in rewards], called


def by_kind(rows: list[dict], flags: list[bool]) -> dict[str, float]:
    """The share of True per problem kind, alphabetical, then "all"."""
    hits: dict[str, list[bool]] = defaultdict(list)
    for row, flag in zip(rows, flags, strict=True):
        hits[problem_kind(row["prompt"])].append(flag)
        hits["all"].append(flag)
    order = sorted(hits, key=lambda kind: (kind == "all", kind))
    return {kind: sum(hits[kind]) / len(hits[kind]) for kind in order}


def tools_warm_start(
    base_dir: Path, train_rows: list[dict], dev_rows: list[dict], tokenizer: Any, say: Callable
) -> dict:
    """Supervised steps on tool-use traces until greedy dev accuracy reaches the target."""
    recipe = warm_start_recipe(
        "tools",
        target=WARM_START_TARGET,
        chunk=WARM_START_CHUNK,
        max_steps=WARM_START_MAX_STEPS,
        model=[128, 4, 4, 256],
        lr=1e-3,
    )
    if (done := recorded_warm_start(base_dir, recipe)) is not None:
        say(
            f"warm start: reused from {base_dir} ({done['steps']} supervised steps → "
            f"{done['probe_accuracy']:.0%} greedy accuracy, {done['probe_tool_calls']:.0%} "
            "tool calls on the dev split; delete it to warm-start again)"
        )
        return done
    model = build_tiny_llama(tokenizer, hidden_size=128, layers=4, heads=4, max_positions=256)
    traces = warm_start_traces(tools_chat(tokenizer), train_rows)
    steps, accuracy, calls = 0, 0.0, 0.0
    while steps < WARM_START_MAX_STEPS:
        supervised_steps(
            model, traces, tokenizer.pad_token_id, steps=WARM_START_CHUNK, lr=1e-3, seed=steps
        )
        steps += WARM_START_CHUNK
        correct, called = greedy_tool_eval(model, tokenizer, dev_rows, MAX_NEW_TOKENS, MAX_TURNS)
        accuracy, calls = sum(correct) / len(correct), sum(called) / len(called)
        if accuracy >= WARM_START_TARGET:
            break
    model.save_pretrained(str(base_dir), safe_serialization=True)
    tokenizer.save_pretrained(str(base_dir))
    say(
        f"warm start: {steps} supervised steps → {accuracy:.0%} greedy accuracy, "
        f"{calls:.0%} tool calls on the dev split"
    )
    outcome = {"steps": steps, "probe_accuracy": accuracy, "probe_tool_calls": calls}
    record_warm_start(base_dir, recipe, outcome)
    return outcome


def run_tools_demo(
    work_dir: Path,
    *,
    overrides: list[str] | None = None,
    quick: bool = False,
    say: Callable[[str], None] = print,
) -> dict:
    """Run the tools demo in ``work_dir``; returns accuracies and tool-call rates by kind
    before and after, and timings."""
    started = time.perf_counter()
    torch.manual_seed(0)
    work_dir.mkdir(parents=True, exist_ok=True)
    base_dir, run_dir = work_dir / "base", work_dir / "run"
    tokenizer = build_tools_tokenizer()
    train_rows, dev_rows, test_rows = make_tool_splits(4000, 200, 300)
    train_path, dev_path, _ = write_splits(work_dir, train_rows, dev_rows, test_rows)
    say(
        f"grpo demo --task tools: {len(train_rows)} training, {len(dev_rows)} dev and "
        f"{len(test_rows)} test problems (products of two 2-digit numbers) in {work_dir}"
    )
    warm = tools_warm_start(base_dir, train_rows, dev_rows, tokenizer, say)
    config_path = write_demo_config(
        work_dir,
        base_dir=base_dir,
        train_path=train_path,
        dev_path=dev_path,
        run_dir=run_dir,
        template_name="default_tools.toml",
    )
    quick_overrides = ["train.steps=4", "train.log_every=2"] if quick else []
    config, train_command = load_demo_config(config_path, quick_overrides + list(overrides or []))
    from transformers import AutoModelForCausalLM

    turns = (config.rollout.max_new_tokens, config.agent.max_turns)
    base = AutoModelForCausalLM.from_pretrained(str(base_dir))
    before = greedy_tool_eval(base, tokenizer, test_rows, *turns)
    say(f"grpo demo: training with `{train_command}`")
    result, grpo_seconds = timed_train(config)
    after = greedy_tool_eval(result.model, tokenizer, test_rows, *turns)
    _say_reward_curve(result.history, say)
    table = {
        name: {"accuracy": by_kind(test_rows, pair[0]), "tool_calls": by_kind(test_rows, pair[1])}
        for name, pair in (("before", before), ("after", after))
    }
    _say_table(test_rows, table, say)
    total_seconds = time.perf_counter() - started
    say(
        f"\nwarm start {warm['steps']} steps; GRPO {steps_done(result.history)} steps in "
        f"{grpo_seconds:.0f} s; demo total {total_seconds:.0f} s"
    )
    say(f"run directory: {run_dir}; this training again: {train_command}")
    return {
        **table,
        "warm_start": warm,
        "grpo_seconds": grpo_seconds,
        "total_seconds": total_seconds,
        "history": result.history,
    }


def _say_table(rows: list[dict], table: dict, say: Callable[[str], None]) -> None:
    """Held-out greedy accuracy and tool-call rate per problem kind, before and after."""
    counts: dict[str, int] = defaultdict(int)
    for row in rows:
        counts[problem_kind(row["prompt"])] += 1
    counts["all"] = len(rows)
    say(f"\nheld-out greedy rollouts with the mul tool ({len(rows)} problems never trained on):")
    say(
        f"  {'problems':<18}{'count':>6}{'accuracy base':>15}{'after GRPO':>12}{'change':>8}"
        f"{'tool calls base':>17}{'after':>7}"
    )
    before, after = table["before"], table["after"]
    for kind in before["accuracy"]:
        base, trained = before["accuracy"][kind], after["accuracy"][kind]
        say(
            f"  {kind:<18}{counts[kind]:>6}{base:>15.1%}{trained:>12.1%}"
            f"{100 * (trained - base):>+8.1f}{before['tool_calls'][kind]:>17.1%}"
            f"{after['tool_calls'][kind]:>7.1%}"
        )
