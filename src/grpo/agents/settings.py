"""The ``[agent]`` section, resolved into what a multi-turn rollout needs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from grpo.agents.chat import ChatFormat
from grpo.agents.environment import Environment
from grpo.agents.parser import Parsed


@dataclass(frozen=True)
class AgentSettings:
    """See :mod:`grpo.agents.environment`, :mod:`grpo.agents.tools` and
    :mod:`grpo.agents.call_pool` for what each setting does."""

    chat: ChatFormat
    tools: dict[str, Callable[..., Any]] = field(default_factory=dict)
    parser: Callable[[str], list[Parsed]] | None = None
    environment: Callable[[dict[str, Any]], Environment] | None = None
    max_turns: int = 4
    max_tool_response_tokens: int = 256
    tool_timeout_s: float = 10.0
    env_timeout_s: float = 30.0
    env_on_error: str = "fail"  # "fail" | "zero" | "skip_group"
    system_prompt: str = ""
    tool_workers: int = 8  # a turn's tool calls and environment steps run this many at a time
    tool_isolation: str = "thread"  # "thread" | "process": tools in killable worker processes
    # The environment failures already printed in this run, by stage (the first is shown).
    reported: set[str] = field(default_factory=set, compare=False, repr=False)
