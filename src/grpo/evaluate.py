"""Greedy evaluation: the fraction of prompts whose greedy completion a reward scores ≥ 1."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from grpo.config import Config, ConfigError
from grpo.data import PromptDataset, load_dataset_for
from grpo.models import eos_token_ids
from grpo.rewards.runner import RewardFunction, resolve_function, score_completions
from grpo.rollout import SamplingParams, TransformersEngine


def greedy_completions(
    model: nn.Module,
    tokenizer: Any,
    prompt_token_ids: list[list[int]],
    *,
    max_new_tokens: int,
    batch_size: int = 256,
    all_done: Callable[[bool], bool] | None = None,
) -> list[str]:
    """Greedy completions as text; ``all_done`` keeps FSDP processes decoding in lockstep."""
    engine = TransformersEngine(
        model,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_ids=eos_token_ids(model, tokenizer),
        max_sequences_per_batch=batch_size,
        all_done=all_done,
    )
    greedy = SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens)
    rollout = engine.generate(prompt_token_ids, 1, greedy)
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
    all_done: Callable[[bool], bool] | None = None,
) -> float:
    """Mean over prompts of [reward(greedy completion) ≥ 1]."""
    completions = greedy_completions(
        model, tokenizer, dataset.prompt_token_ids, max_new_tokens=max_new_tokens, all_done=all_done
    )
    scores = score_completions(
        [reward], dataset.prompts, completions, dataset.columns, group_size=1
    )
    return (scores.per_function[reward.name] >= 1.0).float().mean().item()


def held_out_evaluator(
    config: Config,
    tokenizer: Any,
    rewards: list[RewardFunction],
    *,
    all_done: Callable[[bool], bool] | None = None,
) -> Callable[[nn.Module], float] | None:
    """A function policy → held-out greedy accuracy, or None when ``eval.path`` is empty.

    The reward is ``eval.reward`` or else the first accuracy reward of the run. Under
    several processes each evaluates the whole set (same prompts, same result), so none
    waits for another; under FSDP ``all_done`` keeps them decoding in lockstep, since every
    forward pass gathers parameters from all of them.
    """
    if not config.eval.path:
        return None
    if config.eval.reward:
        reward = RewardFunction(name=config.eval.reward, fn=resolve_function(config.eval.reward))
    else:
        accuracy_rewards = [f for f in rewards if getattr(f.fn, "is_accuracy", False)]
        if not accuracy_rewards:
            raise ConfigError(
                "eval.path is set but no reward is an accuracy reward: set eval.reward"
            )
        reward = accuracy_rewards[0]
    dataset = load_dataset_for(config.eval.path, tokenizer, config.data)
    max_new_tokens = config.eval.max_new_tokens or config.rollout.max_new_tokens

    def evaluate(policy: nn.Module) -> float:
        return greedy_accuracy(
            policy, tokenizer, dataset, reward, max_new_tokens=max_new_tokens, all_done=all_done
        )

    return evaluate
