"""Sizes of one training step derived from the config: :class:`BatchPlan`."""

from __future__ import annotations

import math
from dataclasses import dataclass

from grpo.config.errors import ConfigError
from grpo.config.sections import Config


@dataclass(frozen=True)
class BatchPlan:
    """Sizes derived once from the config, printed at start-up."""

    prompts_per_step: int
    group_size: int
    sequences_per_step: int
    sequences_per_micro_batch: int
    max_micro_batches_per_step: int
    inner_iterations: int
    world_size: int = 1
    sequences_per_rank: int = 0  # rows each process generates, scores and trains on

    def describe(self) -> str:
        text = (
            f"{self.prompts_per_step} prompts/step × G={self.group_size} = "
            f"{self.sequences_per_step} sequences/step; micro-batches of "
            f"{self.sequences_per_micro_batch} sequences (≤ {self.max_micro_batches_per_step} "
            f"per optimizer step); μ = {self.inner_iterations} optimizer step(s) per rollout batch"
        )
        if self.world_size > 1:
            text += (
                f"; {self.world_size} processes × {self.sequences_per_rank} sequences "
                f"(rank r: rows [r·{self.sequences_per_rank}, (r+1)·{self.sequences_per_rank}))"
            )
        return text


def batch_plan(config: Config, world_size: int = 1) -> BatchPlan:
    """Sizes of one step. With ``world_size`` processes each takes a contiguous block of
    sequences_per_step / world_size rows, which must divide exactly (a group may span ranks)."""
    sequences = config.train.prompts_per_step * config.rollout.group_size
    if world_size < 1 or sequences % world_size:
        raise ConfigError(
            f"train.prompts_per_step × rollout.group_size = {config.train.prompts_per_step} × "
            f"{config.rollout.group_size} = {sequences} sequences per step cannot be split evenly "
            f"over {world_size} processes: make it a multiple of {world_size}"
        )
    if world_size > 1:
        _check_several_processes(config)
    per_rank = sequences // world_size
    return BatchPlan(
        prompts_per_step=config.train.prompts_per_step,
        group_size=config.rollout.group_size,
        sequences_per_step=sequences,
        sequences_per_micro_batch=config.train.sequences_per_micro_batch,
        max_micro_batches_per_step=math.ceil(per_rank / config.train.sequences_per_micro_batch),
        inner_iterations=config.algorithm.inner_iterations,
        world_size=world_size,
        sequences_per_rank=per_rank,
    )


def _check_several_processes(config: Config) -> None:
    """What runs in one process only, or not with every strategy."""
    if config.distributed.strategy == "fsdp" and config.model.lora_rank:
        raise ConfigError(
            "distributed.strategy = 'fsdp' with model.lora_rank > 0 is not supported: "
            "use distributed.strategy = 'ddp' (only the adapters train, so DDP is cheap)"
        )
    if config.algorithm.estimator == "ppo":
        raise ConfigError("algorithm.estimator = 'ppo' runs in a single process (no torchrun)")
