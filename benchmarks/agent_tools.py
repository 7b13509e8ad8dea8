"""Seconds per turn spent answering tool calls: 1 worker against N, side by side.

A turn of ``--rows`` rows, each of whose model turns is one tool call, is answered by
:func:`grpo.agents.replies.reply_to_turn`, the stage the multi-turn rollout runs between
two sampled turns: parse, check, run the calls (``agent.tool_workers`` at a time, threads or
worker processes), cut and count the results. Two tools:

* ``nap``: sleeps ``--nap`` seconds (a tool waiting on a web API, say);
* ``python``: the built-in sandboxed interpreter on a short program (a sandbox start each).

Runs alternate between the settings (A, B, C, A, B, C, …) so machine noise hits all; the
median of ``--repeats`` is reported.

    python benchmarks/agent_tools.py [--rows 128] [--workers 8] [--nap 0.5] [--repeats 1]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

from grpo.agents.chat import ChatFormat
from grpo.agents.parser import parse_xml_json
from grpo.agents.python_tool import python
from grpo.agents.replies import TurnState
from grpo.agents.settings import AgentSettings
from grpo.agents.tools import tool_schema
from grpo.demo.tokenizer import build_char_tokenizer
from grpo.rollout.turns import Trajectory


def nap(seconds: float) -> str:
    """Sleep for the given seconds and say so."""
    time.sleep(seconds)
    return f"slept {seconds:g} s"


def _turn(tool: str, row: int, nap_s: float) -> str:
    if tool == "nap":
        arguments: dict[str, Any] = {"seconds": nap_s}
    else:
        arguments = {"code": f"print(sum(range({row + 1})))"}
    return f"<tool_call>{json.dumps({'name': tool, 'arguments': arguments})}</tool_call>"


def seconds_per_turn(tool: str, rows: int, workers: int, isolation: str, nap_s: float) -> float:
    """Seconds to answer one turn of ``rows`` rows that each call ``tool`` once."""
    from grpo.agents.replies import reply_to_turn
    from grpo.agents.trajectories import ERROR_KINDS

    tokenizer = build_char_tokenizer(alphabet=[chr(c) for c in range(32, 127)] + ["\n"])
    tools = {"nap": nap, "python": python}
    settings = AgentSettings(
        chat=ChatFormat(tokenizer, [tool_schema(fn) for fn in tools.values()]),
        tools=tools,
        parser=parse_xml_json,
        max_tool_response_tokens=256,
        tool_timeout_s=60.0,
        tool_workers=workers,
        tool_isolation=isolation,
    )
    states = [TurnState(Trajectory([]), [], [], None, f"row {r}") for r in range(rows)]
    texts = [_turn(tool, r, nap_s) for r in range(rows)]
    counts = dict.fromkeys((*ERROR_KINDS, "seconds"), 0.0)
    started = time.perf_counter()
    replies = reply_to_turn(states, texts, settings, counts)
    elapsed = time.perf_counter() - started
    errors = {k: v for k, v in counts.items() if k != "seconds" and v}
    if errors or any(reply is None or len(reply) != 1 for reply in replies):
        raise RuntimeError(f"{tool}: the calls did not all succeed: {errors}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=128)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--nap", type=float, default=0.5)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    settings = [(1, "thread"), (args.workers, "thread"), (args.workers, "process")]
    print(f"{args.rows} rows, one tool call each; seconds per turn (median of {args.repeats})")
    print(f"{'tool':<8} {'workers':>8} {'isolation':>10} {'s/turn':>8} {'vs 1 worker':>12}")
    for tool in ("nap", "python"):
        times: dict[tuple[int, str], list[float]] = {s: [] for s in settings}
        for _ in range(args.repeats):
            for workers, isolation in settings:
                seconds = seconds_per_turn(tool, args.rows, workers, isolation, args.nap)
                times[(workers, isolation)].append(seconds)
        serial = statistics.median(times[settings[0]])
        for workers, isolation in settings:
            median = statistics.median(times[(workers, isolation)])
            print(
                f"{tool:<8} {workers:>8} {isolation:>10} {median:>8.2f} {median / serial:>11.3f}×"
            )


if __name__ == "__main__":
    main()
