"""The generate stage: sample prompts, roll out G completions each, score them, gather the
per-row results, and repeat (dynamic sampling) until the step has enough signal."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from grpo.agents.chat import ChatFormat
from grpo.agents.environment import resolve_environment
from grpo.agents.parser import get_parser
from grpo.agents.rollout import (
    ENVIRONMENT_REWARD,
    AgentRollout,
    AgentSettings,
    agent_rollout,
)
from grpo.agents.tools import resolve_tools, tool_schema
from grpo.algo.groups import Groups
from grpo.data.dataset import PromptDataset
from grpo.data.sampler import PromptSampler
from grpo.eval.reasoning import self_corrects, thinking_chars
from grpo.rewards.runner import RewardError, RewardFunction, score_completions
from grpo.rollout.engine import Rollout, RolloutEngine, SamplingParams
from grpo.rollout.turns import TurnEngine
from grpo.training.rounds import (
    Generation,
    Round,
    RowResults,
    merge_rounds,
    needs_another_round,
)
from grpo.training.runtime.distributed import Dist


@dataclass(frozen=True)
class Rollouts:
    """What a step generates with: the engine and how it samples, the prompts and rewards."""

    engine: RolloutEngine
    sampling: SamplingParams
    generator: torch.Generator  # the same seed in every process: noise for the whole step
    dataset: PromptDataset
    rewards: list[RewardFunction]
    accuracy_reward: str | None  # the reward whose value ≥ 1 means a correct answer
    decode: Callable[[torch.Tensor, torch.Tensor], list[str]]  # (ids_BT, mask_BT) → texts
    pad_token_id: int
    overlong_buffer: int = 0  # DAPO's overlong shaping (algorithm.overlong_buffer); 0 = off
    overlong_penalty: float = 1.0
    agent: AgentSettings | None = None  # multi-turn rollouts (the [agent] section)
    self_correction: re.Pattern[str] | None = None  # train.self_correction_phrases


def generate(
    rollouts: Rollouts,
    sampler: PromptSampler,
    dist: Dist,
    *,
    prompts_per_step: int,
    group_size: int,
    max_rounds: int,
) -> tuple[Generation, dict[str, float]]:
    """Rounds of ``prompts_per_step`` prompts × G until ``prompts_per_step`` groups are
    informative or ``max_rounds`` is reached (1: an ordinary step); also the seconds spent
    rolling out and scoring."""
    rounds: list[Round] = []
    seconds = {"rollout": 0.0, "reward": 0.0}
    while not rounds or needs_another_round(rounds, prompts_per_step, max_rounds):
        indices = sampler.next_indices(prompts_per_step)
        rounds.append(generate_round(rollouts, indices, group_size, dist, seconds))
    return merge_rounds(rounds, rollouts.pad_token_id), seconds


def text_features(
    completions: list[str], pattern: re.Pattern[str] | None
) -> dict[str, torch.Tensor]:
    """Per completion: its thinking length (−1 without a ``<think>`` block) and whether it
    self-corrects (see :mod:`grpo.eval.reasoning`); gathered with the other row results."""
    chars = [thinking_chars(completion) for completion in completions]
    return {
        "think_chars_B": torch.tensor([-1.0 if c is None else float(c) for c in chars]),
        "self_correction_B": torch.tensor([self_corrects(c, pattern) for c in completions]),
    }


def generate_round(
    rollouts: Rollouts,
    indices: list[int],
    group_size: int,
    dist: Dist,
    seconds: dict[str, float],
) -> Round:
    """One round on prompts ``indices``: this process rolls out and scores its block of
    the rows; the per-row results are then gathered, so every process has the round's."""
    started = time.perf_counter()
    dataset = rollouts.dataset
    rows = dist.rows(len(indices) * group_size)  # this process's block of the round's rows
    row_prompts = [index for index in indices for _ in range(group_size)][rows]  # b → b // G
    prompts = [dataset.prompts[i] for i in row_prompts]
    columns = {name: [values[i] for i in row_prompts] for name, values in dataset.columns.items()}
    rewards, agent = rollouts.rewards, None
    if rollouts.agent is not None:
        agent = _agent_rollout(rollouts, indices, group_size, rows)
        rollout, completions = agent.rollout, agent.completions
        columns |= agent.columns
        if rollouts.agent.environment is not None:
            rewards = [*rewards, ENVIRONMENT_REWARD]
    else:
        rollout = rollouts.engine.generate(
            [dataset.prompt_token_ids[i] for i in indices],
            group_size,
            rollouts.sampling,
            rollouts.generator,
            rows=rows if dist.enabled else None,
        )
        completions = rollouts.decode(rollout.completion_ids_BT, rollout.completion_mask_BT)
    seconds["rollout"] += time.perf_counter() - started
    started = time.perf_counter()
    try:
        scores = score_completions(rewards, prompts, completions, columns)
        if agent is not None:
            scores.skip_B |= torch.tensor(agent.skip, dtype=torch.bool)
            # The step's share of inserted tokens is a ratio of sums over every process's
            # rows (step_metrics, from env_tokens_B), not a mean of per-process ratios.
            scores.metrics.update(
                {k: v for k, v in agent.metrics.items() if k != "agent/env_token_frac"}
            )
    except RewardError as error:
        if not dist.enabled:
            raise
        where = f"process {dist.rank} (its row 0 is the step's row {rows.start})"
        raise RewardError(f"{where}: {error}", error.function, error.row) from error
    seconds["reward"] += time.perf_counter() - started
    local = RowResults(
        reward_B=scores.total_B,
        skip_B=scores.skip_B,
        length_B=rollout.completion_mask_BT.sum(dim=1).cpu(),
        truncated_B=rollout.truncated_B.cpu(),
        accuracy_B=scores.per_function[rollouts.accuracy_reward]
        if rollouts.accuracy_reward
        else None,
        **text_features(completions, rollouts.self_correction),
        env_tokens_B=None if agent is None else _inserted_tokens(rollout),
    )
    results = RowResults(**dist.gather_columns(local.columns()))
    if rollouts.overlong_buffer > 0:  # on the whole round's rows: the same in every process
        max_length = rollouts.sampling.max_new_tokens
        results = results.with_overlong_penalty(
            max_length, rollouts.overlong_buffer, rollouts.overlong_penalty
        )
    groups = Groups.of(results.reward_B, results.skip_B, group_size)
    return Round(indices, rollout, prompts, completions, scores, results, groups)


def _inserted_tokens(rollout: Rollout) -> torch.Tensor:
    """Per row: the completion columns' tokens that tools and the environment inserted."""
    return (rollout.real_mask_BT.sum(dim=1) - rollout.completion_mask_BT.sum(dim=1)).cpu()


def _agent_rollout(
    rollouts: Rollouts, indices: list[int], group_size: int, rows: slice
) -> AgentRollout:
    """This process's block of the round as multi-turn trajectories (:mod:`grpo.agents`)."""
    dataset, settings = rollouts.dataset, rollouts.agent
    assert settings is not None and isinstance(rollouts.engine, TurnEngine)
    records = [
        {"prompt": dataset.prompts[i], **{k: v[i] for k, v in dataset.columns.items()}}
        for i in indices
    ]
    block = range(len(indices) * group_size)[rows]
    return agent_rollout(
        rollouts.engine,
        records,
        group_size,
        rollouts.sampling,
        rollouts.generator,
        block,
        settings,
    )


def agent_settings(config: Any, tokenizer: Any) -> AgentSettings:
    """The ``[agent]`` section resolved: tools imported and checked, the environment class."""
    tools = resolve_tools(config.tools)
    return AgentSettings(
        chat=ChatFormat(tokenizer, [tool_schema(fn) for fn in tools.values()]),
        tools=tools,
        parser=get_parser(config.parser),
        environment=resolve_environment(config.environment) if config.environment else None,
        max_turns=config.max_turns,
        max_tool_response_tokens=config.max_tool_response_tokens,
        tool_timeout_s=config.tool_timeout_s,
        env_timeout_s=config.env_timeout_s,
        env_on_error=config.env_on_error,
    )
