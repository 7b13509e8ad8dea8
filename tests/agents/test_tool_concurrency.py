"""A turn's tool calls and environment steps run side by side (``agent.tool_workers``),
``async def`` tools are awaited together, a hung call in a worker process is killed, and
the trajectories never depend on the pool's size or on which call finished first.

Concurrency is shown without clocks: calls that wait on a barrier for each other can only
all pass it when they run at the same time."""

from __future__ import annotations

import asyncio
import os
import random
import threading
import time
from typing import Any

import pytest
import torch

from grpo.agents.call_pool import Call, CallTimeout, hung_threads, run_calls
from grpo.agents.chat import ChatFormat
from grpo.agents.parser import parse_xml_json
from grpo.agents.tools import tool_schema
from grpo.agents.trajectories import AgentSettings, run_trajectories
from grpo.rollout.engine import SamplingParams

from .conftest import ScriptedEngine, ascii_tokenizer

FINISHED: list[int] = []  # the order in which slow_square calls returned


def slow_square(x: int) -> int:
    """Square x, slowly: larger x returns sooner, so calls finish out of row order."""
    time.sleep(0.02 * (8 - x))
    FINISHED.append(x)
    return x * x


class Dice:
    """Each step rolls the row's own seeded die (its ``seed`` column): the observation and
    reward depend on the row and the turn only, never on other rows' timing."""

    def __init__(self, row: dict[str, Any]) -> None:
        self.seed = row["seed"]
        self.rng = random.Random(self.seed)

    def reset(self) -> list[dict[str, Any]]:
        return [{"role": "user", "content": f"Roll #{self.seed} ."}]

    def step(self, assistant_text: str) -> tuple[str | None, float | None, bool]:
        roll = self.rng.randint(1, 6)
        return f"rolled {roll}", float(roll), roll > 3


class CpuScripted(ScriptedEngine):
    """A scripted engine without a model: the rollout's tensors stay on the CPU."""

    def __init__(self, tokenizer: Any, scripts: list[str]) -> None:
        self.tokenizer, self.scripts = tokenizer, scripts
        self.pad_token_id = tokenizer.pad_token_id

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")


class CallsThenTalks(CpuScripted):
    """Turn 0 of a row calls slow_square on the row's seed; later turns say "go"."""

    def text(self, prompt: str, turn: int) -> str:
        seed = int(prompt.split("#")[-1].split()[0]) if "#" in prompt else 0
        call = f'<tool_call>{{"name": "slow_square", "arguments": {{"x": {seed}}}}}</tool_call>'
        return call if turn == 0 else "go"


def _rollout(workers: int) -> Any:
    tokenizer = ascii_tokenizer()
    settings = AgentSettings(
        chat=ChatFormat(tokenizer, [tool_schema(slow_square)]),
        tools={"slow_square": slow_square},
        parser=parse_xml_json,
        environment=Dice,
        max_turns=4,
        tool_workers=workers,
    )
    records = [{"prompt": f"#{n}", "seed": n} for n in range(8)]
    engine = CallsThenTalks(tokenizer, [])
    params = SamplingParams(temperature=0.0, max_new_tokens=80)
    return run_trajectories(engine, records, 1, params, None, range(8), settings)


def test_the_same_trajectories_whatever_the_pool_size() -> None:
    FINISHED.clear()
    serial = _rollout(workers=1)
    assert list(range(8)) == FINISHED  # one at a time: in row order
    FINISHED.clear()
    pooled = _rollout(workers=8)
    assert list(range(8)) != FINISHED  # side by side: the slow small rows finished last
    assert pooled.conversations == serial.conversations
    assert pooled.env_reward == serial.env_reward
    assert serial.conversations[3][2] == {
        "role": "tool", "name": "slow_square", "content": "9", "author": "tool"
    }  # fmt: skip
    rolls = random.Random(3)
    first = rolls.randint(1, 6)
    assert serial.conversations[3][4]["content"] == f"rolled {first}"


def _meet(barrier: threading.Barrier) -> str:
    barrier.wait()  # raises BrokenBarrierError after its timeout unless all arrive together
    return "met"


def test_thread_calls_run_side_by_side_up_to_the_pool_size() -> None:
    barrier = threading.Barrier(4, timeout=10)
    outcomes = run_calls([Call(_meet, (barrier,)) for _ in range(4)], workers=4)
    assert [o.value for o in outcomes] == ["met"] * 4
    lone = threading.Barrier(2, timeout=0.5)
    outcomes = run_calls([Call(_meet, (lone,)) for _ in range(2)], workers=1)
    assert all(isinstance(o.error, threading.BrokenBarrierError) for o in outcomes)


async def _gather_point(arrived: list[int], count: int, row: int) -> int:
    """An async tool: returns once ``count`` calls have arrived (all awaited together)."""
    arrived.append(row)
    for _ in range(1000):
        if len(arrived) >= count:
            return row
        await asyncio.sleep(0.005)
    raise RuntimeError(f"only {len(arrived)} of {count} calls arrived")


def test_async_tools_are_awaited_concurrently_and_cancelled_at_their_timeout() -> None:
    arrived: list[int] = []
    calls = [Call(_gather_point, (arrived, 6, row), timeout_s=30) for row in range(6)]
    outcomes = run_calls(calls, workers=1)  # the pool size bounds threads, not awaits
    assert [o.value for o in outcomes] == list(range(6))
    late = run_calls([Call(_gather_point, ([], 2, 0), timeout_s=0.05)], workers=1)
    assert isinstance(late[0].error, CallTimeout)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split()[2] != "Z"  # a zombie has ended
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads process states from /proc")
def test_a_hung_call_in_a_worker_process_is_killed() -> None:
    """A pool of one worker process: its pid, then a call that hangs there past its
    timeout: the process is killed, and the next call runs in a new one."""
    (first,) = run_calls([Call(os.getpid, isolated=True)], workers=1)
    worker = first.value
    assert worker != os.getpid()
    (outcome,) = run_calls([Call(time.sleep, (600,), timeout_s=1.0, isolated=True)], workers=1)
    assert isinstance(outcome.error, CallTimeout)
    for _ in range(100):  # the pool kills it as it reports the timeout; reaped soon after
        if not _alive(worker):
            break
        time.sleep(0.05)
    assert not _alive(worker)
    (after,) = run_calls([Call(os.getpid, isolated=True)], workers=1)
    assert after.value not in (worker, os.getpid())  # the pool replaced the killed worker


def test_a_hung_call_in_a_thread_is_given_up_and_counted() -> None:
    before = hung_threads()
    event = threading.Event()
    (outcome,) = run_calls([Call(event.wait, (5,), timeout_s=0.05)], workers=1)
    assert isinstance(outcome.error, CallTimeout)
    assert hung_threads() == before + 1
    event.set()


def raise_long(n: int) -> str:
    """Raise an error with a long message."""
    raise ValueError("x" * n)


def test_a_long_error_text_is_cut_to_the_budget_and_counted() -> None:
    """max_tool_response_tokens = 4 (a character each): the error text is cut like a result
    and the cut counts as too_long, beside the raised error itself."""
    tokenizer = ascii_tokenizer()
    tools = {"raise_long": raise_long}
    settings = AgentSettings(
        chat=ChatFormat(tokenizer, [tool_schema(raise_long)]),
        tools=tools,
        parser=parse_xml_json,
        max_turns=2,
        max_tool_response_tokens=4,
    )
    call = '<tool_call>{"name": "raise_long", "arguments": {"n": 40}}</tool_call>'
    engine = CpuScripted(tokenizer, [call, "done"])
    params = SamplingParams(max_new_tokens=80)
    result = run_trajectories(engine, [{"prompt": "go"}], 1, params, None, range(1), settings)
    assert result.conversations[0][2]["content"] == "erro [cut]"
    assert result.metrics["agent/raised/errors"] == 1
    assert result.metrics["agent/too_long/errors"] == 1
