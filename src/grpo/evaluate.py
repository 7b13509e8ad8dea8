"""Greedy evaluation: the fraction of prompts whose greedy completion a reward scores ≥ 1."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from grpo.data import PromptDataset
from grpo.models import eos_token_ids
from grpo.rewards.runner import RewardFunction, score_completions
from grpo.rollout import SamplingParams, TransformersEngine


def greedy_completions(
    model: nn.Module,
    tokenizer: Any,
    prompt_token_ids: list[list[int]],
    *,
    max_new_tokens: int,
    batch_size: int = 256,
) -> list[str]:
    engine = TransformersEngine(
        model,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_ids=eos_token_ids(model, tokenizer),
        max_sequences_per_batch=batch_size,
    )
    rollout = engine.generate(
        prompt_token_ids, 1, SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens)
    )
    lengths = rollout.completion_mask_BT.sum(dim=1).tolist()
    rows = [row[:n] for row, n in zip(rollout.completion_ids_BT.tolist(), lengths, strict=True)]
    return tokenizer.batch_decode(rows, skip_special_tokens=True)


@torch.no_grad()
def greedy_accuracy(
    model: nn.Module,
    tokenizer: Any,
    dataset: PromptDataset,
    reward: RewardFunction,
    *,
    max_new_tokens: int,
) -> float:
    """Mean over prompts of [reward(greedy completion) ≥ 1]."""
    completions = greedy_completions(
        model, tokenizer, dataset.prompt_token_ids, max_new_tokens=max_new_tokens
    )
    scores = score_completions(
        [reward], dataset.prompts, completions, dataset.columns, group_size=1
    )
    return (scores.per_function[reward.name] >= 1.0).float().mean().item()
