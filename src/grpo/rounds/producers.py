"""Producers: what turns a round's prompts into this process's rows, before scoring.

Two producers stand behind one interface, :class:`Producer`: :class:`SingleTurn` samples G
completions per prompt from a :class:`~grpo.rollout.engine.RolloutEngine`, and
:class:`MultiTurn` rolls out conversations with tools and an environment
(:func:`~grpo.agents.trajectories.run_trajectories`) on a
:class:`~grpo.rollout.turns.TurnEngine`. Each returns one :class:`ProducedRound`; the round
source (:mod:`grpo.rounds.source`) scores and gathers it. A producer holds its engine, its
sampling settings and the noise generator; it draws nothing else at random.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from grpo.agents.trajectories import ENVIRONMENT_REWARD, AgentSettings, run_trajectories
from grpo.data.dataset import PromptDataset
from grpo.rewards.runner import RewardFunction
from grpo.rollout.engine import Rollout, RolloutEngine, RolloutRequest, SamplingParams
from grpo.rollout.turns import TurnEngine


@dataclass
class ProducedRound:
    """What a producer returns for one round: this process's rows, before scoring."""

    rollout: Rollout
    prompts: list[str]  # each row's prompt text
    completions: list[str]  # each row's completion text (multi-turn: the model's turns)
    columns: dict[str, list[Any]]  # what reward functions get beside prompts and completions
    extra_rewards: list[RewardFunction]  # scored after the configured ones (an environment's)
    skip_B: torch.Tensor | None  # bool: rows whose rewards must not count; None: none
    metrics: dict[str, float]  # the producer's own, reduced by the metric table
    inserted_tokens_B: torch.Tensor | None  # int64: tokens tools/environment inserted
    failed_B: torch.Tensor | None = None  # bool: an environment failed; the total reward is 0


class Producer(Protocol):
    """Rows ``rows`` of the len(indices)·G rows of a round on dataset prompts ``indices``."""

    dataset: PromptDataset  # the prompts' file and rows name a failure's row

    def produce(self, indices: list[int], group_size: int, rows: slice) -> ProducedRound: ...


def _row_texts(
    dataset: PromptDataset, indices: list[int], group_size: int, rows: slice
) -> tuple[list[str], dict[str, list[Any]]]:
    """Each of the rows' prompt text and dataset columns (row b is prompt b // G)."""
    row_prompts = [index for index in indices for _ in range(group_size)][rows]
    prompts = [dataset.prompts[i] for i in row_prompts]
    columns = {name: [values[i] for i in row_prompts] for name, values in dataset.columns.items()}
    return prompts, columns


@dataclass(frozen=True)
class SingleTurn:
    """One completion per row, sampled on the prompt's token ids."""

    engine: RolloutEngine
    sampling: SamplingParams
    generator: torch.Generator  # the same seed in every process: noise for the whole round
    dataset: PromptDataset
    decode: Callable[[torch.Tensor, torch.Tensor], list[str]]  # (ids_BT, mask_BT) → texts

    def produce(self, indices: list[int], group_size: int, rows: slice) -> ProducedRound:
        prompts, columns = _row_texts(self.dataset, indices, group_size, rows)
        prompt_ids = [self.dataset.prompt_token_ids[i] for i in indices]
        request = RolloutRequest.block(prompt_ids, group_size, self.sampling, self.generator, rows)
        rollout = self.engine.generate_rows(request)
        completions = self.decode(rollout.completion_ids_BT, rollout.completion_mask_BT)
        return ProducedRound(rollout, prompts, completions, columns, [], None, {}, None)


@dataclass(frozen=True)
class MultiTurn:
    """Multi-turn trajectories: the model's turns, tool results and environment replies."""

    engine: TurnEngine
    sampling: SamplingParams
    generator: torch.Generator
    dataset: PromptDataset
    settings: AgentSettings

    def produce(self, indices: list[int], group_size: int, rows: slice) -> ProducedRound:
        dataset = self.dataset
        records = [
            {"prompt": dataset.prompts[i], **{k: v[i] for k, v in dataset.columns.items()}}
            for i in indices
        ]
        block = range(len(indices) * group_size)[rows]
        names = [dataset.where(i) for i in indices]
        agent = run_trajectories(
            self.engine,
            records,
            group_size,
            self.sampling,
            self.generator,
            block,
            self.settings,
            names,
        )
        prompts, columns = _row_texts(dataset, indices, group_size, rows)
        extra = [ENVIRONMENT_REWARD] if self.settings.environment is not None else []
        return ProducedRound(
            rollout=agent.rollout,
            prompts=prompts,
            completions=agent.completions,
            columns=columns | agent.columns,
            extra_rewards=extra,
            skip_B=torch.tensor(agent.skip, dtype=torch.bool),
            metrics=agent.block_metrics,
            inserted_tokens_B=inserted_tokens(agent.rollout),
            failed_B=torch.tensor(agent.failed, dtype=torch.bool),
        )


def inserted_tokens(rollout: Rollout) -> torch.Tensor:
    """Per row: the completion columns' tokens that tools and the environment inserted."""
    return (rollout.real_mask_BT.sum(dim=1) - rollout.completion_mask_BT.sum(dim=1)).cpu()
