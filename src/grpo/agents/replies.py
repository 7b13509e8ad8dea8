"""What answers the model: each conversation's opening and the replies to a turn.

A turn's tool calls and environment steps over all live rows run side by side
(:func:`~grpo.agents.call_pool.run_calls`, ``agent.tool_workers`` at a time) and are applied
in row order, so a row's trajectory never depends on which call finished first.

An environment that fails (its constructor, ``reset``, ``step``, or a deep copy raises or
outlives ``agent.env_timeout_s``) is handled by ``agent.env_on_error``: ``fail`` stops the
run naming the environment, the dataset file and row; ``zero`` and ``skip_group`` end the
row (a failed opening ends its whole group before any turn) with a total reward of 0, or
with its group left out of training. The first failure of each kind in a run is
printed with its text; every one is counted (``agent/environment/errors``) and kept in the
row's conversation as a message written by ``grpo``.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from grpo.agents.call_pool import Call, Outcome, call_with_timeout, run_calls
from grpo.agents.calls import CallResult, finish_call, prepare_call
from grpo.agents.environment import (
    Environment,
    EnvironmentError_,
    MalformedReturn,
    check_step,
    describe_failure,
)
from grpo.agents.settings import AgentSettings
from grpo.rollout.turns import Trajectory

# Who wrote a message (the "author" of each logged message): the dataset's prompt, the
# configured system prompt, the environment (its opening and observations), the model,
# a tool, or grpo itself (an environment's failure).
AUTHORS = ("dataset", "system", "environment", "model", "tool", "grpo")


@dataclass
class TurnState:
    """One trajectory in the making."""

    trajectory: Trajectory
    messages: list[dict[str, Any]]  # what the chat template renders
    authors: list[str]  # who wrote each message (see AUTHORS)
    environment: Environment | None
    name: str  # how errors name it: the dataset file and row
    turns: list[str] = field(default_factory=list)  # the model's turns, decoded
    turn_tokens: list[list[int]] = field(default_factory=list)  # [model, inserted after it]
    tool_calls: int = 0
    reward: float = 0.0
    rewarded: bool = False
    failure: str | None = None  # the environment's failure (env_on_error zero/skip_group)

    def fail(self, text: str) -> None:
        self.failure = text
        self.messages.append({"role": "system", "content": text})
        self.authors.append("grpo")


@dataclass(frozen=True)
class Opening:
    messages: list[dict[str, Any]]
    authors: list[str]
    environments: list[Environment | None]  # one per member asked for (none when it failed)
    failure: str | None = None


def open_prompts(
    records: Sequence[dict[str, Any]], needed: dict[int, int], names: Sequence[str],
    settings: AgentSettings,
) -> dict[int, Opening]:  # fmt: skip
    """Prompt index → its opening, for the prompts in ``needed`` (→ how many of its group's
    members this process rolls out), their environments created and reset side by side."""
    if settings.environment is None:
        system = [{"role": "system", "content": settings.system_prompt}]
        opened = {}
        for index, count in needed.items():
            user = [{"role": "user", "content": records[index]["prompt"]}]
            head = system if settings.system_prompt else []
            authors = ["system"] * len(head) + ["dataset"]
            opened[index] = Opening(head + user, authors, [None] * count)
        return opened
    timeout = settings.env_timeout_s
    calls = [
        Call(_create, (settings.environment, records[i], timeout, count))
        for i, count in needed.items()
    ]
    outcomes = run_calls(calls, settings.tool_workers)
    return {
        index: _opening(outcome, records[index], names[index], settings)
        for index, outcome in zip(needed, outcomes, strict=True)
    }


class OpeningFailed(Exception):
    """Which call of an environment's opening failed (``__init__``, ``reset()``, the deep
    copy); what it raised is the ``__cause__``."""

    def __init__(self, stage: str) -> None:
        super().__init__(stage)
        self.stage = stage


def _create(cls: Any, record: dict[str, Any], timeout_s: float, copies: int) -> tuple:
    """The environment created and reset, and ``copies`` deep copies of its reset state:
    every member of a group starts from the same state."""
    stage = "__init__"
    try:
        environment = call_with_timeout(cls, timeout_s, record)
        stage = "reset()"
        messages = call_with_timeout(environment.reset, timeout_s)
        if not isinstance(messages, list) or not messages:
            raise MalformedReturn(f"returned {messages!r:.80}, not a non-empty list of messages")
        stage = "deep copy"
        members = [copy.deepcopy(environment) for _ in range(copies)]
    except Exception as error:
        raise OpeningFailed(stage) from error
    return messages, members


def _opening(
    outcome: Outcome, record: dict[str, Any], name: str, settings: AgentSettings
) -> Opening:
    if outcome.error is None:
        messages, members = outcome.value
        return Opening(list(messages), ["environment"] * len(messages), members)
    cls = getattr(settings.environment, "__name__", "environment")
    failed, stage = outcome.error, getattr(outcome.error, "stage", "opening")
    error = failed.__cause__ if isinstance(failed, OpeningFailed) else failed
    text = f"environment {cls}: {name}: {stage} {describe_failure(error)}"
    if settings.env_on_error == "fail":
        raise EnvironmentError_(text) from error
    report_failure("opening", text, settings)
    # Nothing is sampled for the group: its prompt is kept only to show what failed.
    user = {"role": "user", "content": str(record.get("prompt", ""))}
    return Opening([user], ["dataset"], [], failure=text)


def reply_to_turn(
    rows: Sequence[TurnState],
    texts: Sequence[str],
    settings: AgentSettings,
    counts: dict[str, float],
) -> list[list[dict[str, Any]] | None]:
    """For each row that ended its turn on EOS: the messages that answer it (tool results,
    an observation; empty for none), or None when the row is done."""
    calls, plans = [], []  # plans[i]: row i's parsed-call results or its environment step
    for row, text in zip(rows, texts, strict=True):
        parsed = settings.parser(text) if settings.tools and settings.parser else []
        if parsed:
            row.tool_calls += len(parsed)
            isolated, timeout = settings.tool_isolation == "process", settings.tool_timeout_s
            prepared = [prepare_call(c, settings.tools, timeout, isolated) for c in parsed]
            names = [getattr(c, "name", "error") for c in parsed]
            plans.append(("tools", list(zip(names, prepared, strict=True)), len(calls)))
            calls += [p for p in prepared if isinstance(p, Call)]
        elif row.environment is not None:
            plans.append(("step", None, len(calls)))
            calls.append(Call(row.environment.step, (text,), timeout_s=settings.env_timeout_s))
        else:
            plans.append(("done", None, len(calls)))
    outcomes = run_calls(calls, settings.tool_workers)
    replies = []
    for row, (kind, prepared, first) in zip(rows, plans, strict=True):
        if kind == "tools":
            replies.append(_tool_messages(prepared, outcomes[first:], settings, counts))
        elif kind == "step":
            replies.append(_observation(row, outcomes[first], settings, counts))
        else:
            replies.append(None)
    return replies


def _tool_messages(
    prepared: list[tuple[str, Call | CallResult]],
    outcomes: Sequence[Outcome],
    settings: AgentSettings,
    counts: dict[str, float],
) -> list[dict[str, Any]]:
    """A row's tool results, in its calls' order, each cut to max_tool_response_tokens (an
    error's text too: the budget bounds every tool message; each cut counts as too_long)."""
    limit, ran, messages = settings.max_tool_response_tokens, iter(outcomes), []
    for name, item in prepared:
        result = item
        if isinstance(item, Call):  # characters bound the tokenizer's work before the cut
            result = finish_call(name, next(ran), max_chars=16 * limit)
        assert isinstance(result, CallResult)
        counts["seconds"] += result.seconds
        text, ids = result.text, settings.chat.encode(result.text)
        if result.error is not None:
            counts[result.error] += 1
        if len(ids) > limit:  # a result or an error's text: counted either way
            text = settings.chat.decode(ids[:limit]) + " [cut]"
            if result.error != "too_long":
                counts["too_long"] += 1
        messages.append({"role": "tool", "name": name, "content": text})
    return messages


def _observation(
    row: TurnState, outcome: Outcome, settings: AgentSettings, counts: dict[str, float]
) -> list[dict[str, Any]] | None:
    """The environment's answer to a turn: its observation (if any), or None when done."""
    name = type(row.environment).__name__
    try:
        if outcome.error is not None:
            raise outcome.error
        observation, reward, done = check_step(outcome.value)
    except Exception as error:
        counts["environment"] += 1
        text = f"environment {name}: {row.name}: step() {describe_failure(error)}"
        if settings.env_on_error == "fail":
            raise EnvironmentError_(text) from error
        report_failure("step", text, settings)
        row.fail(text)
        return None
    if reward is not None:
        row.reward += reward
        row.rewarded = True
    if done:
        return None
    return [{"role": "user", "content": observation}] if observation is not None else []


def report_failure(stage: str, text: str, settings: AgentSettings) -> None:
    """Print the run's first environment failure of each stage, with its text."""
    if stage in settings.reported:
        return
    settings.reported.add(stage)
    policy = settings.env_on_error
    then = "reward 0" if policy == "zero" else "its group left out of training"
    print(
        f"grpo: {text}\n  (agent.env_on_error = {policy!r}: the row ends with {then}; "
        "later failures are counted in agent/environment/errors and kept in the conversations)",
        file=sys.stderr,
        flush=True,
    )
