"""The generate stage: sample prompts, roll out G completions each, score them, gather the
per-row results, and repeat (dynamic sampling) until the step has enough signal."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from grpo.algo.groups import Groups
from grpo.data.dataset import PromptDataset
from grpo.data.sampler import PromptSampler
from grpo.rewards.runner import RewardError, RewardFunction, score_completions
from grpo.rollout.engine import RolloutEngine, SamplingParams
from grpo.training.distributed import Dist
from grpo.training.rounds import (
    Generation,
    Round,
    RowResults,
    merge_rounds,
    needs_another_round,
)


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
    prompts = [dataset.prompts[i] for i in row_prompts]
    columns = {name: [values[i] for i in row_prompts] for name, values in dataset.columns.items()}
    try:
        scores = score_completions(rollouts.rewards, prompts, completions, columns)
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
    )
    results = RowResults(**dist.gather_columns(local.columns()))
    if rollouts.overlong_buffer > 0:  # on the whole round's rows: the same in every process
        max_length = rollouts.sampling.max_new_tokens
        results = results.with_overlong_penalty(
            max_length, rollouts.overlong_buffer, rollouts.overlong_penalty
        )
    groups = Groups.of(results.reward_B, results.skip_B, group_size)
    return Round(indices, rollout, prompts, completions, scores, results, groups)
