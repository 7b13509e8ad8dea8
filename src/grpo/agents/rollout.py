"""The multi-turn rollout: turns of the model, tool results and environment observations,
on exact token ids.

Per step block (rows [start, stop) of N prompts × G): each prompt's conversation opens
with its environment's ``reset()`` messages (or the prompt as a user message), rendered
with the tools offered (:mod:`grpo.agents.chat`). Then, turn after turn, the engine's
:class:`~grpo.rollout.turns.TurnSession` samples one assistant turn for every live row;
a turn's tool calls are executed (:mod:`grpo.agents.calls`) and their results inserted as
tool messages; a turn without a call goes to the environment's ``step`` (no environment:
the row is done). A row ends when it is done, its turn was cut at the token budget, or
``max_turns`` turns were sampled (counted: ``agent/cut_at_max_turns_frac``).

What is trained on is exactly the sampled ids plus the inserted ids
(:func:`~grpo.rollout.turns.assemble_trajectories`): ``completion_mask_BT`` is 1 on the
model's ids only, so the loss, KL, entropy and every normalizer skip inserted tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from grpo.agents.calls import CallTimeout, call_with_timeout, execute_call
from grpo.agents.chat import ChatFormat
from grpo.agents.environment import Environment, EnvironmentError_, check_step, group_copies
from grpo.agents.parser import Parsed
from grpo.rewards.runner import RewardFunction
from grpo.rollout.engine import Rollout, RolloutRequest, SamplingParams
from grpo.rollout.turns import Trajectory, TurnEngine, assemble_trajectories

ERROR_KINDS = (
    "malformed_json",
    "bad_arguments",
    "unknown_tool",
    "wrong_arguments",
    "raised",
    "timeout",
    "too_long",
    "environment",
)


@dataclass(frozen=True)
class AgentSettings:
    """The ``[agent]`` section, resolved (see :mod:`grpo.agents.environment`, ``tools``)."""

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


@dataclass
class AgentRollout:
    """A block's trajectories and what the rewards and metrics need of them."""

    rollout: Rollout
    completions: list[str]  # the model's turns, joined by newlines
    conversations: list[list[dict[str, Any]]]  # every message, the opening ones included
    env_reward: list[float]  # the environment's rewards, summed (0.0 without any)
    env_rewarded: bool  # some environment gave a reward
    skip: list[bool]  # an environment failed under env_on_error = "skip_group"
    block_metrics: dict[str, float]  # what reduces over blocks by the metric table
    inserted_tokens: int  # over the block's rows
    model_tokens: int

    @property
    def metrics(self) -> dict[str, float]:
        """The block's metrics, with its share of inserted tokens (a ratio of sums, so a
        step's share is computed from every block's counts, not from these shares)."""
        share = env_token_frac(self.inserted_tokens, self.model_tokens)
        return {**self.block_metrics, "agent/env_token_frac": share}

    @property
    def columns(self) -> dict[str, list[Any]]:
        """What reward functions get beside the dataset's columns, one value per row."""
        return {"conversation": self.conversations, "env_reward": self.env_reward}


@dataclass
class _Row:
    trajectory: Trajectory
    messages: list[dict[str, Any]]
    environment: Environment | None
    turns: list[str] = field(default_factory=list)
    tool_calls: int = 0
    reward: float = 0.0
    rewarded: bool = False
    failed: bool = False


def agent_rollout(
    engine: TurnEngine,
    records: list[dict[str, Any]],
    group_size: int,
    params: SamplingParams,
    generator: torch.Generator | None,
    rows: range,
    settings: AgentSettings,
) -> AgentRollout:
    """Rows ``rows`` of the step's len(records)·G multi-turn trajectories."""
    openings = [_open(record, index, settings) for index, record in enumerate(records)]
    prompts = [settings.chat.prompt_ids(messages) for messages, _ in openings]
    request = RolloutRequest(prompts, group_size, params, generator, rows.start, rows.stop)
    copies: dict[int, list[Environment]] = {}
    states: list[_Row] = []
    for row in rows:
        messages, environment = openings[row // group_size]
        if environment is not None and row // group_size not in copies:
            copies[row // group_size] = group_copies(environment, group_size)
        own = copies[row // group_size][row % group_size] if environment is not None else None
        states.append(_Row(Trajectory(prompts[row // group_size]), list(messages), own))
    counts = dict.fromkeys(ERROR_KINDS, 0.0) | {"seconds": 0.0, "cut": 0.0}
    max_model_tokens = params.max_new_tokens * settings.max_turns
    session = engine.start_turns(request, max_model_tokens)
    try:
        live, inserted = list(range(len(states))), [[] for _ in states]
        for turn in range(settings.max_turns):
            outputs = session.generate(live, inserted, [params.max_new_tokens] * len(live))
            next_live, next_inserted = [], []
            for index, output in zip(live, outputs, strict=True):
                state = states[index]
                state.trajectory.add_turn(output)
                text = settings.chat.decode(output.token_ids)
                state.turns.append(text)
                state.messages.append({"role": "assistant", "content": text})
                if not output.stopped:
                    continue  # cut at the token budget: the row ends here
                new = _respond(state, text, rows.start + index, settings, counts)
                if new is None:
                    continue
                if turn == settings.max_turns - 1:
                    counts["cut"] += 1
                    continue
                state.messages += new
                ids = settings.chat.insertion_ids(new)
                state.trajectory.add_inserted(ids)
                next_live.append(index)
                next_inserted.append(ids)
            live, inserted = next_live, next_inserted
            if not live:
                break
    finally:
        session.close()
    return _result(states, counts, engine, settings)


def _open(
    record: dict[str, Any], index: int, settings: AgentSettings
) -> tuple[list[dict[str, Any]], Environment | None]:
    """A prompt's opening messages and its reset environment (None without one)."""
    if settings.environment is None:
        system = [{"role": "system", "content": settings.system_prompt}]
        user = [{"role": "user", "content": record["prompt"]}]
        return (system if settings.system_prompt else []) + user, None
    name = getattr(settings.environment, "__name__", "environment")
    try:
        environment = call_with_timeout(settings.environment, settings.env_timeout_s, record)
        messages = call_with_timeout(environment.reset, settings.env_timeout_s)
    except Exception as error:  # no row can run without its opening: always fatal
        raise EnvironmentError_(f"environment {name}, prompt {index}: {error!r}") from error
    if not isinstance(messages, list) or not messages:
        raise EnvironmentError_(f"environment {name}: reset() must return a list of messages")
    return messages, environment


def _respond(
    state: _Row, text: str, row: int, settings: AgentSettings, counts: dict[str, float]
) -> list[dict[str, Any]] | None:
    """The messages answering a model turn; None when the row is done."""
    calls = settings.parser(text) if settings.tools and settings.parser else []
    if calls:
        state.tool_calls += len(calls)
        return [_tool_message(call, settings, counts) for call in calls]
    if state.environment is None:
        return None
    try:
        value = call_with_timeout(state.environment.step, settings.env_timeout_s, text)
        observation, reward, done = check_step(value, type(state.environment).__name__)
    except (CallTimeout, Exception) as error:
        counts["environment"] += 1
        if settings.env_on_error == "fail":
            name = type(state.environment).__name__
            raise EnvironmentError_(f"environment {name}, row {row}: {error!r}") from error
        state.failed = True
        return None
    if reward is not None:
        state.reward += reward
        state.rewarded = True
    if done:
        return None
    return [{"role": "user", "content": observation}] if observation is not None else []


def _tool_message(call: Parsed, settings: AgentSettings, counts: dict[str, float]) -> dict:
    """Execute one call; its result, cut to max_tool_response_tokens, as a tool message."""
    limit = settings.max_tool_response_tokens
    # Characters bound the tokenizer's work on a huge result before the token cut.
    result = execute_call(call, settings.tools, settings.tool_timeout_s, max_chars=16 * limit)
    counts["seconds"] += result.seconds
    text = result.text
    ids = settings.chat.encode(text)
    if len(ids) > limit:
        text = settings.chat.decode(ids[:limit]) + " [cut]"
    if result.error is not None:
        counts[result.error] += 1
    elif len(ids) > limit:
        counts["too_long"] += 1
    return {"role": "tool", "name": getattr(call, "name", "error"), "content": text}


def _result(
    states: list[_Row], counts: dict[str, float], engine: TurnEngine, settings: AgentSettings
) -> AgentRollout:
    trajectories = [state.trajectory for state in states]
    rollout = assemble_trajectories(trajectories, engine.pad_token_id, engine.device)
    model_tokens = sum(t.model_tokens for t in trajectories)
    inserted = sum(len(t.ids) for t in trajectories) - model_tokens
    rows = max(len(states), 1)
    metrics = {
        "agent/turns/mean": sum(len(s.turns) for s in states) / rows,
        "agent/tool_calls/mean": sum(s.tool_calls for s in states) / rows,
        "agent/tool_call_frac": sum(s.tool_calls > 0 for s in states) / rows,
        "agent/cut_at_max_turns_frac": counts["cut"] / rows,
        "agent/tool/seconds": counts["seconds"],
        **{f"agent/{kind}/errors": counts[kind] for kind in ERROR_KINDS},
    }
    return AgentRollout(
        rollout=rollout,
        completions=["\n".join(s.turns) for s in states],
        conversations=[s.messages for s in states],
        env_reward=[s.reward for s in states],
        env_rewarded=any(s.rewarded for s in states),
        skip=[s.failed and settings.env_on_error == "skip_group" for s in states],
        block_metrics=metrics,
        inserted_tokens=inserted,
        model_tokens=model_tokens,
    )


def env_token_frac(inserted_tokens: float, model_tokens: float) -> float:
    """``agent/env_token_frac``: Σ inserted / Σ (inserted + model) tokens after the prompt."""
    return inserted_tokens / max(inserted_tokens + model_tokens, 1.0)


def _environment_reward(
    prompts: list[str], completions: list[str], env_reward: list[float], **_: Any
) -> list[float]:
    """The environment's own rewards, summed over the row's steps (0.0 without any)."""
    return env_reward


# Scored with the configured rewards when an environment is set (weight 1 in the total);
# logged as reward/environment/… like any reward. Its column: AgentRollout.env_reward.
ENVIRONMENT_REWARD = RewardFunction(name="environment", fn=_environment_reward)
